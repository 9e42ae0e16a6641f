"""Gang sources: which gang a pod belongs to (Volcano, coscheduling, Kueue, JobSet, Kubeflow, Job, label).

Each module defines a source class with `name` and `priority` and a factory, declared as an entry
point of the `meshfit.gang_sources` group in `pyproject.toml`.  The core asks them in priority order
(`scheduler.gangs.membership.identify`); the names below are kept for existing callers.
"""

from __future__ import annotations

from typing import Any

from scheduler.gangs.sources import GangMembership, GangSource, Lookup, NotAGangMember
from scheduler.gangs.membership import GANG_SOURCES, gang_sources, identify_with_sources as identify


def __getattr__(name: str) -> Any:
    """`SOURCES` (name -> factory, in priority order) and `PRIORITY` (names in the order asked), computed lazily."""
    if name == "PRIORITY":
        return tuple(source.name for source in gang_sources())
    if name == "SOURCES":
        return {source.name: GANG_SOURCES[source.name] for source in gang_sources()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GangMembership", "GangSource", "Lookup", "NotAGangMember", "PRIORITY", "SOURCES", "identify"]
