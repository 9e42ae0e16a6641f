"""Rank-table ConfigMaps of bound gangs: published once, off the bind path, when whole; what they say; retries."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot
from scheduler.handoff.rank_table import (RANK_TABLE_KEY, configmap_name, encode_rank_table, parse_rank_table,
                                  rank_table_configmap, rank_table_document)
from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from scheduler.service.binding.ranktables import MemoryRankTables
from scheduler.cache.state import ClusterState
from starlette.testclient import TestClient

from tests.builders import make_cluster
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


def test_a_reservation_publishes_nothing_the_whole_gang_publishes_once():
    counting = FlakyPublisher(failures=0)
    service = service_with(counting)
    pods = [gang_pod("train", i, 3, parallelism="tp=8,dp=3") for i in range(3)]
    nodes = [filter_nodes(service.filter(pod))[0] for pod in pods]
    assert service.scheduler.rank_tables.wait_idle(5.0) and counting.attempts == 0  # reserved: no write
    for pod, node in zip(pods, nodes):
        assert service.bind(pod, node) == {"Error": ""}
    assert service.scheduler.rank_tables.wait_idle(5.0)
    assert counting.attempts == 1  # one write for the whole gang
    service.scheduler.tick()
    service.scheduler.rank_tables.mark_due("default/train")
    service.scheduler.publish_due()
    assert counting.attempts == 1  # an unchanged table is never written again
    table = parse_rank_table(counting.get("default", configmap_name("train"))["data"][RANK_TABLE_KEY])
    assert table.complete and table.pod_nodes == tuple(nodes) and table.world_size == 24


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


def test_failed_publish_does_not_fail_the_bind_and_is_retried_by_the_sweeper():
    publisher = FlakyPublisher(failures=2)
    service = service_with(publisher)
    pods = [gang_pod("train", i, 2) for i in range(2)]
    nodes = [filter_nodes(service.filter(pod))[0] for pod in pods]
    for pod, node in zip(pods, nodes):
        assert service.bind(pod, node) == {"Error": ""}
    assert service.scheduler.rank_tables.wait_idle(5.0)
    assert service.scheduler.rank_tables.due() == ["default/train"]  # the background publish failed
    assert service.scheduler.publish_due() == 1  # the sweeper's retry fails once more, then succeeds
    assert service.scheduler.publish_due() == 0 and service.scheduler.rank_tables.due() == []
    table = parse_rank_table(publisher.get("default", configmap_name("train"))["data"][RANK_TABLE_KEY])
    assert table.pod_nodes == tuple(nodes)
    metrics = service.client.get("/metrics").text
    assert "meshfit_rank_table_publish_failures_total 2.0" in metrics


class BlockingPublisher(MemoryRankTables):
    """A publisher whose `publish` waits for `release` (an API server that answers slowly), recording the order."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.started = threading.Event()
        self.published: list[tuple[str | None, ...]] = []

    def publish(self, configmap: dict) -> None:
        """Block until released, then store and record the pods' nodes of the table."""
        self.started.set()
        assert self.release.wait(10.0), "the test never released the publisher"
        super().publish(configmap)
        nodes = json.loads(configmap["data"][RANK_TABLE_KEY])["pods"]
        self.published.append(tuple(pod["node"] for pod in nodes))


def test_the_last_bind_answers_while_the_publish_is_still_in_flight():
    publisher = BlockingPublisher()
    service = service_with(publisher)
    pods = [gang_pod("train", i, 2) for i in range(2)]
    nodes = [filter_nodes(service.filter(pod))[0] for pod in pods]
    for pod, node in zip(pods, nodes):
        assert service.bind(pod, node) == {"Error": ""}  # returns although the publisher is blocked
    assert publisher.started.wait(5.0) and publisher.get("default", configmap_name("train")) is None
    assert not service.scheduler.rank_tables.wait_idle(0)
    publisher.release.set()
    assert service.scheduler.rank_tables.wait_idle(5.0)
    assert publisher.published == [tuple(nodes)]
    assert parse_rank_table(rank_table(service)["data"][RANK_TABLE_KEY]).pod_nodes == tuple(nodes)


def test_read_waits_for_the_publish_its_bind_queued():
    service = make_service()
    for g in range(5):
        [node] = filter_nodes(service.filter(gang_pod(f"job{g}", 0, 1)))
        assert service.bind(gang_pod(f"job{g}", 0, 1), node) == {"Error": ""}
        assert rank_table(service, f"job{g}")["metadata"]["name"] == configmap_name(f"job{g}")


@pytest.mark.parametrize("parallelism,pods,order,bound", [
    ("tp=8,dp=2", 2, "tp-cp-ep-dp-pp", None),
    ("tp=4,pp=2,dp=2", 2, "tp-cp-ep-pp-dp", {0}),
    ("tp=2,cp=2,pp=2", 1, "tp-cp-ep-dp-pp", set()),
], ids=["tp-dp-all-bound", "tp-pp-dp-one-bound", "one-pod-none-bound"])
def test_rank_table_configmap_text_parses_back_to_the_document(parallelism, pods, order, bound):
    par = Parallelism.parse(parallelism)
    gang = Gang("team", "llm", tuple(PodSlot(i, f"llm-{i}", par.world_size // pods) for i in range(pods)),
                par, rank_order=order)
    placement = place(gang, make_cluster(nodes=4), policy="first-fit")
    text = rank_table_configmap(placement, "node-a", bound_pods=bound)["data"][RANK_TABLE_KEY]
    assert json.loads(text) == rank_table_document(placement, "node-a", bound_pods=bound)
    assert parse_rank_table(text).pod_nodes == tuple(
        node if bound is None or i in bound else None for i, node in enumerate(placement.pod_nodes))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(document=st.dictionaries(st.text(), JSON_VALUES, max_size=6))
def test_encoded_rank_table_is_json_equal_to_the_standard_library_encoding(document):
    text = encode_rank_table(document)
    assert json.loads(text) == document == json.loads(json.dumps(document, indent=1))


def test_shutdown_waits_for_queued_publishes():
    publisher = BlockingPublisher()
    service = service_with(publisher)
    with TestClient(create_app(service.scheduler, build_scheduler(service.state, service.binder)[1])) as client:
        nodes = sorted(service.state.topology.node_by_name)
        pod = gang_pod("train", 0, 1)
        [node] = client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes}).json()["NodeNames"]
        client.post("/bind", json={"PodName": "train-0", "PodNamespace": "default",
                                   "PodUID": pod["metadata"]["uid"], "Node": node})
        assert publisher.started.wait(5.0)
        threading.Timer(0.2, publisher.release.set).start()
    assert publisher.published == [(node,)]


def test_the_table_is_owned_by_the_gangs_controller_so_it_is_deleted_with_the_job():
    service = make_service()
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid-1", "controller": True}
    pods = [gang_pod("train", i, 2) for i in range(2)]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [owner]
        service.state.upsert_pod(pod)
    for pod in pods:
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    refs = rank_table(service)["metadata"]["ownerReferences"]
    assert refs == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid-1"}]


def test_a_gang_of_bare_pods_hangs_its_table_on_pod_0():
    service = make_service()
    pods = [gang_pod("solo", i, 2) for i in range(2)]
    for pod in pods:
        service.state.upsert_pod(pod)
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
    [ref] = rank_table(service, "solo")["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Pod", "solo-0", pods[0]["metadata"]["uid"])
