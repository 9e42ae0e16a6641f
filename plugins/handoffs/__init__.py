"""Runtime handoffs: render a placed job for its operator, or run it locally.

Each module defines `NAME`, one handoff class and `factory(**options)`, declared as an entry point of
the `meshfit.handoffs` group in `pyproject.toml`.  The protocols and the registry live in the core
(`scheduler.handoff.assignment.registry`); which handoff renders which manifest kind is decided here.
"""

from __future__ import annotations

from typing import Any

from scheduler.handoff.registry import HANDOFFS, RenderHandoff, RunHandoff, get_handoff

KIND_HANDOFFS = {"PyTorchJob": "pytorchjob", "JobSet": "jobset", "TrainJob": "trainjob"}
"""Manifest kind -> the handoff that renders it."""


def handoff_for_manifest(manifest: dict[str, Any]) -> RenderHandoff:
    """The render handoff for the manifest's kind; ValueError for kinds that cannot be rendered."""
    kind = manifest.get("kind")
    if kind not in KIND_HANDOFFS:
        raise ValueError(f"cannot render kind {kind!r} (supported: {', '.join(KIND_HANDOFFS)})")
    return get_handoff(KIND_HANDOFFS[kind])


__all__ = ["HANDOFFS", "KIND_HANDOFFS", "RenderHandoff", "RunHandoff", "get_handoff", "handoff_for_manifest"]
