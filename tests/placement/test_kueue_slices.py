"""Kueue two-level TAS (podset slices): parsing, validation, `slices_satisfied`, the `kueue-tas` slice
path against a transliteration of Kueue's algorithm, and how slice-unaware baselines react."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugins.gangs.base import constraint_from
from plugins.policies import get_policy
from scheduler.placement.capacity import slice_violation, slices_satisfied
from scheduler.placement.cost import estimate_cost
from scheduler.placement.jobs import (
    KUEUE_SLICE_REQUIRED_TOPOLOGY, KUEUE_SLICE_SIZE, JobSpecError, TopologyConstraint, parse_slice_annotations,
)
from scheduler.handoff.manifests import gang_from_manifest
from tests.placement.kueue_slices_reference import kueue_slices_reference
from tests.placement.placement_builders import CLUSTER_LINK, HOST_LINK, RACK_LINK, make_cluster, make_gang
from tests.placement.test_fast_policies import random_cluster
from topology.builder import LevelSpec, NodeRecord, build_topology

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
SLICE_LEVELS = ["host", "host", "nvlink", "rack", "rack", "spine", "volcano-tier-1", "kubernetes.io/hostname",
                "no-such-level"]
PODSET_LEVELS = [None, None, None, "host", "nvlink", "rack", "spine"]


def sliced(gang, level: str = "nvlink", size: int = 2, preferred: str | None = None, required: str | None = None):
    """`gang` with a slice constraint (and optional podset level)."""
    return replace(gang, constraint=TopologyConstraint(required, preferred, slice_required_level=level,
                                                       slice_size=size))


def kep_rack(free: tuple[int, ...] = (6, 5, 4, 3, 2)):
    """One rack of 1-GPU-pod hosts named by their free capacity, as in KEP-2724's two-level example."""
    records = [NodeRecord(f"cap{gpus}", gpus, {"test/rack": "r0"}, True) for gpus in free]
    return build_topology(records, [LevelSpec("rack", ("test/rack",), RACK_LINK, "leaf")], HOST_LINK, CLUSTER_LINK)


# ----- parsing and validation ------------------------------------------------------------------
@pytest.mark.parametrize("level,size,default,expected", [
    (None, None, None, (None, None)),
    ("nvlink", "2", None, ("nvlink", 2)),
    (" rack ", 4, None, ("rack", 4)),
    ("nvlink", None, 3, ("nvlink", 3)),
    ("", "", None, (None, None)),
], ids=["absent", "string-size", "int-size-trimmed", "jobset-default", "empty-strings"])
def test_slice_annotations_parse(level, size, default, expected):
    assert parse_slice_annotations("job x", level, size, default) == expected


@pytest.mark.parametrize("level,size,message", [
    (None, "2", "cannot be set without"),
    ("nvlink", None, f"needs {KUEUE_SLICE_SIZE}"),
    ("nvlink", "0", "integer >= 1"),
    ("nvlink", "two", "integer >= 1"),
    ("nvlink", "-2", "integer >= 1"),
], ids=["size-without-topology", "topology-without-size", "zero", "not-a-number", "negative"])
def test_bad_slice_annotations_are_one_line_errors(level, size, message):
    with pytest.raises(JobSpecError, match=message) as info:
        parse_slice_annotations("job x", level, size)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("level,size,pods,message", [
    ("nvlink", 3, 4, "must be >= 1 and divide the 4 pods"),
    ("nvlink", 0, 4, "must be >= 1"),
    ("nvlink", None, 4, "needs both"),
    (None, 2, 4, "needs both"),
], ids=["not-a-divisor", "zero", "level-only", "size-only"])
def test_gang_validate_rejects_bad_slices(level, size, pods, message):
    gang = replace(make_gang(dp=pods, gpus_per_pod=1),
                   constraint=TopologyConstraint(slice_required_level=level, slice_size=size))
    with pytest.raises(JobSpecError, match=message):
        gang.validate()


def test_constraint_with_slices_stays_hashable_and_defaults_off():
    with_slices = TopologyConstraint("rack", None, (), "nvlink", 2)
    assert {with_slices: 1}[TopologyConstraint("rack", None, (), "nvlink", 2)] == 1
    assert not TopologyConstraint("rack").has_slices and with_slices.has_slices


def _indexed_job(annotations: dict) -> dict:
    job = yaml.safe_load((JOBS / "indexed-job.yaml").read_text())
    job["spec"]["template"]["metadata"]["annotations"].update(annotations)
    return job


