"""Placement results: what a policy decided for a gang, the rank table and its predicted cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.placement.jobs import AXES, Gang

PLACED = "placed"
UNSCHEDULABLE = "unschedulable"


@dataclass(frozen=True)
class Assignment:
    """A policy's answer: node index per pod index (all pods) or None with a reason."""

    pod_nodes: tuple[int, ...] | None
    reason: str | None = None
    rank_order: str | None = None
    """The rank order the policy chose (for `rank-order: auto`); None keeps the gang's."""

    @classmethod
    def unschedulable(cls, reason: str) -> "Assignment":
        """No placement, with the reason."""
        return cls(None, reason)


@dataclass(frozen=True)
class RankInfo:
    """One rank: its pod, node, local rank within the pod and coordinates on every axis."""

    rank: int
    pod_index: int
    node: str
    local_rank: int
    coords: dict[str, int]


@dataclass(frozen=True)
class CostReport:
    """Predicted communication seconds per training step, per axis, and a lower bound."""

    step_comm_seconds: float
    lower_bound_seconds: float
    by_axis: dict[str, float]
    tier_by_axis: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md `cost` object."""
        return {
            "step_comm_seconds": self.step_comm_seconds,
            "lower_bound_seconds": self.lower_bound_seconds,
            "by_axis": dict(self.by_axis),
            "tier_by_axis": dict(self.tier_by_axis),
        }


@dataclass
class Placement:
    """The engine's result for one gang: placed (nodes, ranks, cost) or unschedulable (reason)."""

    gang: Gang
    status: str
    policy: str
    rank_order: str
    reason: str | None = None
    pod_nodes: list[str] = field(default_factory=list)
    ranks: list[RankInfo] = field(default_factory=list)
    cost: CostReport | None = None

    @property
    def placed(self) -> bool:
        """True when every pod got a node."""
        return self.status == PLACED

    def pod_ranks(self, index: int) -> list[int]:
        """Ranks of pod `index`."""
        return list(self.gang.pod_ranks(index))

    def to_json(self) -> dict[str, Any]:
        """The `meshfit place -o json` document of DESIGN.md."""
        gang = self.gang
        return {
            "job": gang.key,
            "status": self.status,
            "reason": self.reason,
            "policy": self.policy,
            "world_size": gang.world_size,
            "parallelism": {axis: gang.parallelism.degree(axis) for axis in AXES},
            "rank_order": self.rank_order,
            "pods": [
                {"index": pod.index, "name": pod.name, "node": self.pod_nodes[pod.index],
                 "ranks": self.pod_ranks(pod.index)}
                for pod in gang.pods
            ] if self.placed else [],
            "ranks": [
                {"rank": r.rank, "pod_index": r.pod_index, "node": r.node,
                 "local_rank": r.local_rank, "coords": dict(r.coords)}
                for r in self.ranks
            ],
            "cost": self.cost.to_json() if self.cost else None,
        }
