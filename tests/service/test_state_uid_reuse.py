"""A pod uid seen again under another namespace/name replaces the old record cleanly (no KeyError later)."""

from __future__ import annotations

from scheduler.cache.state import ClusterState
from tests.service.helpers import filter_nodes, make_nodes, make_pod, make_service


def fresh_state() -> ClusterState:
    """A state over the default 8 nodes x 8 GPUs."""
    state = ClusterState()
    state.replace_all(make_nodes(), [], [])
    return state


def test_a_reused_uid_replaces_the_old_pod_and_frees_its_gpus():
    state = fresh_state()
    state.upsert_pod(make_pod("p", 8, "ns1", uid="U", node="n-0-0", phase="Running"))
    assert state.topology.node_by_name["n-0-0"].gpus_free == 0
    state.upsert_pod(make_pod("q", 8, "ns2", uid="U"))
    assert state.pod("ns1", "p") is None
    assert state.pod("ns2", "q").uid == "U" and state.pod_by_uid("U").key == "ns2/q"
    assert state.topology.node_by_name["n-0-0"].gpus_free == 8


def test_names_stay_usable_after_a_uid_moved_between_namespaces():
    state = fresh_state()
    state.upsert_pod(make_pod("p", 8, "ns1", uid="U"))
    state.upsert_pod(make_pod("p", 8, "ns2", uid="U"))
    state.delete_pod("ns2", "p")
    state.upsert_pod(make_pod("p", 8, "ns1", uid="V", node="n-0-1", phase="Running"))  # was a KeyError
    state.record_binding("ns1", "p", "n-0-1")
    state.delete_pod("ns1", "p")
    assert state.pods == {} and state.topology.node_by_name["n-0-1"].gpus_free == 8


def test_filter_keeps_answering_when_requests_reuse_a_uid():
    service = make_service()
    for namespace, name, uid in [("ns1", "p", "U"), ("ns2", "p", "U"), ("ns1", "p", "V"), ("ns2", "q", "V")]:
        assert filter_nodes(service.filter(make_pod(name, 8, namespace, uid=uid)))
    assert service.state.pod("ns2", "q").uid == "V" and service.state.pod("ns1", "p") is None
