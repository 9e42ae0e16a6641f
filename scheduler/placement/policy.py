"""The placement-policy extension point and its registry.

A policy module under `plugins/policies/` defines `NAME`, one class implementing
`PlacementPolicy`, and a `factory(**options)`, declared as an entry point of the `meshfit.policies`
group (`NAME = "module:factory"` in `pyproject.toml`); `POLICIES` loads them on first lookup.
Policies only choose nodes (and, for `rank-order: auto`, an order); the engine builds the rank
table and prices every policy's answer with the same cost model, so comparisons are fair.
"""

from __future__ import annotations

from typing import Callable, Protocol

from scheduler.placement.jobs import Gang
from scheduler.placement.result import Assignment
from scheduler.registry import Registry
from topology.model import ClusterTopology


class PlacementPolicy(Protocol):
    """Chooses a node for every pod of a gang, or says why it cannot; never mutates `topo`.

    A policy with size limits (the exact `optimal` search) may also define
    `instance_too_large(gang, topo) -> str | None`: the CLI then reports an instance past them as bad
    input (exit 2, with the reason) instead of an unschedulable gang that other policies would place.
    """

    name: str

    def assign(self, gang: Gang, topo: ClusterTopology) -> Assignment:
        """Return node indices by pod index using only free GPUs on schedulable nodes."""
        ...


PolicyFactory = Callable[..., PlacementPolicy]


POLICY_GROUP = "meshfit.policies"
"""Entry point group of placement policies."""

POLICIES: Registry = Registry(POLICY_GROUP, "policy")
"""Policy name -> factory (loaded from the `meshfit.policies` entry points on first lookup)."""


def get_policy(name: str, **options: object) -> PlacementPolicy:
    """Instantiate the policy registered as `name`; ValueError naming the known ones otherwise."""
    return POLICIES.create(name, **options)
