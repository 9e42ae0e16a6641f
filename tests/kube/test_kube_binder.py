"""KubeBinder and the rank-table ConfigMap publisher against the API double."""

from __future__ import annotations

import json

import pytest

from scheduler.kube.binder import BindError, KubeBinder
from scheduler.kube.configmap import ConfigMapError, publish_configmap
from scheduler.service.binding.binder import BindConflict
from tests.kube.gang_builders import make_pod

ASSIGNMENT = {"meshfit.io/ranks": "8-15", "meshfit.io/rank-order": "tp-cp-ep-dp-pp", "meshfit.io/master-addr": "n0"}


def stored_pod(double, name: str = "p0") -> dict:
    """The pod as the double now stores it."""
    return double.store.get(double.resource_for({"apiVersion": "v1", "kind": "Pod"}), "default", name)


def test_bind_is_one_binding_carrying_the_annotations(double, api_client):
    created = double.create(make_pod("p0", annotations={"keep": "me"}))
    KubeBinder(api_client).bind("default", "p0", created["metadata"]["uid"], "n3", ASSIGNMENT)
    pod = stored_pod(double)
    assert pod["spec"]["nodeName"] == "n3"
    assert pod["metadata"]["annotations"] == {"keep": "me", **ASSIGNMENT}
    writes = [(verb, path) for verb, path, _ in double.requests if verb != "GET"]
    assert writes == [("POST", "/api/v1/namespaces/default/pods/p0/binding")]


CONFLICT_CASES = [
    ("already-bound", {"node": "n1"}, "uid", 'pod p0 is already assigned to node "n1"'),
    ("other-pod-same-name", {}, "not-the-uid", "Precondition failed: UID in precondition: not-the-uid"),
]


@pytest.mark.parametrize("pod_args,uid,message", [c[1:] for c in CONFLICT_CASES], ids=[c[0] for c in CONFLICT_CASES])
def test_conflicts_raise_bind_conflict_with_the_servers_reason(double, api_client, pod_args, uid, message):
    created = double.create(make_pod("p0", **pod_args))
    uid = created["metadata"]["uid"] if uid == "uid" else uid
    with pytest.raises(BindConflict) as info:
        KubeBinder(api_client).bind("default", "p0", uid, "n3", ASSIGNMENT)
    assert message in str(info.value) and "pod default/p0" in str(info.value)
    assert stored_pod(double)["spec"].get("nodeName") == pod_args.get("node")


def test_binding_a_pod_that_is_gone_is_a_conflict(api_client, double):
    with pytest.raises(BindConflict, match="not found"):
        KubeBinder(api_client).bind("default", "ghost", "", "n0", ASSIGNMENT)


def test_server_errors_are_bind_errors(double, api_client):
    double.create(make_pod("p0"))
    double.fail_next("POST", "/binding", 500)
    with pytest.raises(BindError, match="HTTP 500"):
        KubeBinder(api_client).bind("default", "p0", "", "n0", ASSIGNMENT)
    pod = stored_pod(double)  # nothing half-done: neither the node nor any assignment annotation
    assert pod["spec"].get("nodeName") is None and not (pod["metadata"].get("annotations") or {})


def rank_configmap(document: dict) -> dict:
    """A rank-table ConfigMap like `scheduler.handoff.rank_table.rank_table_configmap` builds."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "meshfit-job-ranks", "namespace": "team"},
            "data": {"ranks.json": json.dumps(document)}}


def test_configmap_is_created_then_replaced(double, api_client):
    first = publish_configmap(api_client, rank_configmap({"pods": [None, None]}))
    second = publish_configmap(api_client, rank_configmap({"pods": ["n0", "n1"]}))
    stored = double.store.get(double.resource_for({"apiVersion": "v1", "kind": "ConfigMap"}), "team", "meshfit-job-ranks")
    assert json.loads(stored["data"]["ranks.json"]) == {"pods": ["n0", "n1"]}
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_configmap_failures_are_one_line_errors(double, api_client):
    double.fail_next("POST", "/configmaps", 403)
    with pytest.raises(ConfigMapError, match="creating ConfigMap team/meshfit-job-ranks failed: 403"):
        publish_configmap(api_client, rank_configmap({}))


def test_rank_table_of_a_placed_gang_round_trips_through_the_api(double, api_client):
    from scheduler.placement.engine import place
    from scheduler.placement.jobs import Gang, Parallelism, PodSlot
    from scheduler.kube.configmap import publish_rank_table
    from scheduler.handoff.rank_table import RANK_TABLE_KEY, parse_rank_table
    from tests.builders import make_cluster

    gang = Gang("team", "llm", tuple(PodSlot(i, f"llm-{i}", 8) for i in range(2)), Parallelism(tp=8, dp=2))
    placement = place(gang, make_cluster(nodes=4), policy="first-fit")
    publish_rank_table(api_client, placement, master_addr=placement.pod_nodes[0])
    stored = double.store.get(double.resource_for({"apiVersion": "v1", "kind": "ConfigMap"}), "team", "meshfit-llm-ranks")
    table = parse_rank_table(stored["data"][RANK_TABLE_KEY])
    assert table.pod_nodes == tuple(placement.pod_nodes) and table.world_size == 16


def test_a_nomination_answers_the_pods_resource_version_after_the_write(double, api_client):
    from scheduler.kube.binder import KubeNominator, written_version

    created = double.create(make_pod("p0"))
    version = KubeNominator(api_client).nominate("default", "p0", created["metadata"]["uid"], "n3")
    pod = stored_pod(double)
    assert pod["status"]["nominatedNodeName"] == "n3"
    assert version == pod["metadata"]["resourceVersion"] and version != created["metadata"]["resourceVersion"]
    assert written_version(b"not json") is None and written_version(b'{"metadata": {}}') is None
