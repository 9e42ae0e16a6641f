"""The runtime-handoff extension point: render a placed job for its operator, or run it locally.

Handoff modules under `plugins/handoffs/` define `NAME`, one handoff class and `factory(**options)`,
declared as entry points of the `meshfit.handoffs` group; `HANDOFFS` loads them on first lookup.
Cluster handoffs (`pytorchjob`, `jobset`, `trainjob`) implement `RenderHandoff`; `local` implements
`RunHandoff`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from scheduler.placement.result import Placement
from scheduler.registry import Registry


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


HANDOFF_GROUP = "meshfit.handoffs"
"""Entry point group of runtime handoffs."""

HANDOFFS: Registry = Registry(HANDOFF_GROUP, "handoff")
"""Handoff name -> factory (loaded from the `meshfit.handoffs` entry points on first lookup)."""


def get_handoff(name: str, **options: object) -> Any:
    """Instantiate the handoff registered as `name`; ValueError naming the known ones otherwise."""
    return HANDOFFS.create(name, **options)
