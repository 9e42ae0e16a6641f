"""Reading and steering the Indexed Jobs of `test_job_controller.py`: a Job's gang as the API server has it, polls
that fail with the cluster's state, node failures, ranks and rank tables."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Callable

from tests.realk8s.cluster_builders import COMPLETION_INDEX, gpu_overcommit, job_pods, pending_reasons
from tests.realk8s.scenario import meshfit_events

GPUS = 8
RANKS = "meshfit.io/ranks"
POD_INDEX = "meshfit.io/pod-index"
MASTER_ADDR = "meshfit.io/master-addr"
ELASTIC = "meshfit.io/elastic"
REQUEUED_AT = "meshfit.io/requeued-at"



# ----- reading a Job's gang -----------------------------------------------------------------------------------
class JobGang:
    """One Indexed Job's members as the API server has them, read at one poll."""

    def __init__(self, kube, job: str, size: int) -> None:
        self.job, self.size = job, size
        self.live, self.terminating, self.finished = job_pods(kube.core, kube.namespace, job)

    def member(self, index: int) -> Any | None:
        """The one live pod of `index` (None when there is none; AssertionError when there are several)."""
        pods = self.live.get(index, [])
        assert len(pods) <= 1, f"{self.job}: index {index} has {len(pods)} live pods: {[p.metadata.name for p in pods]}"
        return pods[0] if pods else None

    def members(self) -> dict[int, Any]:
        """index -> live pod for the indexes that have one."""
        found = {i: self.member(i) for i in range(self.size)}
        extra = set(self.live) - set(range(self.size))
        assert not extra, f"{self.job}: pods with completion indexes outside 0..{self.size - 1}: {extra}"
        return {i: p for i, p in found.items() if p is not None}

    def nodes(self) -> dict[int, str | None]:
        """index -> node of its live pod (None: pending, or no pod)."""
        members = self.members()
        return {i: members[i].spec.node_name if i in members else None for i in range(self.size)}

    def uids(self) -> dict[int, str]:
        """index -> uid of its live pod."""
        return {i: p.metadata.uid for i, p in self.members().items()}

    def complete(self) -> bool:
        """Every index has its one live pod and no pod of the Job is still being deleted."""
        return len(self.members()) == self.size and not self.terminating

    def whole(self) -> dict[int, str] | None:
        """index -> node when the gang is bound whole (every index one live bound pod, nothing terminating)."""
        nodes = self.nodes()
        return nodes if self.complete() and all(nodes.values()) else None  # type: ignore[return-value]

    def waiting_whole(self) -> bool:
        """Every index has its live pod, none is bound, nothing terminating: the gang waits whole."""
        return self.complete() and not any(self.nodes().values())

    def bound_prefix(self) -> int | None:
        """For an elastic gang: the number of bound members when they are exactly indexes 0..k-1, else None."""
        nodes = self.nodes()
        bound = sorted(i for i, node in nodes.items() if node)
        return len(bound) if bound == list(range(len(bound))) else None

    def describe(self) -> str:
        """One line per pod: name, index, node, terminating or not."""
        rows = [f"{p.metadata.name} index={i} node={p.spec.node_name} phase={p.status.phase}"
                for i, pods in sorted(self.live.items()) for p in pods]
        rows += [f"{p.metadata.name} index={p.metadata.annotations.get(COMPLETION_INDEX)} node={p.spec.node_name} "
                 f"TERMINATING phase={p.status.phase} finalizers={p.metadata.finalizers}" for p in self.terminating]
        rows += [f"{p.metadata.name} index={p.metadata.annotations.get(COMPLETION_INDEX)} node={p.spec.node_name} "
                 f"FINISHED phase={p.status.phase}" for p in self.finished]
        return f"Job {self.job}:\n  " + "\n  ".join(rows or ["(no pods)"])


