"""The soak's jobs: seeded random gangs (PyTorchJob-style and `meshfit.io/gang`-style) and plain pods, their pod
bodies, and how a pod says which gang, index and size it belongs to (read back by the invariant checker)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.realk8s.cluster_builders import JOB_NAME, REPLICA_INDEX, SCHEDULER_NAME, gang_pod_body

LABEL_GANG = "meshfit.io/gang"
POD_INDEX = "meshfit.io/pod-index"
GANG_SIZE = "meshfit.io/gang-size"
PARALLELISM = "meshfit.io/parallelism"
ELASTIC = "meshfit.io/elastic"
SOAK_SIZE = "soak.meshfit.test/gang-size"
"""The gang's declared pods, as the job object would say (meshfit rewrites `meshfit.io/parallelism` at bind)."""
SOAK_MIN = "soak.meshfit.test/min-pods"
"""The fewest pods an elastic gang may run with (MIN dp x pods per replica); absent for a fixed-size gang."""
SOAK_PLAIN = "soak.meshfit.test/plain"
PRIORITIES = (("soak-low", 100), ("soak-mid", 200), ("soak-high", 1000))
POD_SHAPES = (1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 16, 32)
GPU_SHAPES = (8, 8, 8, 4, 4, 2, 1)


@dataclass
class GangSpec:
    """One training job: its pods, GPUs per pod, priority, constraint, elastic range and how long it runs whole."""

    name: str
    style: str  # "pytorchjob" | "meshfit-label"
    pods: int
    gpus: int
    priority: str
    parallelism: str
    run_seconds: float
    elastic_min: int | None = None
    level: tuple[str, str] | None = None  # ("required" | "preferred", level name)
    late: tuple[int, ...] = ()  # pod indexes created a few seconds after the others

    @property
    def min_pods(self) -> int:
        """Fewest bound pods that make the gang whole."""
        return self.elastic_min or self.pods

    def pod_name(self, index: int) -> str:
        """The name the job controller gives member `index` (stable: a recreated member keeps it)."""
        return f"{self.name}-worker-{index}" if self.style == "pytorchjob" else f"{self.name}-{index}"

    def pod_body(self, namespace: str, index: int) -> dict:
        """Member `index` as its controller creates it."""
        if self.style == "pytorchjob":
            body = gang_pod_body(namespace, self.name, index, self.pods, self.gpus, self.parallelism, self.priority)
            body["spec"]["containers"][0]["resources"]["requests"].update(member_cpu_memory(self.gpus))
        else:
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": self.pod_name(index), "namespace": namespace,
                                 "labels": {LABEL_GANG: self.name},
                                 "annotations": {POD_INDEX: str(index), GANG_SIZE: str(self.pods),
                                                 PARALLELISM: self.parallelism}},
                    "spec": {"schedulerName": SCHEDULER_NAME, "priorityClassName": self.priority,
                             "containers": [_container(self.gpus)]}}
        notes = body["metadata"]["annotations"]
        notes[SOAK_SIZE] = str(self.pods)
        if self.elastic_min:
            notes[ELASTIC] = f"dp={self.elastic_min}..{self.pods}"
            notes[SOAK_MIN] = str(self.elastic_min)
        if self.level:
            notes[f"meshfit.io/{self.level[0]}-level"] = self.level[1]
        return body


NODE_CPU, NODE_MEMORY = "16", "64Gi"
"""What each soak node has besides its GPUs: CPU and memory are contended, not only GPUs."""


def member_cpu_memory(gpus: int) -> dict[str, str]:
    """A gang member's CPU and memory: 1.25 CPUs and 5 GiB per GPU (an 8-GPU member: 10 CPUs, 40 GiB of 16 / 64)."""
    return {"cpu": f"{gpus * 1250}m", "memory": f"{gpus * 5}Gi"}


