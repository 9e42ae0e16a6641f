"""`meshfit.io/max-comm-ratio`: parsing, where it is read from, and the engine refusing layouts above it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from plugins.gangs.base import constraint_from
from scheduler.placement.engine import place
from scheduler.placement.jobs import ANNOTATION_MAX_COMM_RATIO, JobSpecError, TopologyConstraint, parse_max_comm_ratio
from scheduler.handoff.manifests import gang_from_manifest
from simulations.workload import SimJob, make_gang as sim_gang
from tests.placement.placement_builders import make_cluster, make_gang

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


@pytest.mark.parametrize("value,expected", [(None, None), ("", None), ("1", 1.0), (" 2.5 ", 2.5), (3, 3.0)],
                         ids=["unset", "empty", "one", "spaces", "number"])
def test_parse_max_comm_ratio(value, expected):
    assert parse_max_comm_ratio("job x", value) == expected


@pytest.mark.parametrize("value", ["0.5", "fast", "nan", "inf", "-2"], ids=str)
def test_bad_max_comm_ratio_is_a_one_line_error(value):
    with pytest.raises(JobSpecError, match=f"job x: {ANNOTATION_MAX_COMM_RATIO} must be a"):
        parse_max_comm_ratio("job x", value)


def test_manifest_and_gang_sources_read_it():
    job = yaml.safe_load((JOBS / "indexed-job.yaml").read_text())
    job["spec"]["template"]["metadata"]["annotations"][ANNOTATION_MAX_COMM_RATIO] = "1.5"
    assert gang_from_manifest(job).constraint.max_comm_ratio == 1.5
    assert constraint_from({ANNOTATION_MAX_COMM_RATIO: "2"}, "pod ns/p-0").max_comm_ratio == 2.0
    assert constraint_from({}, "pod ns/p-0").max_comm_ratio is None


def limited(gang, ratio: float):
    return replace(gang, constraint=replace(gang.constraint, max_comm_ratio=ratio))


def test_engine_waits_instead_of_splitting_a_tensor_group():
    """tp=8 on 4-GPU trays: the only free trays sit in two NVLink domains (tp over the fabric)."""
    topo = make_cluster(racks=1, nodes=4, gpus=4, used={0: 4, 3: 4}, nvlink_nodes=2)
    gang = make_gang(tp=8, gpus_per_pod=4)
    split = place(gang, topo)
    assert split.placed
    ratio = split.cost.step_comm_seconds / split.cost.lower_bound_seconds
    assert ratio > 2
    refused = place(limited(gang, 2.0), topo)
    assert not refused.placed
    assert f"{ratio:.2f}x the ideal step communication" in refused.reason and "max-comm-ratio 2" in refused.reason
    accepted = place(limited(gang, ratio * 1.01), topo)
    assert accepted.placed and accepted.pod_nodes == split.pod_nodes


@pytest.mark.parametrize("policy", ["meshfit", "kueue-tas", "first-fit", "volcano-hypernode"], ids=str)
def test_aligned_layouts_pass_the_strictest_limit(policy):
    topo = make_cluster(racks=1, nodes=4, gpus=4, used={0: 4, 1: 4}, nvlink_nodes=2)
    placement = place(limited(make_gang(tp=8, gpus_per_pod=4), 1.0), topo, policy)
    assert placement.placed, placement.reason
    assert placement.cost.step_comm_seconds == pytest.approx(placement.cost.lower_bound_seconds)


def test_limit_is_a_constraint_default_off():
    assert TopologyConstraint().max_comm_ratio is None


def test_simulated_gangs_carry_the_configured_limit():
    job = SimJob("j", 0.0, 60.0, 16)
    assert sim_gang(job, 4, None, 1.5).constraint.max_comm_ratio == 1.5
    assert sim_gang(job, 4).constraint.max_comm_ratio is None