def test_manifest_reads_slice_annotations():
    gang = gang_from_manifest(_indexed_job({KUEUE_SLICE_REQUIRED_TOPOLOGY: "nvlink", KUEUE_SLICE_SIZE: "2"}))
    assert (gang.constraint.slice_required_level, gang.constraint.slice_size) == ("nvlink", 2)
    assert gang.constraint.required_level == "leaf"


@pytest.mark.parametrize("annotations,message", [
    ({KUEUE_SLICE_SIZE: "2"}, "cannot be set without"),
    ({KUEUE_SLICE_REQUIRED_TOPOLOGY: "nvlink"}, "needs"),
    ({KUEUE_SLICE_REQUIRED_TOPOLOGY: "nvlink", KUEUE_SLICE_SIZE: "3"}, "divide the 2 pods"),
], ids=["size-only", "no-size-outside-jobset", "not-dividing"])
def test_manifest_slice_errors(annotations, message):
    with pytest.raises(JobSpecError, match=message):
        gang_from_manifest(_indexed_job(annotations))


def test_jobset_slice_size_defaults_to_pods_per_job():
    job = yaml.safe_load((JOBS / "jobset.yaml").read_text())
    pod_meta = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    pod_meta["annotations"][KUEUE_SLICE_REQUIRED_TOPOLOGY] = "kubernetes.io/hostname"
    gang = gang_from_manifest(job)
    assert (gang.constraint.slice_required_level, gang.constraint.slice_size) == ("kubernetes.io/hostname", 2)
    explicit = copy.deepcopy(job)
    explicit["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][
        KUEUE_SLICE_SIZE] = "4"
    assert gang_from_manifest(explicit).constraint.slice_size == 4


def test_gang_sources_read_slice_annotations_from_pod_settings():
    settings_ = {KUEUE_SLICE_REQUIRED_TOPOLOGY: "nvlink", KUEUE_SLICE_SIZE: "4",
                 "kueue.x-k8s.io/podset-preferred-topology": "rack"}
    constraint = constraint_from(settings_, "pod ns/p-0")
    assert (constraint.preferred_level, constraint.slice_required_level, constraint.slice_size) == ("rack", "nvlink", 4)


# ----- slices_satisfied --------------------------------------------------------------------------
@pytest.mark.parametrize("pod_nodes,expected", [
    ((0, 1, 2, 3), True),
    (("node-000", "node-001", "node-003", "node-002"), True),
    ((1, 2, 3, 0), False),
    ((0, 1, 2), False),
    ((0, 0, 4, 5), True),
], ids=["aligned", "by-name", "shifted-by-one", "wrong-length", "same-node-pairs"])
def test_slices_satisfied(pod_nodes, expected):
    topo = make_cluster(racks=2, nodes=4, gpus=8, nvlink_nodes=2)
    gang = sliced(make_gang(tp=8, dp=4, gpus_per_pod=8), "nvlink", 2)
    assert slices_satisfied(gang, topo, pod_nodes) is expected


def test_no_slices_is_always_satisfied():
    topo = make_cluster(racks=2, nodes=4, gpus=8, nvlink_nodes=2)
    assert slices_satisfied(make_gang(tp=8, dp=4, gpus_per_pod=8), topo, (7, 0, 3, 5))


# ----- the kueue-tas slice path ----------------------------------------------------------------
@pytest.mark.parametrize("podset", [{"required": "rack"}, {"preferred": "rack"}, {"preferred": "host"}],
                         ids=["required-rack", "preferred-rack", "preferred-host-climbs"])
def test_kep_two_level_example(podset):
    """KEP-2724: hosts holding 6,5,4,3,2 pods, slice = 2 pods per host, 12 pods -> 6 / 4 / 2 (BestFit)."""
    topo = kep_rack()
    gang = sliced(make_gang(dp=12, gpus_per_pod=1), "host", 2, **podset)
    assignment = get_policy("kueue-tas").assign(gang, topo)
    counts = {topo.nodes[n].name: assignment.pod_nodes.count(n) for n in set(assignment.pod_nodes)}
    assert counts == {"cap6": 6, "cap4": 4, "cap2": 2}
    assert [topo.nodes[n].name for n in assignment.pod_nodes] == ["cap2"] * 2 + ["cap4"] * 4 + ["cap6"] * 6


