"""Presets and the NodeList generator: geometry, determinism, busy GPUs, unhealthy nodes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.builders import make_cluster, make_nodelist
from topology.model import TopologyError
from topology.presets import PRESETS

GEOMETRY_CASES = [
    # preset, nodes, levels, domains per level (outermost first), GPUs per node
    ("hgx-h100", 64, ["spine", "leaf", "host"], [1, 2, 64], 8),
    ("hgx-h100", 256, ["core", "spine", "leaf", "host"], [1, 2, 8, 256], 8),
    ("gb200-nvl72", 36, ["spine", "leaf", "nvlink", "host"], [1, 1, 2, 36], 4),
    ("gb200-nvl72", 720, ["core", "spine", "leaf", "nvlink", "host"], [1, 2, 5, 40, 720], 4),
    ("gke-a3", 48, ["block", "subblock", "host"], [1, 3, 48], 8),
    ("aws-p5", 80, ["layer-1", "layer-2", "layer-3", "host"], [1, 2, 5, 80], 8),
]


@pytest.mark.parametrize(("preset", "nodes", "levels", "domains", "gpus"), GEOMETRY_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in GEOMETRY_CASES])
def test_preset_geometry(preset, nodes, levels, domains, gpus):
    topo = make_cluster(preset, nodes=nodes)
    assert [lv.name for lv in topo.levels] == levels
    assert [len(topo.domains_at(i)) for i in range(len(levels))] == domains
    assert {n.gpus_total for n in topo.nodes} == {gpus}
    assert topo.link_profile == PRESETS[preset].link_profile
    assert not topo.warnings


def test_nodelist_looks_like_kubectl_output():
    nodelist = make_nodelist("hgx-h100", nodes=2)
    assert (nodelist["apiVersion"], nodelist["kind"]) == ("v1", "NodeList")
    node = nodelist["items"][0]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert {"cpu", "memory"} <= set(node["status"]["capacity"])
    assert node["status"]["conditions"][0]["type"] == "Ready"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]


def test_same_seed_same_bytes_different_seed_differs():
    first = json.dumps(make_nodelist("gke-a3", 20, seed=4, used_fraction=0.4, unhealthy=2))
    again = json.dumps(make_nodelist("gke-a3", 20, seed=4, used_fraction=0.4, unhealthy=2))
    other = json.dumps(make_nodelist("gke-a3", 20, seed=5, used_fraction=0.4, unhealthy=2))
    assert first == again and first != other


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0], ids=["quarter", "half", "full"])
def test_used_fraction_becomes_running_pods(fraction):
    nodelist = make_nodelist("hgx-h100", nodes=32, used_fraction=fraction, seed=2)
    assert nodelist["kind"] == "List"
    topo = make_cluster("hgx-h100", nodes=32, used_fraction=fraction, seed=2)
    assert topo.gpus_total - topo.gpus_free == round(fraction * 256)
    topo.check_invariants()


def test_unhealthy_nodes_rotate_through_failure_kinds():
    topo = make_cluster("aws-p5", nodes=20, unhealthy=6, used_fraction=0.5, seed=9)
    reasons = Counter((n.unschedulable_reason or "ok").split(" ")[0] for n in topo.nodes)
    assert reasons == Counter({"ok": 14, "NotReady": 2, "cordoned": 2, "taint": 2})
    assert all(n.gpus_used == 0 for n in topo.nodes if not n.schedulable)


GENERATOR_ERRORS = [("no-nodes", ("hgx-h100", 0), "at least 1"), ("bad-preset", ("tpu", 4), "unknown preset"),
                    ("fraction", ("hgx-h100", 4, 0, 1.5), "used-fraction"), ("unhealthy", ("hgx-h100", 4, 0, 0.0, 5), "unhealthy")]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in GENERATOR_ERRORS], ids=[c[0] for c in GENERATOR_ERRORS])
def test_generator_argument_errors(args, message):
    with pytest.raises(TopologyError, match=message):
        make_nodelist(*args)
