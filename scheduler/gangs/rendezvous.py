"""What a bound gang member was told (rendezvous address, rank order, parallelism) that its peers must match.

Read back from the `meshfit.io/*` annotations a meshfit bind wrote (`scheduler.handoff.assignment.assignment`), so a restarted
service knows what the bound members expect; the ledger (`scheduler.gangs.ledger`) keeps it per gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.handoff.assignment import ANNOTATION_MASTER_ADDR, AssignmentError, PodAssignment, parse_assignment


@dataclass(frozen=True)
class GivenRendezvous:
    """What a bound member was told that its peers must match: master address, rank order, parallelism."""

    master_addr: str
    rank_order: str
    parallelism: str
    pod: str = ""
    """The bound pod it was read from (for messages); not compared."""

    def agrees_with(self, other: GivenRendezvous) -> bool:
        """Same master address, rank order and parallelism."""
        return (self.master_addr, self.rank_order, self.parallelism) == (
            other.master_addr, other.rank_order, other.parallelism)

    def describe(self) -> str:
        """`master-addr=..., rank-order=..., parallelism=...` (as pod `pod` was given)."""
        return (f"master-addr={self.master_addr}, rank-order={self.rank_order}, "
                f"parallelism={self.parallelism} (given to pod {self.pod or '?'})")


def given_from_assignment(assignment: PodAssignment, pod: str = "") -> GivenRendezvous:
    """The rendezvous a typed `PodAssignment` states (what its Binding tells the pod)."""
    return GivenRendezvous(assignment.master_addr, assignment.rank_order, str(assignment.parallelism), pod)


def given_from_annotations(annotations: Mapping[str, str] | None, pod: str = "") -> GivenRendezvous | None:
    """The rendezvous a meshfit bind wrote into a pod's annotations, or None (not bound by meshfit, or invalid)."""
    if not annotations or ANNOTATION_MASTER_ADDR not in annotations:
        return None
    try:
        assignment = parse_assignment(annotations)
    except AssignmentError:
        return None
    return given_from_assignment(assignment, pod)
