"""The `Binder` extension point and the `meshfit.io/*` annotations a bound pod receives.

The binding extender must create the pod's Binding itself; `KubeBinder` (scheduler.kube.binder)
posts it to the API server, `MemoryBinder` (embedded mode, tests) keeps it in memory.  Both get
the rank assignment as annotations, which `meshfit launch` reads through the downward API.
"""

from __future__ import annotations

from typing import Protocol

from scheduler.handoff import DEFAULT_MASTER_PORT, PodAssignment
from scheduler.jobs import AUTO_RANK_ORDER, DEFAULT_RANK_ORDER, parse_rank_order
from scheduler.layout import rank_to_coords
from scheduler.reservations import Reservation

ANNOTATION_PREFIX = "meshfit.io/"


class BindConflict(RuntimeError):
    """The pod cannot be bound there (already bound elsewhere, gone, or the node is full)."""


class Binder(Protocol):
    """Binds one pod to one node and records its assignment annotations; raises on conflict."""

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        """Create the Binding (and patch the annotations); raise on any failure."""
        ...


def gang_annotations(entry: Reservation, index: int) -> dict[str, str]:
    """Annotations for pod `index` of a reserved gang (`scheduler.handoff` format; master = pod 0's node)."""
    gang = entry.gang
    order_text = entry.placement.rank_order if entry.placement is not None else gang.rank_order
    if order_text == AUTO_RANK_ORDER:
        order_text = DEFAULT_RANK_ORDER
    order = parse_rank_order(order_text)
    ranks = tuple(gang.pod_ranks(index))
    assignment = PodAssignment(
        gang=gang.key, pod_index=index, ranks=ranks,
        coords=tuple(rank_to_coords(rank, gang.parallelism, order) for rank in ranks),
        rank_order=order_text, world_size=gang.world_size, master_addr=entry.node_of(0) or "",
        master_port=DEFAULT_MASTER_PORT, parallelism=gang.parallelism)
    return assignment.to_annotations()
