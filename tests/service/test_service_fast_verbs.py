"""The ASGI front that answers verb POSTs without Starlette: same replies, same fallbacks, timed per verb."""

from __future__ import annotations

import pytest

from tests.service.helpers import filter_nodes, gang_pod, make_service


@pytest.mark.parametrize("path", ["/filter", "/scheduler/filter"], ids=["root", "url-prefix"])
def test_filter_answers_on_both_prefixes(path):
    service = make_service()
    nodes = sorted(service.state.topology.node_by_name)
    response = service.client.post(path, json={"Pod": gang_pod("train", 0, 2), "Nodes": None, "NodeNames": nodes})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    assert len(filter_nodes(response.json())) == 1


@pytest.mark.parametrize("body,status,reason", [
    (b"{not json", 400, "malformed request body"),
    (b'{"Pod": {}, "Nodes": null}', 400, "neither Nodes nor NodeNames"),
    (b'{"PodName": "p"}', 400, "malformed request body"),
], ids=["not-json", "no-nodes", "bind-missing-fields"])
def test_bad_bodies_are_4xx_with_a_reason(body, status, reason):
    service = make_service()
    path = "/bind" if b"PodName" in body else "/filter"
    response = service.client.post(path, content=body)
    assert response.status_code == status and reason in response.json()["error"]


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/filter", 405),
    ("POST", "/nope", 404),
    ("GET", "/healthz", 200),
], ids=["wrong-method", "unknown-path", "other-route"])
def test_everything_else_is_served_by_the_starlette_app(method, path, status):
    service = make_service()
    assert service.client.request(method, path).status_code == status


def test_verb_latency_is_still_recorded():
    service = make_service()
    service.filter(gang_pod("train", 0, 1))
    text = service.client.get("/metrics").text
    assert 'meshfit_request_seconds_count{verb="filter"} 1.0' in text
