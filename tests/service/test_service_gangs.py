"""Gang filter / bind / reserve behaviour of the extender, one scenario per test."""

from __future__ import annotations

import json

import pytest

from scheduler.handoff.assignment import parse_assignment

from tests.service.helpers import filter_nodes, gang_pod, make_node, make_pod, make_service


def test_first_member_reserves_the_whole_gang_and_gets_only_its_node():
    service = make_service()
    reply = service.filter(gang_pod("train", 2, 4))
    reservations = service.client.get("/reservations").json()
    assert len(reservations) == 1 and reservations[0]["gang"] == "default/train"
    assert reservations[0]["status"] == "reserved" and len(reservations[0]["pods"]) == 4
    assert filter_nodes(reply) == [reservations[0]["pods"]["train-2"]]
    assert service.state.topology.gpus_free == 64 - 32


def test_every_member_binds_to_its_reserved_node_with_rank_annotations():
    service = make_service()
    pods = [gang_pod("train", i, 4, parallelism="tp=8,dp=4") for i in (3, 0, 2, 1)]
    for pod in pods:
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    [entry] = service.client.get("/reservations").json()
    assert entry["status"] == "bound" and entry["expires_at"] is None
    binding = service.binder.bindings[("default", "train-1")]
    assert binding.annotations["meshfit.io/ranks"] == ",".join(str(r) for r in range(8, 16))
    assert binding.annotations["meshfit.io/world-size"] == "32"
    assert binding.annotations["meshfit.io/master-addr"] == service.binder.bindings[("default", "train-0")].node
    assert json.loads(binding.annotations["meshfit.io/coords"])[0] == {"tp": 0, "cp": 0, "ep": 0, "dp": 1, "pp": 0}
    assert service.state.topology.gpus_free == 32
    service.state.topology.check_invariants()
    for record in service.binder.bindings.values():
        assignment = parse_assignment(record.annotations)
        assert assignment.master_addr == service.binder.bindings[("default", "train-0")].node


def test_gang_that_does_not_fit_fails_every_node_with_the_gang_and_shortfall():
    service = make_service()
    reply = service.filter(gang_pod("huge", 0, 9))
    assert filter_nodes(reply) == []
    assert len(reply["FailedNodes"]) == 8
    reason = next(iter(reply["FailedNodes"].values()))
    assert "default/huge" in reason and "72" in reason
    assert service.client.get("/reservations").json() == []


def test_reserved_node_missing_from_a_sampled_list_fails_all_with_operator_hint():
    service = make_service()
    first = filter_nodes(service.filter(gang_pod("train", 0, 2)))[0]
    reservation = service.client.get("/reservations").json()[0]["pods"]
    offered = [n for n in service.state.topology.node_by_name if n != reservation["train-1"]][:3]
    reply = service.filter(gang_pod("train", 1, 2), offered)
    assert first and set(reply["FailedNodes"]) == set(offered)
    assert all("percentageOfNodesToScore: 100" in r for r in reply["FailedNodes"].values())


@pytest.mark.parametrize("cache", [True, False], ids=["names", "nodelist"])
def test_cpu_pod_passes_through_untouched_even_on_unknown_nodes(cache):
    service = make_service()
    reply = service.filter(make_pod("web", gpus=0), ["n-0-0", "cpu-node-7"], cache=cache)
    assert filter_nodes(reply) == ["n-0-0", "cpu-node-7"] and reply["FailedNodes"] == {}


def test_gpu_pod_on_unknown_node_gets_a_reason():
    service = make_service()
    reply = service.filter(make_pod("solo", gpus=4), ["n-0-0", "ghost"])
    assert filter_nodes(reply) == ["n-0-0"]
    assert "not in meshfit's cluster state" in reply["FailedNodes"]["ghost"]


def test_single_gpu_pod_cannot_take_gpus_a_gang_reserved():
    service = make_service([make_node("a"), make_node("b")])
    service.filter(gang_pod("g", 0, 1))
    reserved = service.client.get("/reservations").json()[0]["pods"]["g-0"]
    reply = service.filter(make_pod("solo", gpus=8), ["a", "b"])
    assert filter_nodes(reply) == [n for n in ("a", "b") if n != reserved]
    assert service.bind(make_pod("solo", gpus=8), reserved)["Error"]


def test_members_disagreeing_on_parallelism_get_an_error_and_service_keeps_serving():
    service = make_service()
    service.filter(gang_pod("mix", 0, 2, parallelism="tp=8,dp=2"))
    reply = service.filter(gang_pod("mix", 1, 2, parallelism="tp=4,dp=4"))
    assert "default/mix" in reply["Error"] and "tp=4" in reply["Error"]
    assert service.client.get("/healthz").status_code == 200
    assert filter_nodes(service.filter(gang_pod("ok", 0, 1)))


def test_invalid_parallelism_is_an_error_with_the_reason():
    service = make_service()
    reply = service.filter(gang_pod("bad", 0, 2, parallelism="tp=8,dp=3"))
    assert "tp*cp*ep*pp*dp" in reply["Error"]


