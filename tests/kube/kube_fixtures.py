"""Shared fixtures for the Kubernetes adapter tests: the API double, a real ApiClient, a recording state."""

from __future__ import annotations

import time
from typing import Callable

import kubernetes
import pytest

from plugins.gangs.base import split_kind
from tests.k8s_double import ApiServerDouble


def make_node(name: str, gpus: int = 8, rack: str = "rack-0") -> dict:
    """A Ready GPU node with a Topograph leaf label."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                   "network.topology.nvidia.com/leaf": rack,
                                                   "network.topology.nvidia.com/spine": "spine-0"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


class RecordingState:
    """A fake ClusterState with the watch-loop interface, recording what it was told."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.replace_calls = 0

    def replace_all(self, nodes: list[dict], pods: list[dict], objects: list[dict]) -> None:
        """Start over from a full list."""
        self.replace_calls += 1
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        self.objects = {}
        for obj in objects:
            self.upsert_object(obj)

    def upsert_node(self, node: dict) -> None:
        """Add or update a node."""
        self.nodes[node["metadata"]["name"]] = node

    def delete_node(self, name: str) -> None:
        """Forget a node."""
        self.nodes.pop(name, None)

    def upsert_pod(self, pod: dict) -> None:
        """Add or update a pod."""
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    def delete_pod(self, namespace: str, name: str) -> None:
        """Forget a pod."""
        self.pods.pop((namespace, name), None)

    def upsert_object(self, obj: dict) -> None:
        """Add or update a gang object."""
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace") or "default", meta["name"])] = obj

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        """Forget a gang object (`kind` may be group-qualified, as the cache sends it)."""
        self.objects.pop((split_kind(kind)[1], namespace, name), None)

    def get_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """The recorded object or None (`kind` plain or group-qualified)."""
        return self.objects.get((split_kind(kind)[1], namespace, name))


def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `predicate` until true or `timeout` passes (convergence of background threads, not speed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def double():
    """A running API server double."""
    server = ApiServerDouble().start()
    yield server
    server.stop()


@pytest.fixture
def api_client(double):
    """The real `kubernetes` ApiClient pointed at the double."""
    config = kubernetes.client.Configuration()
    config.host = double.url
    client = kubernetes.client.ApiClient(config)
    yield client
    client.close()
