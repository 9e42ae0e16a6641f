"""Behaviour of each policy on hand-shaped clusters: meshfit's layout choices and the baselines' published rules."""

from __future__ import annotations

import pytest

from plugins.policies import get_policy
from scheduler.placement.engine import place
from scheduler.placement.explain import explain
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS
from tests.placement.placement_builders import make_cluster, make_gang


def _racks(topo, placement):
    return {topo.domain_of(topo.node_by_name[n].index, 1).name for n in placement.pod_nodes}


def test_tp16_stays_inside_one_nvlink_domain_when_one_has_room():
    # racks of 8 four-GPU trays, NVLink domains of 4 trays; domain s0-r0-nv0 has one tray busy
    topo = make_cluster(racks=2, nodes=8, gpus=4, nvlink_nodes=4, used={0: 4, 5: 4, 9: 4})
    gang = make_gang(tp=16, gpus_per_pod=4)
    placement = place(gang, topo, "meshfit")
    assert placement.placed and placement.cost.tier_by_axis["tp"] == "nvlink"


def test_tp_groups_of_a_data_parallel_job_each_get_their_own_nvlink_domain():
    topo = make_cluster(racks=2, nodes=8, gpus=4, nvlink_nodes=4, used={0: 4, 9: 4})
    gang = make_gang(tp=16, dp=2, gpus_per_pod=4)
    ours, kueue = place(gang, topo, "meshfit"), place(gang, topo, "kueue-tas")
    assert ours.cost.tier_by_axis["tp"] == "nvlink"
    assert ours.cost.step_comm_seconds <= kueue.cost.step_comm_seconds


def test_meshfit_prefers_a_partly_used_node_over_breaking_a_whole_one():
    topo = make_cluster(racks=1, nodes=3, used={1: 4})
    placement = place(make_gang(dp=4, gpus_per_pod=4), topo, "meshfit")
    assert placement.pod_nodes == ["node-001"]


def test_meshfit_keeps_a_job_inside_the_smallest_rack_that_fits():
    topo = make_cluster(racks=2, nodes=4, used={0: 8, 1: 8})
    placement = place(make_gang(tp=8, dp=2), topo, "meshfit")
    assert _racks(topo, placement) == {"s0-r0"}


@pytest.mark.parametrize("policy", ["meshfit", "kueue-tas", "volcano-hypernode"], ids=str)
def test_required_level_too_small_is_unschedulable_with_numbers(policy):
    topo = make_cluster(racks=2, nodes=2)
    gang = make_gang(tp=8, dp=3, required="rack")
    placement = place(gang, topo, policy)
    assert not placement.placed
    assert "needs 24 GPUs" in placement.reason and "largest free rack domain" in placement.reason


def test_auto_rank_order_reports_a_supported_order():
    topo = make_cluster(racks=2, nodes=4)
    placement = place(make_gang(tp=8, pp=2, dp=2, rank_order="auto"), topo, "meshfit")
    assert placement.rank_order in SUPPORTED_RANK_ORDERS


def test_kueue_tas_best_fit_rack_and_rank_ordered_hosts():
    topo = make_cluster(racks=2, nodes=4, used={4: 8})  # rack s0-r1 has 3 free hosts: the best fit for 3 pods
    placement = place(make_gang(tp=8, dp=3, preferred="rack"), topo, "kueue-tas")
    assert placement.pod_nodes == ["node-005", "node-006", "node-007"]


def test_volcano_picks_the_most_utilised_tier1_hypernode_and_binpacks():
    topo = make_cluster(racks=2, nodes=4, used={5: 4})
    placement = place(make_gang(dp=8, gpus_per_pod=4), topo, "volcano-hypernode")
    assert _racks(topo, placement) == {"s0-r1"}
    assert placement.pod_nodes[0] == "node-005"


def test_volcano_hard_tier_limit_is_unschedulable():
    topo = make_cluster(racks=2, nodes=2)
    gang = make_gang(tp=8, dp=3, required="volcano-tier-1")
    assert not place(gang, topo, "volcano-hypernode").placed


def test_random_policy_is_deterministic_per_seed():
    topo = make_cluster(racks=2, nodes=4)
    gang = make_gang(dp=8, gpus_per_pod=2)
    first = place(gang, topo, get_policy("random", seed=3)).pod_nodes
    assert first == place(gang, topo, get_policy("random", seed=3)).pod_nodes


def test_optimal_refuses_big_instances_and_never_loses_to_meshfit_on_small_ones():
    small = make_cluster(racks=2, nodes=3, used={0: 4, 4: 4})
    gang = make_gang(tp=4, pp=2, dp=2, gpus_per_pod=4)
    best, ours = place(gang, small, "optimal"), place(gang, small, "meshfit")
    assert best.cost.step_comm_seconds <= ours.cost.step_comm_seconds * (1 + 1e-9)
    big = make_cluster(spines=2, racks=4, nodes=4)
    refused = place(make_gang(dp=64, gpus_per_pod=1), big, "optimal")
    assert not refused.placed and "too large" in refused.reason


@pytest.mark.parametrize("gang,expected", [
    (make_gang(tp=8, dp=3, required="rack"), "needs 24 GPUs (3 pods x 8) in one rack domain"),
    (make_gang(tp=8, dp=64), "needs 512 GPUs"),
    (make_gang(tp=8, dp=2), "schedulable: 16 GPUs fit in one rack domain"),
], ids=["required-rack", "too-big", "fits"])
def test_explain_names_the_binding_constraint(gang, expected):
    assert expected in explain(gang, make_cluster(racks=2, nodes=2))
