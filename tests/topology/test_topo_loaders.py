"""Loading NodeLists / Lists: GPU quantities, pods, schedulability, tolerations, config, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import cluster_from, make_list, make_node, make_pod, write_objects
from topology.k8s import node_record_from_k8s, parse_gpu_quantity, parse_toleration, pod_gpu_request
from topology.loaders import load_cluster, read_objects
from topology.model import TopologyError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nodes"

BAD_FILES = [
    ("not-json", "not-json.json", "is not valid JSON"),
    ("not-yaml", "not-yaml.yaml", "is not valid JSON or YAML (line 5)"),
    ("binary", "binary.json", "binary.json: not UTF-8 text: byte 0 (line 1) is 0x89"),
    ("empty", "empty.json", "is empty"),
    ("configmap", "not-nodelist.yaml", "expected a NodeList or List, got kind 'ConfigMap'"),
    ("yaml-list", "yaml-list.yaml", "expected a NodeList or List, got a list"),
    ("no-nodes", "no-nodes.json", "no Node objects found"),
    ("negative", "negative-gpus.json", "negative GPU quantity '-1'"),
    ("non-numeric", "non-numeric-gpus.yaml", "GPU quantity 'abc' is not a number"),
    ("fractional", "fractional-gpus.json", "is not a whole number"),
    ("duplicate", "duplicate-names.json", "duplicate node name 'n-0'"),
    ("contradictory", "contradictory-parents.yaml", "contradictory parents"),
]


@pytest.mark.parametrize(("fixture", "message"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_files_raise_one_line_topology_error(fixture, message):
    with pytest.raises(TopologyError) as info:
        load_cluster(FIXTURES / "bad" / fixture)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_is_a_topology_error(tmp_path):
    with pytest.raises(TopologyError, match="cannot read"):
        load_cluster(tmp_path / "absent.json")


QUANTITY_CASES = [("int", 8, 8), ("str", "8", 8), ("decimal-integral", "8.0", 8), ("zero", "0", 0),
                  ("exponent", "1e1", 10), ("spaces", " 4 ", 4)]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in QUANTITY_CASES], ids=[c[0] for c in QUANTITY_CASES])
def test_gpu_quantities_parse(raw, expected):
    assert parse_gpu_quantity(raw, "test") == expected


BAD_QUANTITIES = [("negative", "-1"), ("word", "abc"), ("half", "0.5"), ("bool", True), ("none", None),
                  ("suffix", "8Gi"), ("nan", "nan"), ("list", [8])]


@pytest.mark.parametrize("raw", [c[1] for c in BAD_QUANTITIES], ids=[c[0] for c in BAD_QUANTITIES])
def test_bad_gpu_quantities_rejected(raw):
    with pytest.raises(TopologyError):
        parse_gpu_quantity(raw, "test")


def test_pods_consume_gpus_like_kube():
    topo = load_cluster(FIXTURES / "list-with-pods.json")
    assert topo.node_by_name["p-0"].gpus_used == 6      # 4 + two 1-GPU containers (limits only)
    assert topo.node_by_name["p-1"].gpus_used == 3      # init container 3 > app container 1
    assert sorted(topo.pods) == ["a/limits-only-2", "a/running-4", "b/init-heavy-3"]
    assert any("nodes not in the cluster file" in w for w in topo.warnings)
    topo.check_invariants()


SIDECAR_POD = {"metadata": {"name": "s"}, "spec": {
    "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                       {"name": "init", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}


def test_sidecar_init_containers_add_to_app_containers():
    assert pod_gpu_request(SIDECAR_POD) == 5            # init step: sidecar 1 + init 4 > sidecar 1 + app 2


SCHEDULABILITY_CASES = [
    ("cordoned.json", "ok-0", True, None),
    ("cordoned.json", "cordoned-0", False, "cordoned"),
    ("cordoned.json", "notready-0", False, "NotReady"),
    ("cordoned.json", "unknown-0", False, "NotReady (unreachable)"),
    ("tainted.yaml", "t-noschedule", False, "taint nvidia.com/gpu.unhealthy=xid-79:NoSchedule"),
    ("tainted.yaml", "t-noexecute", False, "taint maintenance:NoExecute"),
    ("tainted.yaml", "t-prefer", True, None),
]


@pytest.mark.parametrize(("fixture", "node", "schedulable", "reason"), SCHEDULABILITY_CASES,
                         ids=[c[1] for c in SCHEDULABILITY_CASES])
def test_schedulability_and_reason(fixture, node, schedulable, reason):
    record = load_cluster(FIXTURES / fixture).node_by_name[node]
    assert (record.schedulable, record.unschedulable_reason) == (schedulable, reason)
    assert record.gpus_free == (8 if schedulable else 0)


TOLERATION_CASES = [
    ("exists-key", ["node.kubernetes.io/unschedulable"], "cordoned-0", True),
    ("exists-key-effect", ["node.kubernetes.io/unschedulable:NoSchedule"], "cordoned-0", True),
    ("wrong-effect", ["node.kubernetes.io/unschedulable:NoExecute"], "cordoned-0", False),
    ("everything", ["*"], "notready-0", True),
    ("not-ready", ["node.kubernetes.io/not-ready"], "notready-0", True),
    ("dict", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}], "unknown-0", True),
]


@pytest.mark.parametrize(("tolerations", "node", "schedulable"), [c[1:] for c in TOLERATION_CASES],
                         ids=[c[0] for c in TOLERATION_CASES])
def test_tolerations_make_nodes_schedulable(tolerations, node, schedulable):
    topo = load_cluster(FIXTURES / "cordoned.json", tolerations=tolerations)
    assert topo.node_by_name[node].schedulable is schedulable


def test_toleration_value_must_match_for_equal():
    taint = {"key": "nvidia.com/gpu.unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    assert parse_toleration("nvidia.com/gpu.unhealthy=xid-79:NoSchedule").tolerates(taint)
    assert not parse_toleration("nvidia.com/gpu.unhealthy=xid-48").tolerates(taint)


def test_bad_toleration_effect_rejected():
    with pytest.raises(TopologyError, match="effect must be"):
        parse_toleration("key:Sometimes")


def test_node_record_from_k8s_reads_gpus_labels_and_reason():
    record = node_record_from_k8s(make_node("n", 4, labels={"a": "b"}, unschedulable=True))
    assert (record.name, record.gpus_total, record.labels["a"], record.schedulable) == ("n", 4, "b", False)


def test_amd_and_custom_gpu_resources():
    amd = cluster_from(make_node("a", 8, resource="amd.com/gpu"))
    assert amd.gpus_total == 8
    custom = cluster_from(make_node("c", 2, resource="example.com/tpu"), config={"gpu_resources": ["example.com/tpu"]})
    assert custom.gpus_total == 2


def test_cpu_only_nodes_are_ignored_with_a_warning():
    cpu = make_node("cpu", 0)
    cpu["status"] = {"allocatable": {"cpu": "8"}}
    topo = cluster_from(make_node("gpu", 8), cpu)
    assert [n.name for n in topo.nodes] == ["gpu"]
    assert "ignored 1 node(s) without" in topo.warnings[0]


def test_no_gpu_nodes_at_all_is_an_error():
    cpu = make_node("cpu", 0)
    cpu["status"] = {"allocatable": {"cpu": "8"}}
    with pytest.raises(TopologyError, match="no node has a GPU resource"):
        cluster_from(cpu)


def test_nodelist_items_without_kind_and_multidoc_yaml(tmp_path):
    path = tmp_path / "multi.yaml"
    path.write_text("kind: NodeList\napiVersion: v1\nitems:\n- metadata: {name: a}\n"
                    "  status: {allocatable: {nvidia.com/gpu: '8'}}\n---\n"
                    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                    "spec: {nodeName: a, containers: [{resources: {limits: {nvidia.com/gpu: '2'}}}]}\n"
                    "status: {phase: Running}\n")
    kinds = [obj["kind"] for obj in read_objects(path)]
    assert kinds == ["Node", "Pod"]
    assert load_cluster(path).node_by_name["a"].gpus_free == 6


def test_yaml_and_json_give_the_same_topology(tmp_path):
    document = make_list(make_node("a", labels={"network.topology.nvidia.com/leaf": "l"}), make_pod("p", "a", 3))
    from_json = load_cluster(write_objects(tmp_path, document, "c.json"))
    from_yaml = load_cluster(write_objects(tmp_path, document, "c.yaml"))
    assert [(n.name, n.gpus_free, n.path) for n in from_json.nodes] == [(n.name, n.gpus_free, n.path) for n in from_yaml.nodes]


def test_config_overrides_links_by_name_and_role(tmp_path):
    config = tmp_path / "links.yaml"
    config.write_text("profile: gb200-nvl72\nlinks:\n  leaf: {oversubscription: 2.0}\n  host: {latency_us: 1.5}\n")
    topo = load_cluster(FIXTURES / "topograph-old.yaml", config=config)
    leaf = topo.levels[topo.level_index("leaf")].link
    assert (leaf.bandwidth_gbps, leaf.oversubscription) == (50, 2.0)
    assert topo.levels[topo.host_level].link.bandwidth_gbps == 900
    assert topo.levels[topo.host_level].link.latency_us == 1.5


def test_config_explicit_levels_override_detection():
    config = {"levels": [{"label": "network.topology.nvidia.com/spine", "name": "pod", "role": "core"}]}
    topo = load_cluster(FIXTURES / "topograph-old.yaml", config=config)
    assert [lv.name for lv in topo.levels] == ["pod", "host"]
    assert (topo.scheme, topo.levels[0].role) == ("config", "core")


BAD_CONFIGS = [("unknown-key", {"linkz": {}}), ("negative-bw", {"links": {"leaf": {"bandwidth_gbps": -1}}}),
               ("under-one-oversub", {"links": {"leaf": {"oversubscription": 0.5}}}),
               ("unknown-profile", {"profile": "tpu-v5"}), ("not-a-mapping", ["x"])]


@pytest.mark.parametrize("config", [c[1] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_configs_are_topology_errors(config):
    with pytest.raises(TopologyError, match="config"):
        cluster_from(make_node("a"), config=config)
