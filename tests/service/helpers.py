"""Builders for the service tests: clusters, gang pods, a service wired to a fake clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from starlette.testclient import TestClient

from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from scheduler.service.ops.metrics import ServiceMetrics
from scheduler.service.verbs.scheduling import GangScheduler
from scheduler.cache.state import ClusterState

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "kube-scheduler-v1.26"
if not FIXTURES.exists():
    FIXTURES = Path("/work/shared/fixtures/kube-scheduler-v1.26")


def fixture(name: str) -> dict:
    """One captured kube-scheduler body."""
    return json.loads((FIXTURES / name).read_text())


def memory_direct_binding(state: ClusterState, fence_seconds: float = 2.0, workers: int = 16, nominator=None,
                          backlog_limit: int = 128, always_nominate: bool = False):
    """The direct binder's parts as Kubernetes mode wires them, with nominations applied to `state` in memory (or
    written by `nominator`)."""
    from scheduler.kube.node_fit import RoomFit
    from scheduler.service.binding.binder_memory import MemoryNominator
    from scheduler.service.binding.binding_wiring import DirectBinding

    return DirectBinding(RoomFit(state), nominator or MemoryNominator(state),
                         fence_seconds, workers, backlog_limit, always_nominate)


@dataclass
class FakeClock:
    """A settable clock for reservation TTLs."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


def make_node(name: str, gpus: int = 8, rack: str = "rack-0", block: str = "block-0") -> dict:
    """A Ready GPU node with Topograph leaf/spine labels."""
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                               "network.topology.nvidia.com/leaf": rack,
                                               "network.topology.nvidia.com/spine": block}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def make_nodes(racks: int = 2, nodes_per_rack: int = 4, gpus: int = 8) -> list[dict]:
    """`racks` x `nodes_per_rack` nodes named n-<rack>-<i>, two racks per block."""
    return [make_node(f"n-{r}-{i}", gpus, f"rack-{r}", f"block-{r // 2}")
            for r in range(racks) for i in range(nodes_per_rack)]


def make_pod(name: str, gpus: int = 8, namespace: str = "default", uid: str | None = None,
             labels: dict | None = None, annotations: dict | None = None, node: str | None = None,
             phase: str = "Pending") -> dict:
    """A pod requesting `gpus` GPUs (0 = a CPU pod)."""
    resources = {"requests": {"cpu": "1", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}}
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
                         "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec, "status": {"phase": phase}}


def gang_pod(gang: str, index: int, size: int, gpus: int = 8, parallelism: str | None = None,
             namespace: str = "default", **kwargs) -> dict:
    """Member `index` of a `meshfit.io/gang` gang of `size` pods."""
    annotations = {"meshfit.io/pod-index": str(index), "meshfit.io/gang-size": str(size)}
    if parallelism:
        annotations["meshfit.io/parallelism"] = parallelism
    return make_pod(f"{gang}-{index}", gpus, namespace, labels={"meshfit.io/gang": gang},
                    annotations=annotations, **kwargs)


@dataclass
class Service:
    """A state + scheduler + app + in-memory binder, with a fake clock."""

    state: ClusterState
    scheduler: GangScheduler
    binder: MemoryBinder
    client: TestClient
    clock: FakeClock = field(default_factory=FakeClock)
    metrics: ServiceMetrics | None = None

    def filter(self, pod: dict, nodes: list[str] | None = None, cache: bool = True) -> dict:
        """POST /filter in either nodeCacheCapable mode; returns the decoded reply."""
        nodes = nodes if nodes is not None else sorted(self.state.topology.node_by_name)
        body = ({"Pod": pod, "Nodes": None, "NodeNames": nodes} if cache else
                {"Pod": pod, "Nodes": {"metadata": {}, "items": [{"metadata": {"name": n}} for n in nodes]},
                 "NodeNames": None})
        response = self.client.post("/filter", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def bind(self, pod: dict, node: str) -> dict:
        """POST /bind for `pod`."""
        meta = pod["metadata"]
        response = self.client.post("/bind", json={"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                   "PodUID": meta["uid"], "Node": node})
        assert response.status_code == 200, response.text
        return response.json()


def make_service(nodes: list[dict] | None = None, policy: str = "first-fit", ttl: float = 120.0,
                 pods: list[dict] | None = None, rebuild: bool = False, **options) -> Service:
    """A service over `nodes` (default: 2 racks x 4 nodes x 8 GPUs); `rebuild` re-holds the missing members
    of partly bound gangs at the first list, as `meshfit serve` does; `options` go to `GangScheduler`."""
    clock = FakeClock()
    state = ClusterState(ttl_seconds=ttl, clock=clock)
    state.policy = policy if rebuild else None
    state.replace_all(nodes if nodes is not None else make_nodes(), pods or [], [])
    binder = MemoryBinder()
    scheduler, metrics = build_scheduler(state, binder, policy, **options)
    client = TestClient(create_app(scheduler, metrics))
    return Service(state, scheduler, binder, client, clock, metrics)


def filter_nodes(reply: dict) -> list[str]:
    """Node names a filter reply lets through, whichever mode it used."""
    if reply.get("NodeNames") is not None:
        return reply["NodeNames"]
    return [item["metadata"]["name"] for item in (reply.get("Nodes") or {}).get("items") or []]
