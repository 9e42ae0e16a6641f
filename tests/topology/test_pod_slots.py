"""The incrementally kept pod slots (`ClusterTopology.slots_for_pods`) always equal a recomputation from scratch."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.cluster import make_fast
from tests.builders import make_cluster
from topology import slots as slots_module

operations = st.lists(st.tuples(st.sampled_from(["add", "remove", "cordon", "uncordon", "look"]),
                                st.integers(0, 35), st.integers(1, 8), st.sampled_from([1, 2, 4, 8])), max_size=60)


def expected_slots(topo, gpus: int) -> dict[str, object]:
    """Node / domain / wholly-free-node slots and the host candidates computed from the node records."""
    node = np.array([n.gpus_free // gpus for n in topo.nodes])
    whole = np.array([n.gpus_free // gpus if n.gpus_free == n.gpus_total else 0 for n in topo.nodes])
    domain, domain_whole = np.zeros(len(topo.domains), dtype=np.int64), np.zeros(len(topo.domains), dtype=np.int64)
    for n in topo.nodes:
        for d in n.path:
            domain[d] += node[n.index]
            domain_whole[d] += whole[n.index]
    keyed = sorted((int(node[n.index]), n.path[-1], n.index) for n in topo.nodes if node[n.index] >= 1)
    fewest = [index for _, _, index in keyed[:2]]
    roomiest = max(keyed, key=lambda k: (k[0], k[1]))[2] if keyed else None
    return {"node": node, "domain": domain, "whole": domain_whole, "fewest": fewest, "roomiest": roomiest}


def check(topo, gpus: int) -> None:
    kept = topo.slots_for_pods(gpus)
    want = expected_slots(topo, gpus)
    assert np.array_equal(kept.node, want["node"])
    assert np.array_equal(kept.domain, want["domain"])
    assert kept.domain_list == want["domain"].tolist()  # the list mirror, once asked for, follows every change
    assert np.array_equal(kept.whole, want["whole"])
    assert kept.total == int(want["node"].sum())
    assert topo.hosts_by_free().fewest_and_roomiest(gpus, 2) == (want["fewest"], want["roomiest"])


def replay(topo, ops) -> None:
    for gpus in (1, 8):
        topo.slots_for_pods(gpus)  # registered before the changes, so they must follow them
    topo.hosts_by_free()
    for step, (op, node, gpus, size) in enumerate(ops):
        name = topo.nodes[node % len(topo.nodes)].name
        if op == "add" and topo.node_by_name[name].gpus_free >= gpus:
            topo.add_pod(f"p{step}", name, gpus)
        elif op == "remove" and topo.pods:
            topo.remove_pod(sorted(topo.pods)[node % len(topo.pods)])
        elif op in ("cordon", "uncordon"):
            topo.set_schedulable(name, op == "uncordon")
        else:
            check(topo, size)
    for gpus in (1, 2, 4, 8):
        check(topo, gpus)


@settings(max_examples=40, deadline=None)
@given(operations, st.booleans())
def test_pod_slots_follow_every_update(ops, fast) -> None:
    topo = make_cluster("gb200-nvl72", nodes=36, used_fraction=0.3, seed=2)
    replay(make_fast(topo) if fast else topo, ops)


@settings(max_examples=15, deadline=None)
@given(operations)
def test_pod_slots_survive_dropped_logs_and_node_by_node_updates(ops) -> None:
    original = (slots_module.SMALL_CHANGE, slots_module.LOG_LIMIT)
    slots_module.SMALL_CHANGE, slots_module.LOG_LIMIT = 40, 7  # node-by-node catch-ups; the log dropped often
    try:
        replay(make_cluster("hgx-h100", nodes=24, used_fraction=0.5, seed=3), ops)
    finally:
        slots_module.SMALL_CHANGE, slots_module.LOG_LIMIT = original


def test_pod_slots_rebuild_after_recompute_and_restore() -> None:
    topo = make_cluster("hgx-h100", nodes=8)
    check(topo, 8)
    snapshot = topo.snapshot_usage()
    topo.add_pod("a", topo.nodes[0].name, 8)
    check(topo, 8)
    topo.restore_usage(snapshot)
    check(topo, 8)
