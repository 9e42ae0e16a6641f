"""Runtime handoffs registered by name: render a placed job for its operator, or run it locally.

Each module defines `NAME`, one handoff class and `factory(**options)`.  Cluster handoffs
(`pytorchjob`, `jobset`, `trainjob`) implement `RenderHandoff`; `local` implements `RunHandoff`.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol

from scheduler.placement import Placement

_MODULES = (
    "plugins.handoffs.pytorchjob",
    "plugins.handoffs.jobset",
    "plugins.handoffs.trainjob",
    "plugins.handoffs.local",
)

KIND_HANDOFFS = {"PyTorchJob": "pytorchjob", "JobSet": "jobset", "TrainJob": "trainjob"}
"""Manifest kind -> the handoff that renders it."""


class RenderHandoff(Protocol):
    """Turns a job manifest plus its placement into the objects to apply (pinned, with the rank environment)."""

    name: str

    def render(self, manifest: dict[str, Any], placement: Placement) -> list[dict[str, Any]]:
        """The rendered Kubernetes objects."""
        ...


class RunHandoff(Protocol):
    """Runs a placed job itself (the local runtime)."""

    name: str

    def run(self, placement: Placement, options: Any, on_step: Callable[[int, float], None] | None = None) -> Any:
        """Run the job and return its result summary."""
        ...


def _load_registry() -> dict[str, Callable[..., Any]]:
    registry: dict[str, Callable[..., Any]] = {}
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        registry[module.NAME] = module.factory
    return registry


HANDOFFS: dict[str, Callable[..., Any]] = _load_registry()
"""Handoff name -> factory."""


def get_handoff(name: str, **options: object) -> Any:
    """Instantiate the handoff registered as `name`; ValueError naming the known ones otherwise."""
    factory = HANDOFFS.get(name)
    if factory is None:
        raise ValueError(f"unknown handoff {name!r} (known: {', '.join(sorted(HANDOFFS))})")
    return factory(**options)


def handoff_for_manifest(manifest: dict[str, Any]) -> RenderHandoff:
    """The render handoff for the manifest's kind; ValueError for kinds that cannot be rendered."""
    kind = manifest.get("kind")
    if kind not in KIND_HANDOFFS:
        raise ValueError(f"cannot render kind {kind!r} (supported: {', '.join(KIND_HANDOFFS)})")
    return get_handoff(KIND_HANDOFFS[kind])
