"""Placement policies: ours (`meshfit`) and faithful baselines.

Each module defines `NAME`, one policy class and `factory(**options)`; declare it as an entry point
of the `meshfit.policies` group in `pyproject.toml`.  The registry itself lives in the core
(`scheduler.placement.result.policy.POLICIES`); the names below are kept for existing callers.
"""

from __future__ import annotations

from scheduler.placement.policy import POLICIES, PlacementPolicy, PolicyFactory, get_policy

__all__ = ["POLICIES", "PlacementPolicy", "PolicyFactory", "get_policy"]
