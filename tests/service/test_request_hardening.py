"""Request hardening of the HTTP front: body-size limit, deep JSON, wrong-typed objects, bounded counts, and the
last-resort 500 that keeps the server serving."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.testclient import TestClient

from scheduler.placement.jobs import MAX_GANG_PODS, JobSpecError
from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from scheduler.service.verbs.grpc_service import gang_from_spec
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from tests.service.helpers import filter_nodes, gang_pod, make_pod, make_service

VERBS = ["/filter", "/prioritize", "/bind", "/preempt", "/volcano/onSessionOpen", "/volcano/jobEnqueueable",
         "/volcano/predicate", "/volcano/prioritize", "/volcano/preemptable"]


def small_limit_client(limit: int) -> TestClient:
    """A client of an app that accepts bodies up to `limit` bytes."""
    service = make_service()
    scheduler, metrics = build_scheduler(service.state, MemoryBinder(), "first-fit")
    return TestClient(create_app(scheduler, metrics, max_body_bytes=limit))


def one_line_error(response) -> str:
    """The `error` of a JSON error reply (asserting it is one line)."""
    reason = response.json()["error"]
    assert "\n" not in reason and reason
    return reason


def test_a_body_over_the_limit_is_413_with_a_reason():
    client = small_limit_client(1000)
    body = json.dumps({"Pod": make_pod("p", 0, annotations={"pad": "x" * 2000}), "NodeNames": ["n-0-0"]})
    response = client.post("/filter", content=body)
    assert response.status_code == 413 and "1000 bytes" in one_line_error(response)
    assert client.post("/filter", json={"Pod": make_pod("p", 0), "NodeNames": ["n-0-0"]}).status_code == 200


def test_an_oversized_streamed_body_is_refused_without_reading_the_rest():
    app = create_app(*build_scheduler(make_service().state, MemoryBinder(), "first-fit"), max_body_bytes=1000)
    consumed, sent = [], []

    async def receive():
        consumed.append(1)
        return {"type": "http.request", "body": b"x" * 600, "more_body": True}  # an endless body

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/filter", "headers": []}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413 and len(consumed) == 2


def test_a_declared_content_length_over_the_limit_is_refused_before_reading():
    app = create_app(*build_scheduler(make_service().state, MemoryBinder(), "first-fit"), max_body_bytes=1000)
    sent = []

    async def receive():
        raise AssertionError("the body must not be read")

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/bind", "headers": [(b"content-length", b"5000000000")]}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413


@pytest.mark.parametrize("path", VERBS)
def test_deeply_nested_json_is_400(path):
    client = make_service().client
    for body in (b"[" * 50_000 + b"]" * 50_000, b'{"Pod":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001):
        response = client.post(path, content=body)
        assert response.status_code == 400, (path, response.text)
        assert "malformed request body" in one_line_error(response)


@pytest.mark.parametrize("pod, field", [
    ({"metadata": "x"}, "Pod.metadata"),
    ({"metadata": {"name": 1}}, "Pod.metadata.name"),
    ({"metadata": {"labels": "x"}}, "Pod.metadata.labels"),
    ({"metadata": {"annotations": {"a": 1}}}, "Pod.metadata.annotations"),
    ({"metadata": {"ownerReferences": [1]}}, "Pod.metadata.ownerReferences[0]"),
    ({"spec": "x"}, "Pod.spec"),
    ({"spec": {"containers": "x"}}, "Pod.spec.containers"),
    ({"spec": {"containers": [{"resources": {"requests": "x"}}]}}, "Pod.spec.containers[0].resources.requests"),
    ({"spec": {"nodeName": ["a"]}}, "Pod.spec.nodeName"),
    ({"status": "x"}, "Pod.status"),
    ({"status": {"phase": 3}}, "Pod.status.phase"),
])
def test_wrong_typed_pod_fields_are_400_naming_the_field(pod, field):
    client = make_service().client
    for path in ("/filter", "/prioritize"):
        response = client.post(path, json={"Pod": pod, "NodeNames": ["n-0-0"]})
        assert response.status_code == 400 and field in one_line_error(response)
    response = client.post("/volcano/predicate", json={"task": {"Pod": pod}, "node": {"Name": "n-0-0"}})
    assert response.status_code == 400 and field.replace("Pod", "task.Pod", 1) in one_line_error(response)
    response = client.post("/preempt", json={"NodeNameToVictims": {"n-0-0": {"Pods": [pod]}}})
    assert response.status_code == 400


@pytest.mark.parametrize("podgroup", [{"spec": "x"}, {"metadata": "x"}, {"metadata": {"annotations": "x"}},
                                      {"spec": {"minMember": "two"}}, {"spec": {"minResources": "x"}}])
def test_a_malformed_volcano_podgroup_is_400(podgroup):
    response = make_service().client.post("/volcano/jobEnqueueable", json={"job": {"Name": "j", "PodGroup": podgroup}})
    assert response.status_code == 400 and "job.PodGroup" in one_line_error(response)


def timed_filter(service, pod) -> tuple[dict, float]:
    """The filter reply for `pod` and the seconds it took."""
    started = time.perf_counter()
    reply = service.filter(pod)
    return reply, time.perf_counter() - started


@pytest.mark.parametrize("annotations", [
    {"meshfit.io/gang-size": "1000000000", "meshfit.io/pod-index": "0"},
    {"meshfit.io/gang-size": str(MAX_GANG_PODS + 1), "meshfit.io/pod-index": "0"},
    {"meshfit.io/parallelism": "tp=8,dp=1000000000", "meshfit.io/pod-index": "0"},
    {"meshfit.io/parallelism": "tp=8,dp=inf", "meshfit.io/pod-index": "0"},
])
def test_huge_counts_on_a_pod_are_refused_at_once(annotations):
    service = make_service()
    pod = make_pod("p", 8, labels={"meshfit.io/gang": "huge"}, annotations=annotations)
    reply, seconds = timed_filter(service, pod)
    assert seconds < 2.0 and filter_nodes(reply) == []
    assert "at most" in reply["Error"] or "positive integer" in reply["Error"]
    assert filter_nodes(service.filter(gang_pod("ok", 0, 1))) != []  # still serving


def test_a_huge_gpu_quantity_is_refused_at_once():
    service = make_service()
    pod = gang_pod("g", 0, 2)
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1e999999999"
    reply, seconds = timed_filter(service, pod)
    assert seconds < 2.0 and filter_nodes(reply) == [] and "above" in reply["Error"]


def test_a_huge_volcano_min_member_is_rejected_at_once():
    client = make_service().client
    body = {"job": {"Name": "j", "Namespace": "ns", "PodGroup": {
        "spec": {"minMember": 1_000_000_000, "minResources": {"nvidia.com/gpu": "8"}}}}}
    started = time.perf_counter()
    response = client.post("/volcano/jobEnqueueable", json=body)
    assert response.status_code == 200 and response.json()["status"] == -1
    assert time.perf_counter() - started < 2.0


def test_a_huge_grpc_gang_is_invalid():
    with pytest.raises(JobSpecError, match="at most|between"):
        gang_from_spec(pb.GangSpec(name="g", pods=1_000_000_000, gpus_per_pod=8))


def test_an_unexpected_exception_is_a_json_500_and_the_server_keeps_serving(monkeypatch, caplog):
    service = make_service()

    def broken(*_args, **_kwargs):
        raise RuntimeError("bug in a handler")

    monkeypatch.setattr(service.scheduler, "filter", broken)
    monkeypatch.setattr(service.scheduler, "reservations", broken)
    response = service.client.post("/filter", json={"Pod": make_pod("p", 0), "NodeNames": ["n-0-0"]})
    assert response.status_code == 500 and "internal error" in one_line_error(response)
    response = service.client.get("/reservations")
    assert response.status_code == 500 and "internal error" in one_line_error(response)
    assert caplog.text.count("RuntimeError: bug in a handler") >= 2
    monkeypatch.undo()
    assert filter_nodes(service.filter(gang_pod("ok", 0, 1))) != []
