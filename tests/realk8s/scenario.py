"""Scenario helpers for the gang-guarantee tests on the real control plane: bursts, settling, invariants.

"Settled" means what the issue means: the set of bound pods has not changed for a quiet period.  At
every poll the invariants are checked (no node over-committed); at a settled point, additionally,
no gang is partly bound.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from tests.realk8s.cluster_builders import (
    assert_no_overcommit, gang_pod_body, gang_status, pending_reasons,
)


@dataclass(frozen=True)
class GangShape:
    """One gang of a burst: name, pods, GPUs per pod."""

    name: str
    pods: int
    gpus: int

    @property
    def gpus_total(self) -> int:
        """GPUs the whole gang needs."""
        return self.pods * self.gpus


def burst_shapes(seed: int, capacity_gpus: int, demand: float = 1.5, max_pods: int = 16) -> list[GangShape]:
    """Random gang shapes (mostly whole-node 8-GPU pods, some 4-GPU pods) totalling ~`demand` x capacity."""
    rng = random.Random(seed)
    shapes, total = [], 0
    while total < demand * capacity_gpus:
        gpus = rng.choice([8, 8, 8, 4])
        pods = rng.choice([p for p in (2, 2, 4, 4, 8, 16) if p <= max_pods])
        shapes.append(GangShape(f"g{len(shapes):02d}", pods, gpus))
        total += pods * gpus
    return shapes


def create_burst(core: Any, namespace: str, shapes: list[GangShape], seed: int,
                 extra: list[dict] = (), workers: int = 8) -> int:
    """Create every member of every gang (and `extra` pod bodies) at once, in shuffled order; returns pods."""
    bodies = [gang_pod_body(namespace, s.name, i, s.pods, s.gpus, f"tp={s.gpus},dp={s.pods}")
              for s in shapes for i in range(s.pods)] + list(extra)
    random.Random(seed).shuffle(bodies)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
    return len(bodies)


def bound_pod_names(core: Any, namespace: str) -> frozenset[str]:
    """Names of the pods bound to a node in `namespace`."""
    return frozenset(p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.spec.node_name)


def wait_settled(kube: Any, stack: Any, timeout: float = 90.0, quiet: float = 4.0,
                 until: Callable[[dict], bool] | None = None) -> dict[str, tuple[int, int]]:
    """Poll until the bound pods are unchanged for `quiet` s (and `until(status)` holds); check no
    over-commit at every poll and no partly bound gang at the settled point; returns the gang status."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while True:
        assert_no_overcommit(kube.core)
        bound = bound_pod_names(kube.core, kube.namespace)
        now = time.monotonic()
        if bound != last:
            last, since = bound, now
        status = gang_status(kube.core, kube.namespace)
        partial = {n: s for n, s in status.items() if 0 < s[0] < s[1]}
        if now - since >= quiet and not partial and (until is None or until(status)):
            return status
        if now > deadline:
            raise AssertionError(f"not settled after {timeout:.0f}s: partly bound {partial}; status {status}\n"
                                 f"{pending_reasons(kube.core, kube.namespace)}\n{stack.tail_logs(30)}")
        time.sleep(0.5)


def whole(status: dict[str, tuple[int, int]]) -> set[str]:
    """Gangs fully bound."""
    return {name for name, (bound, total) in status.items() if bound == total}


def delete_gang(core: Any, namespace: str, name: str) -> None:
    """Delete every pod of a gang at once (the job finished), grace 0 (no kubelet would confirm)."""
    core.delete_collection_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={name}",
                                          grace_period_seconds=0)


def meshfit_events(core: Any, namespace: str) -> list[tuple[str, str, str]]:
    """(pod, reason, message) of the Events meshfit recorded in `namespace`."""
    events = core.list_namespaced_event(namespace).items
    return [(e.involved_object.name, e.reason, e.message) for e in events
            if e.source is not None and e.source.component == "meshfit"]


class KubeletStandIn:
    """Plays the one kubelet duty the tests need: a bound pod being deleted gracefully is confirmed gone.

    With no kubelet, a pod bound to a node and deleted with a grace period stays Terminating forever;
    a real kubelet stops its containers and finishes the deletion.  This thread finishes it (grace 0)
    a moment later, as the kubelet would.
    """

    def __init__(self, core: Any, namespace: str, interval: float = 0.5) -> None:
        self.core, self.namespace, self.interval = core, namespace, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-stand-in", daemon=True)

    def start(self) -> "KubeletStandIn":
        """Start confirming deletions."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for pod in self.core.list_namespaced_pod(self.namespace).items:
                    if pod.metadata.deletion_timestamp is not None and pod.spec.node_name:
                        self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
            except Exception:  # noqa: BLE001 - the API server may be going away at teardown; try again
                continue

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._thread.join(5)
