"""Rank-table ConfigMaps of reserved and bound gangs: when they are published, what they say, retries."""

from __future__ import annotations

import json

import pytest

from scheduler.rank_table import RANK_TABLE_KEY, configmap_name, parse_rank_table
from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binder_memory import MemoryBinder
from scheduler.service.ranktables import MemoryRankTables
from scheduler.state import ClusterState
from starlette.testclient import TestClient

from tests.service.helpers import FakeClock, Service, filter_nodes, gang_pod, make_nodes, make_service


class FlakyPublisher(MemoryRankTables):
    """A publisher that fails its next `failures` publishes, then stores like `MemoryRankTables`."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    def publish(self, configmap: dict) -> None:
        """Fail while failures remain, else store."""
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("API server unreachable")
        super().publish(configmap)


def service_with(publisher: MemoryRankTables) -> Service:
    """A service over the default nodes publishing rank tables to `publisher`."""
    clock = FakeClock()
    state = ClusterState(clock=clock)
    state.replace_all(make_nodes(), [], [])
    binder = MemoryBinder()
    scheduler, metrics = build_scheduler(state, binder, "first-fit", publisher)
    return Service(state, scheduler, binder, TestClient(create_app(scheduler, metrics)), clock)


def rank_table(service: Service, job: str = "train") -> dict:
    """GET /ranktables/default/<job> as JSON (asserting 200)."""
    response = service.client.get(f"/ranktables/default/{job}")
    assert response.status_code == 200, response.text
    return response.json()


def test_reservation_publishes_a_table_with_every_node_null():
    service = make_service()
    pods = [gang_pod("train", i, 3, parallelism="tp=8,dp=3") for i in range(3)]
    filter_nodes(service.filter(pods[1]))
    configmap = rank_table(service)
    assert configmap["metadata"]["name"] == configmap_name("train")
    table = parse_rank_table(configmap["data"][RANK_TABLE_KEY])
    assert table.pod_nodes == (None, None, None) and not table.complete
    assert table.world_size == 24


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)], ids=["in-order", "shuffled"])
def test_fully_bound_gang_publishes_the_nodes_it_bound_to(order):
    service = make_service()
    pods = [gang_pod("train", i, 3, parallelism="tp=8,dp=3") for i in range(3)]
    for i in order:
        [node] = filter_nodes(service.filter(pods[i]))
        assert service.bind(pods[i], node) == {"Error": ""}
    table = parse_rank_table(rank_table(service)["data"][RANK_TABLE_KEY])
    bound = {key[1]: record.node for key, record in service.binder.bindings.items()}
    assert table.complete
    assert table.pod_nodes == tuple(bound[f"train-{i}"] for i in range(3))
    assert table.master_addr == bound["train-0"]
    assert [row["pod"] for row in table.rows[::8]] == ["train-0", "train-1", "train-2"]


def test_configmap_name_is_also_accepted_and_unknown_jobs_are_404():
    service = make_service()
    [node] = filter_nodes(service.filter(gang_pod("train", 0, 1)))
    assert service.bind(gang_pod("train", 0, 1), node) == {"Error": ""}
    assert rank_table(service, configmap_name("train"))["metadata"]["name"] == configmap_name("train")
    response = service.client.get("/ranktables/default/nope")
    assert response.status_code == 404 and "nope" in response.json()["error"]


def test_failed_publish_does_not_fail_the_bind_and_is_retried_on_the_next_bind():
    publisher = FlakyPublisher(failures=2)  # the reservation's publish and the first retry fail
    service = service_with(publisher)
    pods = [gang_pod("train", i, 2) for i in range(2)]
    [node0] = filter_nodes(service.filter(pods[0]))
    assert publisher.get("default", configmap_name("train")) is None
    assert service.bind(pods[0], node0) == {"Error": ""}
    assert service.scheduler.rank_tables.due() == ["default/train"]
    [node1] = filter_nodes(service.filter(pods[1]))
    assert service.bind(pods[1], node1) == {"Error": ""}
    assert service.scheduler.rank_tables.due() == []
    table = parse_rank_table(publisher.get("default", configmap_name("train"))["data"][RANK_TABLE_KEY])
    assert table.pod_nodes == (node0, node1)
    metrics = service.client.get("/metrics").text
    assert "meshfit_rank_table_publish_failures_total 2.0" in metrics


def test_failure_on_the_last_bind_is_published_by_the_background_retry():
    publisher = FlakyPublisher(failures=0)
    service = service_with(publisher)
    pod = gang_pod("solo", 0, 1)
    [node] = filter_nodes(service.filter(pod))
    publisher.failures = 1
    assert service.bind(pod, node) == {"Error": ""}
    assert service.scheduler.rank_tables.due() == ["default/solo"]
    assert service.scheduler.publish_due() == 0
    table = json.loads(publisher.get("default", configmap_name("solo"))["data"][RANK_TABLE_KEY])
    assert table["pods"][0]["node"] == node
