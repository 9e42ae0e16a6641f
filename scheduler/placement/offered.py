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
def _held(topo: ClusterTopology, holds: list[tuple[str, str, int]]) -> Iterator[int]:
    """Within the block, hold `gpus` free GPUs of each `(key, node, gpus)` under its temporary key; yields how many."""
    for key, node, gpus in holds:
        topo.add_pod(key, node, gpus)
    try:
        yield len(holds)
    finally:
        for key, _, _ in holds:
            topo.remove_pod(key)


def offered_only(topo: ClusterTopology, offered: frozenset[str] | None) -> contextlib.AbstractContextManager[int]:
    """Within the block, nodes outside `offered` have no free GPUs (None = no restriction); yields how many
    nodes were masked."""
    holds = [] if offered is None else [(MASK_PREFIX + n.name, n.name, n.gpus_free) for n in topo.nodes
                                        if n.name not in offered and n.gpus_free > 0]
    return _held(topo, holds)


def gpus_capped(topo: ClusterTopology, caps: Mapping[str, int]) -> contextlib.AbstractContextManager[int]:
    """Within the block, each node named in `caps` offers at most that many free GPUs (the rest held under a
    temporary key, as `offered_only` masks); yields how many nodes were capped."""
    nodes = topo.node_by_name
    return _held(topo, [(CAP_PREFIX + name, name, nodes[name].gpus_free - cap) for name, cap in caps.items()
                        if name in nodes and nodes[name].gpus_free > cap])
