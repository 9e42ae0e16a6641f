"""Explicit levels from Kueue / KAI Topology objects and Volcano HyperNodes, including their errors."""

from __future__ import annotations

import pytest

from tests.builders import cluster_from, make_node
from topology.explicit import label_selector_matches
from topology.model import TopologyError


def hypernode(name: str, tier, members: list[tuple[str, dict]]) -> dict:
    """A Volcano HyperNode with (type, selector) members."""
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "members": [{"type": t, "selector": s} for t, s in members]}}


def exact(name: str) -> dict:
    """An exactMatch selector."""
    return {"exactMatch": {"name": name}}


def kueue_topology(name: str, *labels: str, api: str = "kueue.x-k8s.io/v1beta1") -> dict:
    """A Kueue (or, with `api`, KAI) Topology object."""
    return {"apiVersion": api, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


def test_kueue_v1alpha1_topology_is_accepted():
    topo = cluster_from(make_node("a", labels={"x.io/rack": "r1"}),
                        kueue_topology("t", "x.io/rack", api="kueue.x-k8s.io/v1alpha1"))
    assert ([lv.name for lv in topo.levels], topo.scheme) == (["rack", "host"], "kueue:t")


def test_topology_most_nodes_match_wins_with_warning():
    nodes = [make_node(f"n{i}", labels={"x.io/rack": "r1"}) for i in range(2)]
    topo = cluster_from(*nodes, kueue_topology("other", "y.io/zone"), kueue_topology("racks", "x.io/rack"))
    assert topo.scheme == "kueue:racks"
    assert "using 'racks'" in topo.warnings[0]


def test_topology_without_levels_is_an_error():
    bad = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"}, "spec": {}}
    with pytest.raises(TopologyError, match="spec.levels"):
        cluster_from(make_node("a"), bad)


def test_hypernode_tree_with_three_tiers():
    objects = [make_node(f"n{i}") for i in range(4)] + [
        hypernode("leaf-a", 1, [("Node", exact("n0")), ("Node", exact("n1"))]),
        hypernode("leaf-b", 1, [("Node", {"regexMatch": {"pattern": "^n[23]$"}})]),
        hypernode("spine", 2, [("HyperNode", exact("leaf-a")), ("HyperNode", exact("leaf-b"))]),
        hypernode("core", 3, [("HyperNode", exact("spine"))]),
    ]
    topo = cluster_from(*objects)
    assert [(lv.name, lv.role) for lv in topo.levels] == [("tier-3", "core"), ("tier-2", "spine"),
                                                          ("tier-1", "leaf"), ("host", "host")]
    assert topo.common_level(0, 1) == 2 and topo.common_level(0, 2) == 1


HYPERNODE_ERRORS = [
    ("node-in-two-same-tier", [hypernode("a", 1, [("Node", exact("n0"))]), hypernode("b", 1, [("Node", exact("n0"))])],
     "contradictory parents"),
    ("hypernode-two-parents", [hypernode("a", 1, [("Node", exact("n0"))]), hypernode("p", 2, [("HyperNode", exact("a"))]),
                               hypernode("q", 2, [("HyperNode", exact("a"))])], "contradictory parents"),
    ("bad-tier", [hypernode("a", "top", [("Node", exact("n0"))])], "not an integer"),
    ("duplicate", [hypernode("a", 1, []), hypernode("a", 1, [])], "duplicate HyperNode"),
    ("bad-regex", [hypernode("a", 1, [("Node", {"regexMatch": {"pattern": "("}})])], "regex"),
]


@pytest.mark.parametrize(("hypernodes", "message"), [c[1:] for c in HYPERNODE_ERRORS],
                         ids=[c[0] for c in HYPERNODE_ERRORS])
def test_hypernode_errors(hypernodes, message):
    with pytest.raises(TopologyError, match=message):
        cluster_from(make_node("n0"), *hypernodes)


SELECTOR_CASES = [
    ("match-labels", {"matchLabels": {"rack": "r1"}}, True),
    ("match-labels-miss", {"matchLabels": {"rack": "r2"}}, False),
    ("in", {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}, True),
    ("not-in", {"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r1"]}]}, False),
    ("exists", {"matchExpressions": [{"key": "rack", "operator": "Exists"}]}, True),
    ("does-not-exist", {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
    ("empty-selects-nothing", {}, False),
]


@pytest.mark.parametrize(("selector", "expected"), [c[1:] for c in SELECTOR_CASES], ids=[c[0] for c in SELECTOR_CASES])
def test_label_selector_semantics(selector, expected):
    assert label_selector_matches(selector, {"rack": "r1"}) is expected
