"""Strict input models: unknown keys are refused with a "did you mean" hint, in one line.

Every file or flag a person writes (topology config, plan candidates, link overrides, fabric config)
is validated by a `StrictModel`; `validation_message` turns pydantic's first error into one line such
as ``links.spine.oversubscripton: unknown key; did you mean 'oversubscription'?``.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Base of every user-facing input model: unknown keys rejected, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` for the closest of `choices` to `word`, else `""`."""
    options = sorted(set(choices))
    matches = difflib.get_close_matches(str(word), options, n=1, cutoff=0.6)
    if not matches and len(str(word)) >= 3:
        matches = [option for option in options if option.startswith(str(word))][:1]
    return f"; did you mean {matches[0]!r}?" if matches else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside an annotation (`M`, `M | None`, `list[M]`, `dict[str, M]`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is None:
        return None
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return _model_in(args[1])
    for arg in args:
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names (and aliases) of the model reached by following `loc` from `model`."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # a dict key or list index: stay on the same element model
        current = _model_in(field.annotation)
    if current is None:
        return []
    names = list(current.model_fields)
    names += [f.alias for f in current.model_fields.values() if f.alias]
    return names


def validation_message(exc: ValidationError, model: type[BaseModel], what: str = "") -> str:
    """One line for pydantic's first error: `where: message`, with a did-you-mean hint for unknown keys."""
    errors = exc.errors()
    first = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])  # a typo explains the rest
    loc = tuple(first.get("loc", ()))
    where = ".".join(str(p) for p in loc) or what or model.__name__
    if first.get("type") == "extra_forbidden" and loc:
        allowed = _fields_at(model, loc[:-1])
        hint = did_you_mean(str(loc[-1]), allowed)
        known = "" if hint else f" (known: {', '.join(allowed)})" if allowed else ""
        return f"{where}: unknown key{hint}{known}"
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {message}"


def unknown_name_message(kind: str, name: str, known: Iterable[str]) -> str:
    """`unknown KIND 'x'; did you mean 'y'?` (or the known names when nothing is close)."""
    known = sorted(set(known))
    hint = did_you_mean(name, known)
    return f"unknown {kind} {name!r}{hint}" + ("" if hint else f" (known: {', '.join(known)})")


__all__ = ["StrictModel", "did_you_mean", "validation_message", "unknown_name_message"]