def watch(kube, stack, what: str, check: Callable[[], Any], timeout: float = 90.0,
          describe: Callable[[], str] = lambda: "") -> tuple[Any, float]:
    """Poll `check()` (every 0.25 s) until it returns something truthy, asserting no GPU over-commit at every
    poll; returns (that value, time.monotonic() when it was seen).  On timeout: the state, the scheduler's
    reasons and the processes' log tails."""
    deadline = time.monotonic() + timeout
    while True:
        over = gpu_overcommit(kube.core)
        assert not over, (f"GPU over-commit (requested, allocatable) per node while waiting for {what}: {over}; "
                          f"pods there: {pods_on(kube, over)}")
        value = check()
        if value:
            return value, time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached after {timeout:.0f}s\n{describe()}\n"
                                 f"{pending_reasons(kube.core, kube.namespace)}\n{stack.tail_logs(40)}")
        time.sleep(0.25)


def pods_on(kube, nodes) -> list[str]:
    """`namespace/name (deleting)` of every pod bound to one of `nodes` (for over-commit messages)."""
    return [f"{p.metadata.namespace}/{p.metadata.name}{' (deleting)' if p.metadata.deletion_timestamp else ''}"
            for p in kube.core.list_pod_for_all_namespaces().items if p.spec.node_name in nodes]


def hold_steady(kube, stack, what: str, state: Callable[[], Any], quiet: float = 2.0) -> Any:
    """Assert `state()` stays truthy and unchanged for `quiet` seconds (no GPU over-commit either); returns it."""
    first = state()
    assert first, f"{what}: not so at the start of the quiet period"
    deadline = time.monotonic() + quiet
    while time.monotonic() < deadline:
        time.sleep(0.5)
        over = gpu_overcommit(kube.core)
        assert not over, f"GPU over-commit during {what}: {over}; pods there: {pods_on(kube, over)}"
        now = state()
        assert now == first, f"{what}: changed during the quiet period: {first} -> {now}\n{stack.tail_logs(30)}"
    return first


def ranks_by_index(kube, job: str, size: int) -> dict[int, str]:
    """index -> `meshfit.io/ranks` of its live pod, checking `meshfit.io/pod-index` names that same index."""
    members = JobGang(kube, job, size).members()
    ranks = {}
    for index, pod in members.items():
        annotations = pod.metadata.annotations or {}
        assert annotations.get(POD_INDEX) == str(index), (pod.metadata.name, annotations.get(POD_INDEX), index)
        ranks[index] = annotations[RANKS]
    return ranks


def expected_ranks(size: int, gpus: int = GPUS) -> dict[int, str]:
    """The rank block of every index (pod i holds ranks i*g .. i*g+g-1): they follow the index, not the node."""
    return {i: ",".join(str(r) for r in range(i * gpus, (i + 1) * gpus)) for i in range(size)}


def node_down(kube, node: str) -> None:
    """The node's (absent) kubelet stops reporting: Ready=False."""
    kube.core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                  "reason": "KubeletNotReady"}]}})


def node_up(kube, node: str) -> None:
    """The node reports Ready again."""
    kube.core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "True",
                                                                  "reason": "KubeletReady"}]}})


def reasons(kube) -> list[str]:
    """Reasons of the Events meshfit recorded in the test namespace."""
    return [reason for _, reason, _ in meshfit_events(kube.core, kube.namespace)]


def report(test: str, version: str, **seconds: float) -> None:
    """Print the measured times (pytest -s shows them; CI logs keep them)."""
    print(f"\n[job-controller] {test} {version}: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}s"
                                                           for k, v in seconds.items()))


def gang_row(stack, key: str) -> dict:
    """The `GET /gangs` row of one gang."""
    with urllib.request.urlopen(f"{stack.meshfit.url}/gangs", timeout=5) as response:
        return next(r for r in json.loads(response.read())["gangs"] if r["gang"] == key)


def rank_table(kube, job: str) -> dict | None:
    """The gang's published rank table document (None until published)."""
    try:
        configmap = kube.core.read_namespaced_config_map(f"meshfit-{job}-ranks", kube.namespace)
    except Exception:  # noqa: BLE001 - not published yet
        return None
    return json.loads(configmap.data["ranks.json"])
