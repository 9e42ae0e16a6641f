"""`topology show -o json` document (DESIGN contract) and the networkx graph / exports."""

from __future__ import annotations

import io

import networkx as nx
import pytest

from tests.builders import make_cluster
from topology.graph import dot_text, to_graph, validate_graph, write_graphml
from topology.report import topology_json

DOMAIN_KEYS = ["level", "name", "parent", "nodes", "gpus_total", "gpus_free"]
NODE_KEYS = ["name", "gpus_total", "gpus_free", "schedulable", "path"]


def test_topology_json_follows_design_contract():
    topo = make_cluster("gb200-nvl72", nodes=20, used_fraction=0.3, unhealthy=1, seed=1)
    document = topology_json(topo)
    assert document["levels"] == ["spine", "leaf", "nvlink", "host"]
    assert all(list(d)[:6] == DOMAIN_KEYS for d in document["domains"])
    assert all(list(n)[:5] == NODE_KEYS for n in document["nodes"])
    assert all(list(n["path"]) == document["levels"] for n in document["nodes"])
    assert sum(n["gpus_free"] for n in document["nodes"]) == topo.gpus_free


def test_domain_parents_and_totals_are_consistent():
    document = topology_json(make_cluster("hgx-h100", nodes=70, used_fraction=0.5, seed=2))
    by_key = {(d["level"], d["name"]): d for d in document["domains"]}
    levels = document["levels"]
    for domain in document["domains"]:
        depth = levels.index(domain["level"])
        if depth == 0:
            assert domain["parent"] is None
        else:
            parent = by_key[(levels[depth - 1], domain["parent"])]
            assert set(domain["nodes"]) <= set(parent["nodes"])
        free = sum(n["gpus_free"] for n in document["nodes"] if n["name"] in set(domain["nodes"]))
        assert domain["gpus_free"] == free


@pytest.mark.parametrize("preset", ["hgx-h100", "gb200-nvl72", "gke-a3", "aws-p5"])
def test_graph_is_a_valid_tree(preset):
    topo = make_cluster(preset, nodes=40, used_fraction=0.2)
    assert validate_graph(topo) == []
    graph = to_graph(topo)
    assert nx.is_arborescence(graph)
    assert sum(1 for _v, kind in graph.nodes(data="kind") if kind == "gpu") == topo.gpus_total


def test_validate_graph_reports_broken_totals():
    topo = make_cluster(nodes=4)
    topo.domains[0].gpus_total += 1
    assert any("gpus_total" in problem for problem in validate_graph(topo))


def test_graphml_round_trips_through_networkx():
    topo = make_cluster("gke-a3", nodes=8)
    buffer = io.BytesIO()
    write_graphml(topo, buffer)
    buffer.seek(0)
    graph = nx.read_graphml(buffer)
    assert graph.number_of_nodes() == to_graph(topo).number_of_nodes()
    assert graph.nodes["cluster"]["gpus_total"] == 64


def test_dot_text_has_every_vertex_and_edge():
    topo = make_cluster("hgx-h100", nodes=3)
    text = dot_text(topo)
    graph = to_graph(topo, gpus=False)
    assert text.startswith("digraph meshfit {") and text.rstrip().endswith("}")
    assert text.count(" -> ") == graph.number_of_edges()
    assert '"node:dgx-h100-0002"' in text
