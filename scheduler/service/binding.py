"""The `Binder` extension point and the `meshfit.io/*` annotations a bound pod receives.

The binding extender must create the pod's Binding itself; `KubeBinder` (scheduler.kube.binder)
posts it to the API server, `MemoryBinder` (embedded mode, tests) keeps it in memory.  Both get
the rank assignment as annotations, which `meshfit launch` reads through the downward API.
"""

from __future__ import annotations

import json
from typing import Protocol

from scheduler.jobs import parse_rank_order
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
    """Annotations for pod `index` of a reserved gang: its ranks, coordinates and the gang's layout."""
    gang = entry.gang
    order_text = entry.placement.rank_order if entry.placement is not None else gang.rank_order
    if order_text == "auto":
        order_text = "tp-cp-ep-dp-pp"
    order = parse_rank_order(order_text)
    ranks = list(gang.pod_ranks(index))
    coords = [rank_to_coords(rank, gang.parallelism, order) for rank in ranks]
    master = entry.node_of(0) or ""
    return {
        "meshfit.io/gang": gang.key,
        "meshfit.io/pod-index": str(index),
        "meshfit.io/ranks": ",".join(str(r) for r in ranks),
        "meshfit.io/coords": json.dumps(coords, separators=(",", ":")),
        "meshfit.io/rank-order": order_text,
        "meshfit.io/world-size": str(gang.world_size),
        "meshfit.io/master-addr": master,
        "meshfit.io/parallelism": str(gang.parallelism),
    }
