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
from typing import Iterator, Mapping

from topology.model import ClusterTopology

MASK_PREFIX = "mask:"
CAP_PREFIX = "cap:"


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


@contextlib.contextmanager
def gpus_capped(topo: ClusterTopology, caps: Mapping[str, int]) -> Iterator[int]:
    """Within the block, each node named in `caps` offers at most that many free GPUs (the rest held under a
    temporary key, as `offered_only` masks); yields how many nodes were capped."""
    capped: list[str] = []
    for name, cap in caps.items():
        node = topo.node_by_name.get(name)
        if node is not None and node.gpus_free > cap:
            key = CAP_PREFIX + name
            topo.add_pod(key, name, node.gpus_free - cap)
            capped.append(key)
    try:
        yield len(capped)
    finally:
        for key in capped:
            topo.remove_pod(key)
