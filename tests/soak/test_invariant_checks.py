"""The soak's invariant checks fail when they should (no check that cannot fail): synthetic snapshots, no cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.soak.invariants import PodInvariants, Violations, check_ranks, check_rendezvous, gang_views
from tests.soak.signals import ServiceSignals
from tests.soak.timeline import Timeline
from tests.soak.workload import GangSpec


def member(spec: GangSpec, index: int, node: str | None = None, ranks: str | None = None,
           addr: str | None = None, terminating: bool = False) -> dict:
    """Member `index` of `spec` as the API server would list it (bound to `node` with bind annotations)."""
    pod = spec.pod_body("ns", index)
    pod["metadata"]["uid"] = f"{spec.name}-{index}-uid"
    if node:
        pod["spec"]["nodeName"] = node
        first = index * spec.gpus
        default = ",".join(str(r) for r in range(first, first + spec.gpus))
        pod["metadata"]["annotations"].update({"meshfit.io/ranks": default if ranks is None else ranks,
                                               "meshfit.io/master-addr": "n0" if addr is None else addr})
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def gang(pods: int = 3, gpus: int = 8, elastic_min: int | None = None, style: str = "pytorchjob") -> GangSpec:
    """A gang spec for the checks."""
    return GangSpec("g", style, pods, gpus, "soak-low", f"tp={gpus},dp={pods}", 10.0, elastic_min)


def node(name: str, capacity: int = 8, allocatable: int | None = None) -> dict:
    """A listed Node."""
    alloc = capacity if allocatable is None else allocatable
    return {"metadata": {"name": name}, "status": {"capacity": {"nvidia.com/gpu": str(capacity)},
                                                   "allocatable": {"nvidia.com/gpu": str(alloc)}}}


@pytest.mark.parametrize("style", ["pytorchjob", "meshfit-label"])
def test_ranks_whole_gang_exact_and_unique(style):
    spec = gang(style=style)
    ok = [member(spec, i, f"n{i}") for i in range(3)]
    assert check_ranks(gang_views(ok)["g"]) is None
    dup = [member(spec, 0, "n0"), member(spec, 1, "n1", ranks="0,1,2,3,4,5,6,7"), member(spec, 2)]
    assert "rank 0 held by both" in check_ranks(gang_views(dup)["g"])
    short = [member(spec, 0, "n0"), member(spec, 1, "n1"), member(spec, 2, "n2", ranks="16,17,18,19,20,21,22,99")]
    assert "not exactly 0..23" in check_ranks(gang_views(short)["g"])
    missing = [member(spec, 0, "n0", ranks="")]
    assert "without a valid" in check_ranks(gang_views(missing)["g"])


def test_rendezvous_empty_split_and_moved_pod_zero():
    spec = gang()
    assert check_rendezvous(gang_views([member(spec, 0, "n0"), member(spec, 1, "n1")])["g"]) is None
    empty = [member(spec, 1, "n1", addr=" ")]
    assert "empty meshfit.io/master-addr" in check_rendezvous(gang_views(empty)["g"])
    split = [member(spec, 1, "n1", addr="n0"), member(spec, 2, "n2", addr="n5", terminating=True)]
    assert "different rendezvous" in check_rendezvous(gang_views(split)["g"])
    moved = [member(spec, 0, "n7", addr="n0"), member(spec, 1, "n1", addr="n0")]
    assert "pod 0 (g-worker-0) is bound to n7" in check_rendezvous(gang_views(moved)["g"])


def checker(limit: float = 50.0) -> tuple[PodInvariants, Violations]:
    """A PodInvariants with its Violations."""
    timeline = Timeline()
    violations = Violations(timeline)
    return PodInvariants(violations, timeline, limit), violations


def test_partly_bound_past_the_limit_is_a_violation_and_elastic_prefixes_are_whole():
    invariants, violations = checker(limit=50.0)
    spec, nodes = gang(pods=4), [node(f"n{i}") for i in range(4)]
    partial = [member(spec, 0, "n0"), member(spec, 1, "n1"), member(spec, 2), member(spec, 3)]
    invariants.check(partial, nodes, 100.0)
    invariants.check(partial, nodes, 149.0)
    assert not violations.all()
    assert invariants.longest_partial == 49.0 and invariants.longest_partial_gang == spec.name  # named in the report
    invariants.check(partial, nodes, 151.0)
    assert [v.kind for v in violations.all()] == ["partly-bound"]
    elastic_invariants, elastic_violations = checker(limit=1.0)
    el = gang(pods=4, elastic_min=2)
    prefix = [member(el, 0, "n0"), member(el, 1, "n1"), member(el, 2), member(el, 3)]
    elastic_invariants.check(prefix, nodes, 0.0)
    elastic_invariants.check(prefix, nodes, 10.0)
    holes = [member(el, 0, "n0"), member(el, 2, "n2", ranks="16,17,18,19,20,21,22,23"), member(el, 1), member(el, 3)]
    elastic_invariants.check(holes, nodes, 20.0)
    elastic_invariants.check(holes, nodes, 30.0)
    assert [v.kind for v in elastic_violations.all()] == ["partly-bound"]


def test_overcommit_of_capacity_and_of_a_stable_allocatable():
    invariants, violations = checker()
    a, b = gang(pods=2, gpus=8), GangSpec("h", "pytorchjob", 1, 4, "soak-low", "tp=4,dp=1", 1.0)
    nodes = [node("n0"), node("n1", allocatable=4)]
    invariants.check([member(a, 0, "n0"), member(a, 1, "n1", terminating=True)], nodes, 0.0)
    invariants.check([member(a, 0, "n0"), member(a, 1, "n1", terminating=True)], nodes, 20.0)
    assert not violations.all()  # pods bound before allocatable dropped may stay
    invariants.check([member(a, 0, "n0"), member(a, 1, "n1", terminating=True), member(b, 0, "n1", addr="n1")], nodes, 21.0)
    assert {v.kind for v in violations.all()} == {"overcommit-capacity", "overcommit-allocatable"}


def test_a_500_is_a_violation_and_a_503_only_outside_a_fail_over(tmp_path):
    log = tmp_path / "kube-scheduler.log"
    stack = SimpleNamespace(plane=SimpleNamespace(logs=tmp_path), replicas=[], disruptions=[],
                            in_failover=lambda at, window, slack: 10.0 <= at <= 26.0)
    violations = Violations(Timeline())
    signals = ServiceSignals(stack, Timeline(), violations, failover_window=16.0, endpoint_interval=1e9)
    line = 'E1125 err="failed filter with extender at URL http://127.0.0.1:1/scheduler/filter, code {}" pod="a/b"\n'
    log.write_text(line.format(503))
    signals.check(12.0)
    signals.check(20.0)
    assert not violations.all() and signals.failover_503 == 1
    with log.open("a") as handle:
        handle.write(line.format(503) + line.format(500))
    signals.check(40.0)
    signals.check(47.0)
    assert {v.subject for v in violations.all()} == {"503 outside fail-over", "500 filter"}
    with log.open("a") as handle:  # a transport error is counted, not a violation
        handle.write('E1125 err="Post \\"http://127.0.0.1:1/scheduler/bind\\": EOF" pod="a/b"\n')
    signals.check(50.0)
    signals.check(57.0)
    assert signals.unreachable == {"bind": 1} and signals.unreachable_outside == 1 and len(violations.all()) == 2


def cpu_node(name: str) -> dict:
    """A listed Node with 8 GPUs, 16 CPUs, 64 GiB and 110 pods."""
    resources = {"nvidia.com/gpu": "8", "cpu": "16", "memory": "64Gi", "pods": "110"}
    return {"metadata": {"name": name}, "status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def cpu_pod(name: str, node: str, cpu: str, memory: str) -> dict:
    """A bound CPU-only pod (no gang) asking `cpu` and `memory`."""
    return {"metadata": {"name": name, "uid": f"{name}-uid", "annotations": {}},
            "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Pending"}}


def test_overcommit_of_cpu_and_memory_by_a_member_and_a_cpu_pod_is_caught():
    timeline = Timeline()
    violations = Violations(timeline)
    checker = PodInvariants(violations, timeline, partial_limit=30.0)
    spec = gang(pods=1)
    gpu_member = member(spec, 0, "n0")
    gpu_member["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "10", "memory": "40Gi"})
    checker.check([gpu_member, cpu_pod("fits", "n1", "8", "30Gi")], [cpu_node("n0"), cpu_node("n1")], 0.0)
    assert violations.all() == []  # 10 CPUs / 40 GiB on n0 and 8 / 30 on n1 fit
    checker.check([gpu_member, cpu_pod("fits", "n1", "8", "30Gi"), cpu_pod("late", "n0", "8", "30Gi")],
                  [cpu_node("n0"), cpu_node("n1")], 20.0)
    kinds = {(v.kind, v.subject) for v in violations.all()}
    assert ("overcommit-capacity", "n0:cpu") in kinds and ("overcommit-capacity", "n0:memory") in kinds
    assert ("overcommit-allocatable", "n0:late") in kinds
    assert not any(subject.startswith("n1") for _, subject in kinds)
