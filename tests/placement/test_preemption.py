"""Topology-first, whole-gang preemption plans (`scheduler.gangs.preemption`): who is evicted, where, and never what."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement.engine import place
from scheduler.placement.offered import offered_only
from scheduler.gangs.preemption import Holder, plan_preemption
from tests.placement.placement_builders import make_cluster, make_gang


def occupy(topo, name: str, priority: int, nodes: list[int], gpus: int = 8) -> Holder:
    """Gang `name` bound with one `gpus`-GPU pod on each of `nodes`; returns its holder."""
    keys = []
    for i, node in enumerate(nodes):
        key = f"pod:ns/{name}-{i}"
        topo.add_pod(key, topo.nodes[node].name, gpus)
        keys.append(key)
    return Holder(f"ns/{name}", priority, tuple(keys))


def usage(topo) -> tuple:
    """Everything a plan must leave as it found it."""
    return dict(topo.pods), [n.gpus_used for n in topo.nodes], [d.gpus_free for d in topo.domains]


def test_only_whole_lower_priority_gangs_in_one_rack_are_evicted():
    topo = make_cluster(racks=2, nodes=4)  # rack s0-r0: nodes 0-3, rack s0-r1: nodes 4-7
    holders = [occupy(topo, "a", 10, [0, 1]), occupy(topo, "b", 10, [2, 3]),
               occupy(topo, "c", 20, [4, 5, 6, 7])]
    before = usage(topo)
    plan = plan_preemption(topo, make_gang(tp=8, dp=2, name="urgent"), 100, holders, "meshfit")
    assert usage(topo) == before  # the what-if is undone exactly
    assert [v.key for v in plan.victims] == ["ns/a"] and plan.victim_gpus == 16
    assert (plan.level, plan.domain) == ("rack", "s0-r0")
    assert set(plan.placement.pod_nodes) == {"node-000", "node-001"}


def test_equal_or_higher_priority_is_never_a_victim():
    topo = make_cluster(racks=2, nodes=4)
    holders = [occupy(topo, "a", 100, [0, 1, 2, 3]), occupy(topo, "b", 200, [4, 5, 6, 7])]
    assert plan_preemption(topo, make_gang(tp=8, dp=1), 100, holders, "meshfit") is None


def test_a_victim_gang_is_evicted_whole_and_counted_whole():
    topo = make_cluster(racks=2, nodes=4)
    wide = occupy(topo, "wide", 5, [3, 4, 5, 6, 7])  # one node in rack 0, four in rack 1
    holders = [occupy(topo, "a", 50, [0, 1, 2]), wide]
    plan = plan_preemption(topo, make_gang(tp=8, dp=4), 100, holders, "meshfit")
    assert [v.key for v in plan.victims] == ["ns/wide"] and plan.victim_gpus == 40
    assert plan.victims[0].holdings == wide.holdings and plan.domain == "s0-r1"


def test_lower_highest_priority_beats_fewer_gpus():
    topo = make_cluster(racks=2, nodes=4)
    holders = [occupy(topo, "a1", 10, [0, 1]), occupy(topo, "a2", 10, [2, 3]), occupy(topo, "b", 20, [4])]
    plan = plan_preemption(topo, make_gang(tp=8, dp=4), 100, holders, "meshfit")
    # rack 0: two priority-10 gangs (32 GPUs); rack 1: one priority-20 gang (8 GPUs): lexicographic,
    # not GPUs x (1 + priority), which would evict the priority-20 gang
    assert sorted(v.key for v in plan.victims) == ["ns/a1", "ns/a2"] and plan.domain == "s0-r0"


def test_a_whole_rack_beats_fewer_gpus_across_racks_at_the_same_priority():
    topo = make_cluster(racks=2, nodes=4)
    holders = [occupy(topo, "a1", 10, [0, 1]), occupy(topo, "a2", 10, [2, 3]), occupy(topo, "b", 10, [4])]
    plan = plan_preemption(topo, make_gang(tp=8, dp=4), 100, holders, "meshfit")
    # evicting b alone (8 GPUs) would let it run across the spine; clearing rack 1 evicts b and keeps it in one rack
    assert [v.key for v in plan.victims] == ["ns/b"] and plan.domain == "s0-r1" and plan.layout_level == 1


def test_the_smallest_sufficient_victim_set_is_kept():
    topo = make_cluster(racks=1, nodes=4)
    holders = [occupy(topo, "big", 10, [0, 1, 2]), occupy(topo, "small", 10, [3])]
    plan = plan_preemption(topo, make_gang(tp=8, dp=1), 100, holders, "meshfit")
    assert [v.key for v in plan.victims] == ["ns/small"] and plan.victim_gpus == 8


def test_no_plan_when_even_evicting_everything_lower_is_not_enough():
    topo = make_cluster(racks=1, nodes=4)
    holders = [occupy(topo, "low", 10, [0, 1]), occupy(topo, "vip", 1000, [2, 3])]
    assert plan_preemption(topo, make_gang(tp=8, dp=3), 100, holders, "meshfit") is None
    assert plan_preemption(topo, make_gang(tp=8, dp=2), 100, holders, "meshfit") is not None


def test_holders_not_preemptible_now_and_unschedulable_nodes_are_skipped():
    topo = make_cluster(racks=1, nodes=2, down=(1,))
    busy = occupy(topo, "busy", 10, [0])
    frozen = Holder(busy.key, 10, busy.holdings, preemptible=False)
    assert plan_preemption(topo, make_gang(tp=8, dp=1), 100, [frozen], "meshfit") is None
    assert plan_preemption(topo, make_gang(tp=8, dp=2), 100, [busy], "meshfit") is None  # node 1 is cordoned


def test_plain_pods_are_victims_like_gangs():
    topo = make_cluster(racks=1, nodes=2)
    topo.add_pod("pod:ns/loner", "node-000", 4)
    loner = Holder("pod:ns/loner", 0, ("pod:ns/loner",), is_gang=False)
    holders = [loner, occupy(topo, "g", 50, [1])]
    plan = plan_preemption(topo, make_gang(tp=8, dp=1), 10, holders, "meshfit")
    assert [v.key for v in plan.victims] == ["pod:ns/loner"] and plan.victim_gpus == 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=8),
       st.integers(1, 6), st.integers(0, 3))
def test_property_plans_evict_only_lower_priority_and_the_preemptor_fits(gangs, dp, rank):
    topo = make_cluster(racks=2, nodes=4)
    priorities = [10, 20, 30, 40]
    holders, node = [], 0
    for i, (level, size) in enumerate(gangs):
        nodes = list(range(node, min(node + size, 8)))
        if not nodes:
            break
        holders.append(occupy(topo, f"g{i}", priorities[level], nodes))
        node += len(nodes)
    priority = priorities[rank]
    before = usage(topo)
    gang = make_gang(tp=8, dp=dp)
    fits_now = place(gang, topo, "meshfit").placed
    plan = plan_preemption(topo, gang, priority, holders, "meshfit")
    assert usage(topo) == before
    if plan is None:  # nothing to evict for, or even evicting every lower-priority gang is not enough
        assert fits_now or not _fits_after(topo, gang, holders, priority)
        return
    assert all(v.priority < priority for v in plan.victims)
    removed = [(k, topo.pods[k]) for v in plan.victims for k in v.holdings]
    for key, _ in removed:
        topo.remove_pod(key)
    with offered_only(topo, plan.nodes):
        assert place(gang, topo, "meshfit").placed
    assert {topo.nodes[topo.node_by_name[n].index].name for n in plan.placement.pod_nodes} <= (
        plan.nodes or set(topo.node_by_name))


def _fits_after(topo, gang, holders, priority) -> bool:
    """Whether the gang would fit with every lower-priority holder removed (a plan must then exist)."""
    removed = [(k, topo.pods[k]) for h in holders if h.priority < priority for k in h.holdings]
    for key, _ in removed:
        topo.remove_pod(key)
    try:
        return place(gang, topo, "meshfit").placed
    finally:
        for key, (node, gpus) in removed:
            topo.add_pod(key, topo.nodes[node].name, gpus)