def test_slices_keep_tp_pairs_inside_nvlink_domains_where_plain_kueue_splits_them():
    topo = make_cluster(racks=3, nodes=4, gpus=4, used={3: 4, 7: 4, 10: 4, 11: 4}, nvlink_nodes=2)
    plain = make_gang(tp=8, dp=3, gpus_per_pod=4)
    policy = get_policy("kueue-tas")
    without = policy.assign(plain, topo)
    with_slices = policy.assign(sliced(plain, "nvlink", 2, preferred="nvlink"), topo)
    assert without.pod_nodes == (0, 1, 2, 4, 5, 6)
    assert not slices_satisfied(sliced(plain), topo, without.pod_nodes)
    assert with_slices.pod_nodes == (0, 1, 4, 5, 8, 9)


@pytest.mark.parametrize("constraint,reason", [
    (TopologyConstraint(required_level="nvlink", slice_required_level="rack", slice_size=2),
     "podset slice topology rack is above the podset topology nvlink"),
    (TopologyConstraint(slice_required_level="no-such-level", slice_size=2), "topology constraint cannot be met"),
    (TopologyConstraint(required_level="rack", slice_required_level="nvlink", slice_size=2),
     "one rack domain holds only 0 of 1 slices of 2 pods (each slice inside one nvlink domain)"),
    (TopologyConstraint(slice_required_level="nvlink", slice_size=2), "the cluster holds only 0 of 1 slices"),
], ids=["slice-above-podset", "unknown-slice-level", "required-podset-short", "cluster-short"])
def test_unschedulable_slice_requests_say_why(constraint, reason):
    topo = make_cluster(racks=2, nodes=4, gpus=4, used={0: 2, 2: 2, 4: 2, 6: 2}, nvlink_nodes=2)
    gang = replace(make_gang(tp=8, dp=1, gpus_per_pod=4), constraint=constraint)
    assignment = get_policy("kueue-tas").assign(gang, topo)
    assert assignment.pod_nodes is None and reason in assignment.reason


def random_sliced_gang(rng: random.Random, topo, index: int):
    """A gang with a random slice size (a divisor of its pods), slice level and podset level."""
    gpus = max(n.gpus_total for n in topo.nodes)
    per_pod = rng.choice([g for g in (1, 2, 4) if g <= gpus])
    pods = rng.randint(1, max(len(topo.nodes), 2))
    size = rng.choice([d for d in range(1, pods + 1) if pods % d == 0][:4])
    podset = rng.choice(PODSET_LEVELS)
    required = podset if rng.random() < 0.4 else None
    return replace(make_gang(dp=pods * per_pod, gpus_per_pod=per_pod, name=f"job{index}"),
                   constraint=TopologyConstraint(required, None if required else podset,
                                                 slice_required_level=rng.choice(SLICE_LEVELS), slice_size=size))


def replay(seed: int, steps: int = 10, clash_names: bool = False) -> set[str]:
    """Compare the numpy slice path with the transliterated reference over an evolving random cluster."""
    rng = random.Random(seed)
    topo = random_cluster(rng, clash_names)
    policy = get_policy("kueue-tas")
    seen: set[str] = set()
    for index in range(steps):
        gang = random_sliced_gang(rng, topo, index)
        got = policy.assign(gang, topo)
        assert got.pod_nodes == kueue_slices_reference(gang, topo), f"seed {seed} step {index}: {gang.constraint}"
        if got.pod_nodes is None:
            seen.add("unschedulable")
            continue
        seen.add("multi-node" if len(set(got.pod_nodes)) > 1 else "one-node")
        assert slices_satisfied(gang, topo, got.pod_nodes)
        for pod, node in zip(gang.pods, got.pod_nodes):
            topo.add_pod(f"{gang.key}/{pod.index}", topo.nodes[node].name, pod.gpus)
        topo.check_invariants()
        while rng.random() < 0.6 and topo.pods:
            topo.remove_pod(rng.choice(sorted(topo.pods)))
    return seen


@pytest.mark.parametrize("clash_names", [False, True], ids=["unique-names", "clashing-names"])
def test_slice_path_matches_the_kueue_transliteration(clash_names):
    seen: set[str] = set()
    for seed in range(40):
        seen |= replay(seed, clash_names=clash_names)
    assert {"unschedulable", "multi-node", "one-node"} <= seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), clash_names=st.booleans())
def test_any_state_slice_placements_keep_slices_and_match_kueue(seed, clash_names):
    replay(seed, steps=5, clash_names=clash_names)