@pytest.mark.parametrize("verb,body", [
    ("filter", b"{not json"),
    ("filter", b'{"Pod": null, "Nodes": null, "NodeNames": ["a"]}'),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": null}'),
    ("prioritize", b'[1, 2]'),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": [1, 2]}'),
    ("bind", b'{"PodName": "p"}'),
    ("preempt", b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": "x"}}}'),
    ("volcano/predicate", b'{"task": {"Pod": null}, "node": {"Name": "n"}}'),
    ("volcano/jobEnqueueable", b'"job"'),
], ids=["not-json", "no-pod", "no-nodes", "array", "numeric-names", "bind-missing", "bad-victims", "volcano-no-pod",
        "volcano-string"])
def test_malformed_bodies_are_400_with_a_reason(verb, body):
    service = make_service()
    response = service.client.post(f"/{verb}", content=body)
    assert response.status_code == 400 and response.json()["error"]
    assert service.client.get("/healthz").text == "ok"


def test_expired_reservation_is_released_and_the_gang_placed_again():
    service = make_service(ttl=30)
    service.filter(gang_pod("train", 0, 4))
    service.clock.advance(31)
    assert service.scheduler.sweep() == ["default/train"]
    assert service.state.topology.gpus_free == 64 and service.client.get("/reservations").json() == []
    assert filter_nodes(service.filter(gang_pod("train", 1, 4)))
    assert service.state.topology.gpus_free == 32


def test_a_gang_with_a_bound_member_keeps_every_slot_past_the_ttl():
    service = make_service(ttl=30)
    first = gang_pod("train", 0, 4)
    service.bind(first, filter_nodes(service.filter(first))[0])
    held = {i: service.state.ledger.get("default/train").node_of(i) for i in range(4)}
    service.clock.advance(31)
    assert service.scheduler.sweep() == []
    [entry] = service.client.get("/reservations").json()
    assert entry["status"] == "reserved" and entry["expires_at"] is None
    assert service.state.topology.gpus_free == 64 - 32
    assert filter_nodes(service.filter(gang_pod("train", 3, 4))) == [held[3]]
    assert service.state.topology.gpus_free == 64 - 32


def test_a_deleted_member_keeps_its_slot_for_the_replacement_until_the_gang_is_gone():
    service = make_service()
    pods = [gang_pod("train", i, 2) for i in range(2)]
    service.state.upsert_pod(pods[1])  # both members exist (the watch reports them)
    node = filter_nodes(service.filter(pods[0]))[0]
    service.state.delete_pod("default", "train-0")
    assert service.state.topology.gpus_free == 64 - 16  # the recreated pod 0 gets the same slot
    assert filter_nodes(service.filter(gang_pod("train", 0, 2, uid="replacement"))) == [node]
    service.state.delete_pod("default", "train-0")
    assert service.state.topology.gpus_free == 64 - 16
    service.state.delete_pod("default", "train-1")  # the last member gone: the job was deleted
    assert service.state.topology.gpus_free == 64 and service.client.get("/reservations").json() == []


def test_bind_to_another_node_than_reserved_is_refused():
    service = make_service()
    pod = gang_pod("train", 0, 1)
    node = filter_nodes(service.filter(pod))[0]
    other = next(n for n in service.state.topology.node_by_name if n != node)
    assert "reserved on" in service.bind(pod, other)["Error"]


def test_preempt_drops_nodes_that_would_evict_part_of_a_gang():
    members = [gang_pod("old", i, 2, node=f"n-0-{i}", phase="Running") for i in range(2)]
    loner = make_pod("loner", 8, node="n-0-2", phase="Running")
    service = make_service(pods=[*members, loner])
    body = {"Pod": make_pod("vip", 8), "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        "n-0-0": {"Pods": [{"UID": members[0]["metadata"]["uid"]}], "NumPDBViolations": 0},
        "n-0-2": {"Pods": [{"UID": loner["metadata"]["uid"]}], "NumPDBViolations": 0}}}
    reply = service.client.post("/preempt", json=body).json()
    assert list(reply["NodeNameToMetaVictims"]) == ["n-0-2"]


def test_restart_rebuilds_bound_gangs_without_double_booking():
    bound = [gang_pod("train", i, 4, node=f"n-0-{i}", phase="Running") for i in range(2)]
    service = make_service(pods=bound)
    [entry] = service.client.get("/reservations").json()
    assert entry["status"] == "partial" and entry["pods"] == {"train-0": "n-0-0", "train-1": "n-0-1"}
    node = filter_nodes(service.filter(gang_pod("train", 2, 4)))[0]
    assert node.startswith("n-0-") and node not in ("n-0-0", "n-0-1")
    assert service.state.topology.gpus_free == 64 - 32
    service.state.topology.check_invariants()


def test_metrics_and_readiness_endpoints():
    service = make_service()
    service.filter(gang_pod("train", 0, 2))
    text = service.client.get("/metrics").text
    assert 'meshfit_gangs{status="reserved"} 1.0' in text
    assert "meshfit_request_seconds_bucket" in text and 'verb="filter"' in text
    assert "meshfit_gpus_free 48.0" in text
    assert service.client.get("/readyz").status_code == 200