@dataclass
class PlainSpec:
    """A pod outside any gang: 1-2 GPUs through meshfit's profile (an inference replica), or CPU-only through the
    default scheduler, which kube-scheduler places on its own (a data loader, a notebook: 2-8 CPUs, 8-30 GiB)."""

    name: str
    gpus: int
    priority: str
    run_seconds: float
    cpu: str = "100m"
    memory: str = "0"

    def pod_body(self, namespace: str) -> dict:
        """The pod."""
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": namespace, "annotations": {SOAK_PLAIN: "1"}},
                "spec": {"schedulerName": SCHEDULER_NAME if self.gpus else "default-scheduler",
                         "priorityClassName": self.priority, "containers": [self._container()]}}

    def _container(self) -> dict:
        requests: dict = ({"nvidia.com/gpu": str(self.gpus), **member_cpu_memory(self.gpus)} if self.gpus
                          else {"cpu": self.cpu, "memory": self.memory})
        limits: dict = {"nvidia.com/gpu": str(self.gpus)} if self.gpus else {}
        return {"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "resources": {"requests": requests, "limits": limits}}


def _container(gpus: int) -> dict:
    return {"name": "main", "image": "busybox", "command": ["sleep", "3600"],
            "resources": {"requests": {"nvidia.com/gpu": str(gpus), **member_cpu_memory(gpus)},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}


class WorkloadGenerator:
    """Seeded stream of gang and plain-pod specs sized for a cluster of `nodes` x `gpus_per_node` in leaves of
    `leaf_nodes`."""

    def __init__(self, seed: int, nodes: int, gpus_per_node: int, leaf_nodes: int,
                 run_seconds: tuple[float, float], max_gang_fraction: float = 0.5) -> None:
        self.rng = random.Random(seed)
        self.capacity = nodes * gpus_per_node
        self.leaf_gpus = leaf_nodes * gpus_per_node
        self.gpus_per_node = gpus_per_node
        self.run_seconds = run_seconds
        self.max_gang_gpus = int(self.capacity * max_gang_fraction)
        self.count = 0

    def _priority(self) -> str:
        return self.rng.choices([p for p, _ in PRIORITIES], weights=[55, 30, 15])[0]

    def gang(self) -> GangSpec:
        """The next gang (1-32 pods, never more than `max_gang_fraction` of the cluster's GPUs)."""
        rng = self.rng
        self.count += 1
        gpus = rng.choice([g for g in GPU_SHAPES if g <= self.gpus_per_node])
        pods = rng.choice([p for p in POD_SHAPES if p * gpus <= self.max_gang_gpus])
        style = rng.choice(("pytorchjob", "pytorchjob", "meshfit-label"))
        name = f"{'pj' if style == 'pytorchjob' else 'mg'}{self.count:05d}"
        parallelism = f"tp={gpus},dp={pods}"
        elastic_min = None
        if pods >= 2 and rng.random() < 0.2:
            elastic_min = rng.randint(max(1, pods // 4), pods - 1)
        elif pods >= 2 and pods % 2 == 0 and rng.random() < 0.15:
            parallelism = f"tp={gpus},pp=2,dp={pods // 2}"
        level = None
        draw = rng.random()
        if draw < 0.15 and pods * gpus <= self.leaf_gpus // 2:
            level = ("required", "leaf")
        elif draw < 0.35:
            level = ("preferred", rng.choice(("leaf", "spine")))
        late = tuple(i for i in range(pods) if pods > 1 and rng.random() < 0.1)
        return GangSpec(name=name, style=style, pods=pods, gpus=gpus, priority=self._priority(),
                        parallelism=parallelism, run_seconds=rng.uniform(*self.run_seconds),
                        elastic_min=elastic_min, level=level, late=late)

    def plain(self, gpus: int | None = None) -> PlainSpec:
        """The next plain pod (`gpus`: that many, else drawn; CPU-only pods draw their CPUs and memory)."""
        self.count += 1
        gpus = self.rng.choice((0, 1, 1, 2)) if gpus is None else gpus
        cpu, memory = self.rng.choice((("2", "8Gi"), ("4", "16Gi"), ("8", "30Gi")))
        return PlainSpec(name=f"pl{self.count:05d}", gpus=gpus, priority=self._priority(),
                         run_seconds=self.rng.uniform(*self.run_seconds), cpu=cpu, memory=memory)


def gang_of(pod: dict) -> tuple[str, int] | None:
    """(gang name, pod index) of a soak gang member, None for any other pod."""
    meta = pod["metadata"]
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    if labels.get(JOB_NAME):
        return labels[JOB_NAME], int(labels[REPLICA_INDEX])
    if labels.get(LABEL_GANG):
        return labels[LABEL_GANG], int(notes[POD_INDEX])
    return None


def declared_size(pod: dict) -> tuple[int, int]:
    """(pods, fewest pods that make it whole) the member's job declares."""
    notes = pod["metadata"].get("annotations") or {}
    size = int(notes[SOAK_SIZE])
    return size, int(notes.get(SOAK_MIN, size))


def is_elastic(pod: dict) -> bool:
    """True for a member of an elastic gang."""
    return SOAK_MIN in (pod["metadata"].get("annotations") or {})