# ----- slice-unaware baselines -----------------------------------------------------------------
@pytest.mark.parametrize("policy", ["first-fit", "volcano-hypernode"], ids=str)
def test_slice_unaware_policies_refuse_layouts_that_split_a_slice(policy):
    topo = make_cluster(racks=1, nodes=4, gpus=4, used={0: 4, 3: 2}, nvlink_nodes=2)
    gang = sliced(make_gang(tp=8, dp=1, gpus_per_pod=4), "nvlink", 2)
    plain = get_policy(policy).assign(replace(gang, constraint=TopologyConstraint()), topo)
    assert plain.pod_nodes == (1, 2)
    refused = get_policy(policy).assign(gang, topo)
    assert refused.pod_nodes is None and "does not model Kueue slices" in refused.reason


@pytest.mark.parametrize("policy", ["first-fit", "volcano-hypernode"], ids=str)
def test_slice_unaware_policies_keep_layouts_that_honour_slices(policy):
    topo = make_cluster(racks=1, nodes=4, gpus=4, used={0: 4, 1: 4}, nvlink_nodes=2)
    gang = sliced(make_gang(tp=8, dp=1, gpus_per_pod=4), "nvlink", 2)
    assert get_policy(policy).assign(gang, topo).pod_nodes == (2, 3)


def test_slice_violation_reports_unknown_levels():
    topo = make_cluster(racks=1, nodes=2, gpus=4)
    gang = sliced(make_gang(tp=8, gpus_per_pod=4), "no-such-level", 2)
    assert "topology constraint cannot be met" in slice_violation("first-fit", gang, topo, (0, 1))


# ----- meshfit: slices are a hard constraint ---------------------------------------------------
def test_meshfit_keeps_slices_where_its_unconstrained_layout_would_split_one():
    """tp=8 over 2-pod slices on 4-GPU trays: meshfit alone may use any two free trays; sliced, only NVLink pairs."""
    topo = make_cluster(racks=1, nodes=4, gpus=4, used={0: 2, 3: 2}, nvlink_nodes=2)
    gang = make_gang(tp=4, dp=2, gpus_per_pod=4)
    policy = get_policy("meshfit")
    free = policy.assign(gang, topo)
    assert not slices_satisfied(sliced(gang, "nvlink", 2), topo, free.pod_nodes)  # pods 0,1 on trays 1,2
    kept = policy.assign(sliced(gang, "nvlink", 2), topo)
    assert kept.pod_nodes is None and "0 of 1 slices" in kept.reason


def test_meshfit_single_pod_slices_check_the_level():
    topo = make_cluster(racks=1, nodes=2, gpus=4)
    gang = sliced(make_gang(tp=4, gpus_per_pod=4), "no-such-level", 1)
    got = get_policy("meshfit").assign(gang, topo)
    assert got.pod_nodes is None and "topology constraint cannot be met" in got.reason


def meshfit_replay(seed: int, steps: int = 6) -> set[str]:
    """meshfit on random sliced gangs: places exactly when Kueue's slice path does, keeps every slice,
    and never predicts a slower step than Kueue's slice layout."""
    rng = random.Random(seed)
    topo = random_cluster(rng, False)
    meshfit, kueue = get_policy("meshfit"), get_policy("kueue-tas")
    seen: set[str] = set()
    for index in range(steps):
        gang = random_sliced_gang(rng, topo, index)
        if rng.random() < 0.5:
            gang = replace(gang, parallelism=replace(gang.parallelism, tp=gang.parallelism.dp, dp=1))
        ours, theirs = meshfit.assign(gang, topo), kueue.assign(gang, topo)
        assert (ours.pod_nodes is None) == (theirs.pod_nodes is None), f"seed {seed} step {index}: {gang.constraint}"
        if ours.pod_nodes is None:
            seen.add("unschedulable")
            continue
        assert slices_satisfied(gang, topo, ours.pod_nodes)
        mine = estimate_cost(gang, ours.pod_nodes, topo, ours.rank_order).step_comm_seconds
        kueues = estimate_cost(gang, theirs.pod_nodes, topo).step_comm_seconds
        assert mine <= kueues * (1 + 1e-9)
        seen.add("cheaper" if mine < kueues * (1 - 1e-9) else "equal")
        for pod, node in zip(gang.pods, ours.pod_nodes):
            topo.add_pod(f"{gang.key}/{pod.index}", topo.nodes[node].name, pod.gpus)
        while rng.random() < 0.6 and topo.pods:
            topo.remove_pod(rng.choice(sorted(topo.pods)))
    return seen


def test_meshfit_slice_replays_cover_every_outcome():
    seen: set[str] = set()
    for seed in range(30):
        seen |= meshfit_replay(seed)
    assert {"unschedulable", "equal", "cheaper"} <= seen


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_meshfit_any_state_keeps_slices_and_never_loses_to_kueue(seed):
    meshfit_replay(seed, steps=4)
