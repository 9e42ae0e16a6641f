"""The list+watch cache against the API double: convergence, 410 relists, bookmarks, missing CRDs."""

from __future__ import annotations

import pytest

from scheduler.kube import run_cache, sync_once
from scheduler.kube.cache import ResourceExpired
from scheduler.kube.resources import DEFAULT_RESOURCES, PODS
from tests.k8s_double import CRD_RESOURCES, ApiServerDouble
from tests.kube.gang_builders import make_jobset, make_pod
from tests.kube.kube_fixtures import RecordingState, eventually, make_node


def seed_cluster(double, nodes: int = 3, pods: int = 2) -> None:
    """Nodes n0.., pods p0.. (p0 bound to n0) and one JobSet."""
    for i in range(nodes):
        double.create(make_node(f"n{i}"))
    for i in range(pods):
        double.create(make_pod(f"p{i}", node="n0" if i == 0 else None))
    double.create(make_jobset("js", [("w", 2, 1)]))


def converged(state: RecordingState, double) -> bool:
    """The state holds exactly the double's nodes, pods and JobSets, at their current versions."""
    store = double.store

    def versions(plural, group="", version="v1"):
        resource = store.resource(group, version, plural)
        return {key[1]: o["metadata"]["resourceVersion"] for key, o in store.objects[resource].items()}

    return (versions("nodes") == {n: o["metadata"]["resourceVersion"] for n, o in state.nodes.items()}
            and versions("pods") == {k[1]: o["metadata"]["resourceVersion"] for k, o in state.pods.items()}
            and versions("jobsets", "jobset.x-k8s.io", "v1alpha2") ==
            {k[2]: o["metadata"]["resourceVersion"] for k, o in state.objects.items() if k[0] == "JobSet"})


def test_initial_list_hands_everything_to_replace_all_with_kinds_restored(double, api_client):
    seed_cluster(double)
    state = RecordingState()
    cache = sync_once(state, api_client)
    assert state.replace_calls == 1 and cache.synced.is_set()
    assert sorted(state.nodes) == ["n0", "n1", "n2"] and len(state.pods) == 2
    assert state.pods[("default", "p0")]["kind"] == "Pod" and state.pods[("default", "p0")]["spec"]["nodeName"] == "n0"
    assert state.get_object("JobSet", "default", "js")["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert converged(state, double)


def test_missing_crds_are_skipped_and_picked_up_once_installed(api_client):
    double = ApiServerDouble(crds=()).start()
    try:
        from kubernetes import client

        config = client.Configuration()
        config.host = double.url
        with client.ApiClient(config) as own_client:
            double.create(make_node("n0"))
            state = RecordingState()
            cache = sync_once(state, own_client)
            jobsets = next(r for r in DEFAULT_RESOURCES if r.plural == "jobsets")
            assert not cache.views[jobsets].available and list(state.nodes) == ["n0"]
            double.store.install(next(r for r in CRD_RESOURCES if r.plural == "jobsets"))
            double.create(make_jobset("late", [("w", 1, 1)]))
            cache.relist(jobsets)
            assert cache.views[jobsets].available and state.get_object("JobSet", "default", "late") is not None
    finally:
        double.stop()


def test_watch_applies_adds_updates_and_deletes_then_bookmarks_move_the_version(double, api_client):
    seed_cluster(double)
    state = RecordingState()
    cache = sync_once(state, api_client, watch_seconds=1)
    double.create(make_pod("p9"))
    pods = double.resource_for({"apiVersion": "v1", "kind": "Pod"})
    double.store.update(pods, "default", "p1", patch={"metadata": {"labels": {"x": "y"}}})
    double.store.delete(pods, "default", "p0")
    double.create(make_node("n7"))  # another resource: only a bookmark can move the pods' version past it
    assert cache.watch_once(PODS) >= 3
    assert set(state.pods) == {("default", "p1"), ("default", "p9")}
    assert state.pods[("default", "p1")]["metadata"]["labels"] == {"x": "y"}
    assert cache.views[PODS].resource_version == str(double.store.rv)


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_expired_watch_relists_without_losing_or_resurrecting_objects(double, api_client, gone_as_http):
    seed_cluster(double)
    double.gone_as_http = gone_as_http
    state = RecordingState()
    cache = sync_once(state, api_client, watch_seconds=1)
    pods = double.resource_for({"apiVersion": "v1", "kind": "Pod"})
    double.create(make_pod("p5"))
    double.store.delete(pods, "default", "p1")
    double.store.compact()
    with pytest.raises(ResourceExpired):
        cache.watch_once(PODS)
    cache.relist(PODS)
    assert set(state.pods) == {("default", "p0"), ("default", "p5")}
    assert cache.relists["pods"] == 1 and converged(state, double)


def test_running_cache_converges_through_events_and_a_forced_410(double, api_client):
    seed_cluster(double)
    state = RecordingState()
    cache = run_cache(state, api_client, watch_seconds=1)
    try:
        double.create(make_pod("p3"))
        double.create(make_node("n3"))
        assert eventually(lambda: converged(state, double))
        double.hold_watches = True
        pods = double.resource_for({"apiVersion": "v1", "kind": "Pod"})
        double.store.delete(pods, "default", "p3")
        double.create(make_pod("p4"))
        double.store.compact()
        double.hold_watches = False
        assert eventually(lambda: converged(state, double) and cache.relists["pods"] >= 1)
    finally:
        cache.stop()
    assert not any(t.is_alive() for t in cache.threads)


def test_transient_server_errors_back_off_and_recover(double, api_client):
    seed_cluster(double)
    state = RecordingState()
    cache = sync_once(state, api_client, watch_seconds=1)
    double.fail_next("GET", "/api/v1/pods", 500)
    cache.start()
    try:
        double.create(make_pod("p8"))
        assert eventually(lambda: ("default", "p8") in state.pods)
    finally:
        cache.stop()


def test_restart_rebuilds_bound_gangs_in_the_real_cluster_state(double, api_client):
    from scheduler.cache.state import ClusterState

    for i in range(4):
        double.create(make_node(f"n{i}"))
    gang = {"meshfit.io/gang-size": "3", "meshfit.io/parallelism": "tp=8,dp=3"}
    for i in range(3):
        double.create(make_pod(f"g-{i}", labels={"meshfit.io/gang": "g"}, node=f"n{i}",
                               annotations={**gang, "meshfit.io/pod-index": str(i)}))
    state = ClusterState()
    sync_once(state, api_client)
    entry = state.ledger.get("default/g")
    assert entry is not None and entry.status == "bound"
    assert {entry.node_of(i) for i in range(3)} == {"n0", "n1", "n2"}
    assert state.topology.gpus_free == 8
