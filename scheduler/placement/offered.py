"""Placing a gang only on the nodes kube-scheduler offered.

kube-scheduler calls the extender with the nodes that passed its own filters for the pod
(nodeSelector and affinity, taints, CPU / memory / pods, volumes...).  A gang placed on nodes that
were never offered would be refused there and re-placed on the same nodes forever, so the first
member's offered set bounds its gang's placement.  `offered_only` masks every other node for the
duration of one placement by holding its free GPUs under a temporary key (O(nodes) topology
updates of ~1 us each, only when something is actually masked), and always unmasks.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from topology.model import ClusterTopology

MASK_PREFIX = "mask:"


@contextlib.contextmanager
def offered_only(topo: ClusterTopology, offered: frozenset[str] | None) -> Iterator[int]:
    """Within the block, nodes outside `offered` have no free GPUs (None = no restriction); yields how many
    nodes were masked."""
    masked: list[str] = []
    if offered is not None:
        for node in topo.nodes:
            if node.name not in offered and node.gpus_free > 0:
                key = MASK_PREFIX + node.name
                topo.add_pod(key, node.name, node.gpus_free)
                masked.append(key)
    try:
        yield len(masked)
    finally:
        for key in masked:
            topo.remove_pod(key)
