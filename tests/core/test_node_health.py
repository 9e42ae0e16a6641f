"""`scheduler.gangs.health`: each unhealthy-node source, its defaults, and the failure clock."""

from __future__ import annotations

import copy

import pytest

from scheduler.gangs.health import NodeFailures, NodeHealthSources, node_failure
from topology.k8s import parse_toleration


def node(**changes) -> dict:
    """A healthy Ready 8-GPU node, then `changes` applied by the caller."""
    return {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}, "spec": {},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def with_(base: dict, path: tuple, value) -> dict:
    """`base` with the value at `path` set."""
    out = copy.deepcopy(base)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


DEFAULTS = NodeHealthSources()


@pytest.mark.parametrize("path, value, source", [
    (("status", "conditions"), [{"type": "Ready", "status": "False"}], "not-ready"),
    (("status", "conditions"), [{"type": "Ready", "status": "Unknown"}], "not-ready"),
    (("spec", "unschedulable"), True, "cordoned"),
    (("spec", "taints"), [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}], "no-execute"),
    (("status", "conditions"), [{"type": "Ready", "status": "True"}, {"type": "KernelDeadlock", "status": "True"}],
     "condition"),
    (("status", "conditions"), [{"type": "Ready", "status": "True"},
                                {"type": "ReadonlyFilesystem", "status": "True"}], "condition"),
    (("metadata", "labels"), {"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}, "label"),
    (("status", "allocatable"), {"nvidia.com/gpu": "6"}, "gpu-allocatable"),
])
def test_each_default_source(path, value, source):
    assert node_failure(with_(node(), path, value), DEFAULTS)[0] == source


@pytest.mark.parametrize("path, value", [
    (("status", "conditions"), [{"type": "Ready", "status": "True"}, {"type": "KernelDeadlock", "status": "False"}]),
    (("spec", "taints"), [{"key": "x", "effect": "NoSchedule"}]),
    (("metadata", "labels"), {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}),
    (("status", "allocatable"), {"nvidia.com/gpu": "8"}),
])
def test_healthy_variants(path, value):
    assert node_failure(with_(node(), path, value), DEFAULTS) is None


def test_a_tolerated_no_execute_taint_and_switched_off_sources_do_not_count():
    tainted = with_(node(), ("spec", "taints"), [{"key": "maint", "value": "yes", "effect": "NoExecute"}])
    assert node_failure(tainted, DEFAULTS, [parse_toleration("maint=yes:NoExecute")]) is None
    assert node_failure(tainted, NodeHealthSources(no_execute=False)) is None
    cordoned = with_(node(), ("spec", "unschedulable"), True)
    assert node_failure(cordoned, NodeHealthSources(cordoned=False)) is None


def test_configured_conditions_with_status_and_labels():
    sources = NodeHealthSources(conditions=("GpuHealthy=False",), labels=("health=bad",))
    bad = with_(node(), ("status", "conditions"), [{"type": "Ready", "status": "True"},
                                                   {"type": "GpuHealthy", "status": "False"}])
    assert node_failure(bad, sources) == ("condition", "condition GpuHealthy=False")
    assert node_failure(with_(node(), ("metadata", "labels"), {"health": "bad"}), sources)[0] == "label"
    assert node_failure(with_(node(), ("status", "conditions"), [{"type": "KernelDeadlock", "status": "True"}]),
                        sources) is None  # the defaults were replaced


def test_garbage_node_dicts_never_raise():
    for garbage in ({}, {"spec": None, "status": None}, {"status": {"conditions": ["x", None]}},
                    {"status": {"allocatable": {"nvidia.com/gpu": "lots"}, "capacity": {"nvidia.com/gpu": "8"}}},
                    {"spec": {"taints": [None, "x"]}}):
        node_failure(garbage, DEFAULTS)


def test_failure_clock_keeps_the_first_time_and_forgets_on_recovery():
    now = [100.0]
    failures = NodeFailures(lambda: now[0])
    bad = with_(node(), ("status", "conditions"), [{"type": "Ready", "status": "False"}])
    failures.observe("n1", bad)
    now[0] = 105.0
    failures.observe("n1", None)  # then deleted: still failed since 100
    assert failures.failed["n1"].since == 100.0 and failures.failed["n1"].source == "deleted"
    assert [f.node for f in failures.failed_for(109.0, 10.0)] == []
    assert [f.node for f in failures.failed_for(110.0, 10.0)] == ["n1"]
    failures.observe("n1", node())
    assert failures.failed == {}
