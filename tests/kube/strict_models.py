"""Strict validation of core Kubernetes objects against the `kubernetes` client's model classes.

Walks a manifest dict along each model's `attribute_map` / `openapi_types`: an unknown field, or a
value of the wrong JSON type, is an error with its path; the client's own deserialiser then checks
required fields.  (The client alone would silently drop unknown fields - exactly the typos to catch.)
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes

_PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                            "datetime": (str,), "date": (str,)}


def model_name(api_version: str, kind: str) -> str:
    """`apps/v1` + `Deployment` -> `V1Deployment`."""
    version = api_version.rpartition("/")[2]
    return f"{version[0].upper()}{version[1:]}{kind}"


QUANTITY_FIELDS = {"limits", "requests", "capacity", "allocatable", "hard", "size_limit"}
"""Model attributes holding resource quantities, which the API accepts as JSON numbers or strings."""


def _check_type(value: Any, type_name: str, path: str, errors: list[str], quantity: bool = False) -> None:
    if value is None:
        return
    list_match = re.fullmatch(r"List\[(.+)\]", type_name)
    dict_match = re.fullmatch(r"Dict\[str, (.+)\]", type_name)
    if list_match:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _check_type(item, list_match.group(1), f"{path}[{i}]", errors, quantity)
    elif dict_match:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        for key, item in value.items():
            _check_type(item, dict_match.group(1), f"{path}.{key}", errors, quantity)
    elif type_name == "object":
        return
    elif type_name in _PRIMITIVES:
        wanted = (str, int, float) if quantity and type_name == "str" else _PRIMITIVES[type_name]
        if not isinstance(value, wanted) or (type_name != "bool" and isinstance(value, bool)):
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__}")
    else:
        check_model(value, type_name, path, errors)


def check_model(data: Any, type_name: str, path: str = "", errors: list[str] | None = None) -> list[str]:
    """Errors (unknown fields, wrong types) of `data` read as model `type_name`; [] when strictly valid."""
    errors = [] if errors is None else errors
    model = getattr(kubernetes.client, type_name, None)
    if model is None:
        errors.append(f"{path or '.'}: unknown model {type_name}")
        return errors
    if not isinstance(data, dict):
        errors.append(f"{path or '.'}: expected an object for {type_name}")
        return errors
    by_json_name = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, value in data.items():
        attr = by_json_name.get(key)
        if attr is None:
            errors.append(f"{path}.{key}: unknown field of {type_name}")
            continue
        _check_type(value, model.openapi_types[attr], f"{path}.{key}", errors, attr in QUANTITY_FIELDS)
    return errors


def validate_core_object(obj: dict) -> list[str]:
    """Strict field check plus the client's own deserialisation (required fields)."""
    name = model_name(obj["apiVersion"], obj["kind"])
    errors = check_model(obj, name)
    if not errors:
        try:
            kubernetes.client.ApiClient()._ApiClient__deserialize(obj, name)  # noqa: SLF001 (the client's decoder)
        except (ValueError, TypeError) as exc:
            errors.append(f"{name}: {' '.join(str(exc).split())}")
    return errors
