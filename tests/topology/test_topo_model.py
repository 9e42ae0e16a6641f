"""The model: coordinates, incremental free-GPU bookkeeping (property-based), snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_cluster
from topology.model import TopologyError

CLUSTER = make_cluster("gb200-nvl72", nodes=40, seed=3)


def _fresh_free_by_domain(topo) -> dict[int, int]:
    free = {d.id: 0 for d in topo.domains}
    for node in topo.nodes:
        for domain_id in node.path:
            free[domain_id] += node.gpus_free
    return free


operations = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 19), st.integers(0, 39), st.integers(0, 4)),
    st.tuples(st.just("remove"), st.integers(0, 19), st.just(0), st.just(0)),
    st.tuples(st.just("health"), st.integers(0, 39), st.booleans(), st.just(0)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_incremental_free_gpus_equal_recomputation(ops):
    topo = CLUSTER
    snapshot = topo.snapshot_usage()
    try:
        for op, a, b, c in ops:
            if op == "add":
                topo.add_pod(f"pod-{a}", topo.nodes[b].name, c)
            elif op == "remove":
                topo.remove_pod(f"pod-{a}")
            else:
                topo.set_schedulable(topo.nodes[a].name, bool(b), "test")
            assert topo.free_gpus_by_domain() == _fresh_free_by_domain(topo)
        topo.check_invariants()
    finally:
        topo.restore_usage(snapshot)
    assert topo.gpus_free == topo.gpus_total


def test_remove_is_idempotent_and_add_replaces():
    topo = make_cluster(nodes=2)
    topo.add_pod("p", topo.nodes[0].name, 4)
    topo.add_pod("p", topo.nodes[0].name, 2)
    assert topo.nodes[0].gpus_used == 2
    assert topo.remove_pod("p") and not topo.remove_pod("p")
    assert topo.gpus_free == 16


def test_add_pod_errors():
    topo = make_cluster(nodes=2)
    with pytest.raises(TopologyError, match="unknown node"):
        topo.add_pod("p", "missing", 1)
    with pytest.raises(TopologyError, match="negative"):
        topo.add_pod("p", topo.nodes[0].name, -1)


COMMON_LEVEL_CASES = [
    ("same-node", (0, 0), "host"), ("same-rack", (0, 17), "nvlink"), ("next-rack", (0, 18), "leaf"),
    ("other-leaf", (0, 150), "spine"), ("other-spine", (0, 600), "core"),
]


@pytest.mark.parametrize(("pair", "tier"), [c[1:] for c in COMMON_LEVEL_CASES], ids=[c[0] for c in COMMON_LEVEL_CASES])
def test_common_level_on_gb200(pair, tier):
    topo = make_cluster("gb200-nvl72", nodes=720)
    assert topo.tier_name(topo.common_level(*pair)) == tier


def test_group_level_and_cluster_tier_without_labels():
    from tests.builders import cluster_from, make_node

    topo = cluster_from(make_node("a"), make_node("b"))
    assert topo.group_level([0, 1]) == -1
    assert topo.tier_name(-1) == "cluster"
    assert topo.tier_link(-1) == topo.cluster_link
