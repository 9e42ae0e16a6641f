"""Label schemes: every hand-written fixture gives the right scheme, levels, paths and link profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.loaders import load_cluster
from topology.schemes import detect_levels, levels_from_label_keys, name_and_role_for_key

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nodes"

SCHEME_CASES = [
    # file, scheme, levels outermost first, (node, its path), link profile
    ("topograph-old.yaml", "topograph", ["core", "spine", "leaf", "nvlink", "host"],
     ("h100-b1", ["core-1", "spine-1", "leaf-b", "nvl-b", "h100-b1"]), "hgx-h100"),
    ("topograph-new.json", "topograph", ["tier-3", "core", "spine", "leaf", "nvlink", "host"],
     ("node-2", ["sw-x0", "sw-c0", "sw-s1", "sw-l1", "nvl-1", "node-2"]), "hgx-h100"),
    ("topograph-mixed.json", "topograph", ["spine", "leaf", "nvlink", "host"],
     ("new-1", ["s1", "l2", "1b6e0f1c-5d0e-4c2a-9f7e-0a1b2c3d4e5f.1", "new-1"]), "hgx-h100"),
    ("clique.yaml", "nvidia-clique", ["nvlink", "host"],
     ("gb-2", ["0d2e8b41-7c3a-4e5f-9b1d-12ab34cd56ef.32766", "gb-2"]), "hgx-h100"),
    ("gke.yaml", "gke", ["block", "subblock", "machine", "host"],
     ("gke-a3-np-3", ["b-7c1f", "sb-02", "h-shared", "gke-a3-np-3"]), "gke-a3"),
    ("aws.json", "aws", ["layer-1", "layer-2", "layer-3", "host"],
     ("ip-10-0-0-3.ec2.internal", ["nn-1111", "nn-2222", "nn-3333", "ip-10-0-0-3.ec2.internal"]), "aws-p5"),
    ("oci.yaml", "oci", ["network-block", "rack", "host"],
     ("10.0.2.10", ["nb-b", "rack-3", "10.0.2.10"]), "hgx-h100"),
    ("coreweave.yaml", "coreweave", ["fabric", "superpod", "leafgroup", "nvlink", "host"],
     ("g7a1b2e", ["fab-us-east-04a", "sp-2", "lg-7", "nvl72-r02", "g7a1b2e"]), "gb200-nvl72"),
    ("kueue-topology.yaml", "kueue:default", ["block", "rack", "host"], ("k-2", ["b2", "r3", "k-2"]), "hgx-h100"),
    ("kai-topology.yaml", "kai:cluster-topology", ["zone", "nvlink", "host"],
     ("kai-1", ["z1", "c-uuid.2", "kai-1"]), "hgx-h100"),
    ("volcano-hypernodes.yaml", "volcano-hypernode", ["tier-2", "tier-1", "host"],
     ("vc-4", ["s2", "s1", "vc-4"]), "hgx-h100"),
    ("nvl72-partial.yaml", "topograph", ["leaf", "nvlink", "host"],
     ("nvl-2", ["leaf-7", "5e1c9a7b-2d4f-4e6a-8b0c-1d2e3f4a5b6c.1", "nvl-2"]), "gb200-nvl72"),
]


def _path_names(topo, node_name: str) -> list[str]:
    node = topo.node_by_name[node_name]
    return [topo.domains[d].name for d in node.path]


@pytest.mark.parametrize(("fixture", "scheme", "levels", "node_path", "profile"), SCHEME_CASES,
                         ids=[case[0] for case in SCHEME_CASES])
def test_fixture_levels_and_paths(fixture, scheme, levels, node_path, profile):
    topo = load_cluster(FIXTURES / fixture)
    assert topo.scheme == scheme
    assert [level.name for level in topo.levels] == levels
    assert _path_names(topo, node_path[0]) == node_path[1]
    assert topo.link_profile == profile
    topo.check_invariants()


def test_mixed_generations_share_domains():
    topo = load_cluster(FIXTURES / "topograph-mixed.json")
    old, new = topo.node_by_name["old-0"], topo.node_by_name["new-0"]
    assert topo.common_level(old.index, new.index) == topo.level_index("nvlink")
    assert topo.level_index("network.topology.nvidia.com/leaf") == topo.level_index("fabric.topograph.run/tier-0")


def test_partial_nvl72_rack_uses_fallback_domains_and_warns():
    topo = load_cluster(FIXTURES / "nvl72-partial.yaml")
    assert _path_names(topo, "nvl-3") == ["leaf-7", "unlabelled-nvlink:nvl-3", "nvl-3"]
    assert _path_names(topo, "nvl-4") == ["unlabelled-leaf:nvl-4", "unlabelled-nvlink:nvl-4", "nvl-4"]
    fallback = [d.name for d in topo.domains if d.fallback]
    assert fallback == ["unlabelled-nvlink:nvl-3", "unlabelled-leaf:nvl-4", "unlabelled-nvlink:nvl-4"]
    assert any("nvl-4" in w and "leaf, nvlink" in w for w in topo.warnings)


def test_gke_physical_host_level_dropped_when_one_node_per_host():
    labels = [{"cloud.google.com/gce-topology-block": "b", "cloud.google.com/gce-topology-subblock": "s",
               "cloud.google.com/gce-topology-host": f"h{i}"} for i in range(3)]
    scheme, levels = detect_levels(labels)
    assert (scheme, [lv.name for lv in levels]) == ("gke", ["block", "subblock"])


LEVEL_KEEP_CASES = [
    ("only-leaf", [{"network.topology.nvidia.com/leaf": "l"}], ["leaf"]),
    ("aws-two-layers", [{"topology.k8s.aws/network-node-layer-1": "a", "topology.k8s.aws/network-node-layer-3": "c"}],
     ["layer-1", "layer-3"]),
    ("clique-with-gke", [{"cloud.google.com/gce-topology-block": "b", "nvidia.com/gpu.clique": "u.1"}],
     ["block", "nvlink"]),
    ("no-labels", [{"kubernetes.io/hostname": "x"}], []),
    ("empty-value-ignored", [{"network.topology.nvidia.com/spine": "", "network.topology.nvidia.com/leaf": "l"}],
     ["leaf"]),
]


@pytest.mark.parametrize(("labels", "expected"), [c[1:] for c in LEVEL_KEEP_CASES], ids=[c[0] for c in LEVEL_KEEP_CASES])
def test_only_levels_with_labels_present_are_kept(labels, expected):
    _scheme, levels = detect_levels(labels)
    assert [lv.name for lv in levels] == expected


def test_detection_picks_scheme_most_nodes_carry():
    labels = [{"topology.k8s.aws/network-node-layer-3": "x"}] * 3 + [{"network.topology.nvidia.com/leaf": "l"}]
    assert detect_levels(labels)[0] == "aws"


EXPLICIT_KEY_CASES = [
    ("known-gke", "cloud.google.com/gce-topology-subblock", 0, ("subblock", "leaf")),
    ("known-clique", "nvidia.com/gpu.clique", 0, ("nvlink", "nvlink")),
    ("derived-rack", "cloud.provider.com/topology-rack", 0, ("rack", "leaf")),
    ("derived-block", "cloud.provider.com/topology-block", 1, ("block", "spine")),
    ("positional", "example.com/foo", 2, ("foo", "core")),
]


@pytest.mark.parametrize(("key", "depth", "expected"), [c[1:] for c in EXPLICIT_KEY_CASES],
                         ids=[c[0] for c in EXPLICIT_KEY_CASES])
def test_names_and_roles_for_explicit_keys(key, depth, expected):
    assert name_and_role_for_key(key, depth) == expected


def test_explicit_level_names_are_unique_and_host_dropped():
    levels = levels_from_label_keys(["a.io/rack", "b.io/rack", "kubernetes.io/hostname"])
    assert [lv.name for lv in levels] == ["rack", "rack-2"]
