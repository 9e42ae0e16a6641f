"""Hypothesis invariants over random clusters and jobs: all-or-nothing, no over-commit, exact rank coords."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.placement.engine import place
from scheduler.placement.jobs import AXES
from scheduler.placement.layout import axis_groups, parse_rank_order
from tests.placement.placement_builders import make_cluster, make_gang

POLICIES = ["meshfit", "kueue-tas", "volcano-hypernode", "random", "first-fit"]
MEGATRON_ORDERS = ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]


# ----- independent reference: Megatron-LM RankGenerator.generate_masked_orthogonal_rank_groups --------------
def _prefix_product(values: list[int]) -> list[int]:
    out, acc = [1], 1
    for v in values:
        acc *= v
        out.append(acc)
    return out


def _decompose(index: int, shape: list[int]) -> list[int]:
    stride = _prefix_product(shape)
    return [(index // d) % s for s, d in zip(shape, stride)]


def megatron_groups(world: int, sizes: list[int], mask: list[bool]) -> list[list[int]]:
    """Megatron's masked orthogonal rank groups: the groups of the masked axes."""
    masked_shape = [s for s, m in zip(sizes, mask) if m]
    unmasked_shape = [s for s, m in zip(sizes, mask) if not m]
    global_stride = _prefix_product(sizes)
    masked_stride = [d for d, m in zip(global_stride, mask) if m]
    unmasked_stride = [d for d, m in zip(global_stride, mask) if not m]
    group_size = _prefix_product(masked_shape)[-1]
    groups = []
    for group_index in range(world // group_size):
        outer = _decompose(group_index, unmasked_shape)
        groups.append([sum(a * b for a, b in zip(_decompose(i, masked_shape), masked_stride))
                       + sum(a * b for a, b in zip(outer, unmasked_stride)) for i in range(group_size)])
    return groups


@st.composite
def clusters(draw):
    """Small spine/rack/host clusters with random usage and cordoned nodes."""
    spines, racks, nodes = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([4, 8]))
    total = spines * racks * nodes
    used = {i: draw(st.integers(0, gpus)) for i in range(total) if draw(st.booleans())}
    down = tuple(i for i in range(total) if draw(st.integers(0, 9)) == 0)
    return make_cluster(spines, racks, nodes, gpus, used, down, draw(st.sampled_from([1.0, 2.0])))


@st.composite
def gangs(draw):
    """Jobs whose degrees multiply to pods x GPUs per pod, tp nesting with the pod size."""
    g = draw(st.sampled_from([1, 2, 4, 8]))
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if d % g == 0 or g % d == 0]))
    pp, dp, cp = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 1, 2]))
    world = tp * pp * dp * cp
    if world % g:
        dp *= g
        world *= g
    order = draw(st.sampled_from(MEGATRON_ORDERS + ["auto"]))
    return make_gang(tp=tp, pp=pp, dp=dp, cp=cp, gpus_per_pod=g, rank_order=order)


def _usage(topo):
    return [(n.gpus_used, n.schedulable) for n in topo.nodes], [d.gpus_free for d in topo.domains]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=clusters(), gang=gangs(), policy=st.sampled_from(POLICIES))
def test_all_or_nothing_without_overcommit(topo, gang, policy):
    before = _usage(topo)
    placement = place(gang, topo, policy)
    assert _usage(topo) == before, "place() must not mutate the topology"
    if not placement.placed:
        assert placement.reason and not placement.pod_nodes and not placement.ranks
        return
    per_node = Counter(placement.pod_nodes)
    for name, pods in per_node.items():
        node = topo.node_by_name[name]
        assert node.schedulable
        assert pods * gang.gpus_per_pod <= node.gpus_free <= node.gpus_total
    gpus = {(r.node, r.pod_index, r.local_rank) for r in placement.ranks}
    assert len(gpus) == gang.world_size == len(placement.ranks)
    assert sorted(r.rank for r in placement.ranks) == list(range(gang.world_size))


@settings(max_examples=80, deadline=None)
@given(gang=gangs())
def test_coords_match_megatron_rank_generator(gang):
    topo = make_cluster(spines=2, racks=4, nodes=8, gpus=8)
    placement = place(gang, topo, "meshfit")
    assert placement.placed
    order = parse_rank_order(placement.rank_order)
    sizes = [gang.parallelism.degree(axis) for axis in order]
    coords = {r.rank: r.coords for r in placement.ranks}
    for axis in AXES:
        mask = [name == axis for name in order]
        reference = megatron_groups(gang.world_size, sizes, mask)
        assert sorted(map(tuple, reference)) == sorted(axis_groups(axis, gang.parallelism, order))
        for group in reference:
            others = {a: coords[group[0]][a] for a in AXES if a != axis}
            for position, rank in enumerate(group):
                assert coords[rank][axis] == position
                assert {a: coords[rank][a] for a in AXES if a != axis} == others


@pytest.mark.parametrize("order", MEGATRON_ORDERS, ids=MEGATRON_ORDERS)
def test_megatron_reference_agrees_on_a_known_layout(order):
    gang = make_gang(tp=2, pp=2, dp=2, gpus_per_pod=2, rank_order=order)
    tp_groups = megatron_groups(8, [2, 1, 1, 2, 2], [True, False, False, False, False])
    assert tp_groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert sorted(map(tuple, tp_groups)) == sorted(axis_groups("tp", gang.parallelism, order))


@settings(max_examples=40, deadline=None)
@given(topo=clusters(), gang=gangs())
def test_meshfit_never_loses_to_the_lower_bound_or_fails_when_first_fit_succeeds(topo, gang):
    ours, baseline = place(gang, topo, "meshfit"), place(gang, topo, "first-fit")
    if gang.constraint.required_level is None:
        assert ours.placed == baseline.placed
    if ours.placed:
        assert ours.cost.lower_bound_seconds <= ours.cost.step_comm_seconds * (1 + 1e-9)
