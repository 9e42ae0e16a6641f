"""The soak's faults: members deleted (pending and bound), nodes NotReady, cordoned, deleted and re-added, GPU
allocatable lowered, meshfit replicas SIGKILLed or stopped (fail-over) and kube-scheduler killed; node faults heal
after a while.  Kinds are dealt from a shuffled deck so a short run sees every kind."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from tests.realk8s.cluster_builders import node_body
from tests.soak import kubeio
from tests.soak.stack import SoakStack
from tests.soak.timeline import Timeline
from tests.soak.workload import gang_of

FAULT_KINDS = (
    "member-deleted-pending", "member-deleted-bound", "node-not-ready", "node-cordoned", "node-deleted-readded",
    "gpu-allocatable-lowered", "meshfit-leader-killed", "meshfit-standby-killed", "meshfit-both-killed",
    "meshfit-leader-stopped", "kube-scheduler-killed",
)
PROCESS_KINDS = frozenset(k for k in FAULT_KINDS if k.startswith(("meshfit", "kube-scheduler")))
MEMBER_DELETE_GRACE = 30


@dataclass
class NodeFault:
    """A faulted node and when it heals."""

    kind: str
    heal_at: float
    body: dict  # the Node as created (labels, full status), to restore or re-add it


class FaultInjector:
    """Injects one fault per `inject()` call (next kind from the deck that applies now) and heals node faults."""

    def __init__(self, core: Any, namespace: str, stack: SoakStack, timeline: Timeline, seed: int,
                 node_bodies: dict[str, dict], heal_seconds: tuple[float, float], max_node_faults: int,
                 process_spacing: float, healthy: Callable[[], bool] = lambda: True) -> None:
        self.core, self.namespace, self.stack, self.timeline = core, namespace, stack, timeline
        self.rng = random.Random(seed)
        self.node_bodies = node_bodies
        self.heal_seconds, self.max_node_faults, self.process_spacing = heal_seconds, max_node_faults, process_spacing
        self.healthy = healthy
        self.counts: Counter = Counter()
        self.skipped: Counter = Counter()
        self.active: dict[str, NodeFault] = {}
        self._deck: list[str] = []
        self._last_process_fault = 0.0
        self._actions: dict[str, Callable[[list[dict]], str | None]] = {
            "member-deleted-pending": self._delete_pending, "member-deleted-bound": self._delete_bound,
            "node-not-ready": self._node_fault, "node-cordoned": self._node_fault,
            "node-deleted-readded": self._node_fault, "gpu-allocatable-lowered": self._node_fault,
            "meshfit-leader-killed": self._meshfit, "meshfit-standby-killed": self._meshfit,
            "meshfit-both-killed": self._meshfit, "meshfit-leader-stopped": self._meshfit,
            "kube-scheduler-killed": self._kube_scheduler}

    def inject(self) -> str | None:
        """Inject the first kind of the deck that applies now (else any other kind that does); returns its kind,
        None when no kind applied."""
        if not self._deck:
            self._deck = list(FAULT_KINDS)
            self.rng.shuffle(self._deck)
        pods = kubeio.list_pods(self.core, self.namespace)
        others = [k for k in FAULT_KINDS if k not in self._deck and k not in PROCESS_KINDS]  # a process kind
        # waits for its turn in the deck: a short run must see every kind, and processes need spacing
        self.rng.shuffle(others)
        for kind in [*self._deck, *others]:
            self._kind = kind
            what = self._actions[kind](pods)
            if what is None:
                self.skipped[kind] += 1
                continue
            if kind in self._deck:
                self._deck.remove(kind)
            self.counts[kind] += 1
            self.timeline.cluster(f"FAULT {kind}: {what}")
            return kind
        return None

    # ----- members --------------------------------------------------------------------------------------------
    def _members(self, pods: list[dict], bound: bool) -> list[dict]:
        return [p for p in pods if gang_of(p) and not kubeio.terminating(p) and bool(kubeio.node_name(p)) == bound]

    def _delete_pending(self, pods: list[dict]) -> str | None:
        candidates = self._members(pods, bound=False)
        if not candidates:
            return None
        pod = self.rng.choice(candidates)
        kubeio.delete_pod(self.core, self.namespace, pod["metadata"]["name"], None, pod["metadata"]["uid"])
        return self._note_member(pod, "pending member deleted")

    def _delete_bound(self, pods: list[dict]) -> str | None:
        candidates = self._members(pods, bound=True)
        if not candidates:
            return None
        zeros = [p for p in candidates if gang_of(p)[1] == 0]
        pod = self.rng.choice(zeros if zeros and self.rng.random() < 0.3 else candidates)
        kubeio.delete_pod(self.core, self.namespace, pod["metadata"]["name"], MEMBER_DELETE_GRACE,
                          pod["metadata"]["uid"])
        return self._note_member(pod, f"bound member deleted (grace {MEMBER_DELETE_GRACE}s)")

    def _note_member(self, pod: dict, what: str) -> str:
        name, node = pod["metadata"]["name"], kubeio.node_name(pod)
        self.timeline.note(gang_of(pod)[0], f"FAULT {what}: {name}" + (f" on {node}" if node else ""))
        return f"{what}: {name}" + (f" on {node}" if node else "")

    # ----- nodes ----------------------------------------------------------------------------------------------
    def _node_fault(self, pods: list[dict]) -> str | None:
        if len(self.active) >= self.max_node_faults:
            return None
        healthy = [n for n in self.node_bodies if n not in self.active]
        busy = sorted({kubeio.node_name(p) for p in pods if gang_of(p) and kubeio.node_name(p)} & set(healthy))
        if not healthy:
            return None
        node = self.rng.choice(busy if busy and self.rng.random() < 0.75 else healthy)
        kind, body = self._kind, self.node_bodies[node]
        detail = ""
        if kind == "node-not-ready":
            self.core.patch_node_status(node, {"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "soak fault"}]}})
        elif kind == "node-cordoned":
            self.core.patch_node(node, {"spec": {"unschedulable": True}})
        elif kind == "node-deleted-readded":
            self.core.delete_node(node)
        else:
            gpus = kubeio.node_gpus(body, "capacity")
            lowered = max(0, gpus - self.rng.randint(1, 4))
            self.core.patch_node_status(node, {"status": {"allocatable": {kubeio.GPU: str(lowered)}}})
            detail = f" (allocatable {gpus} -> {lowered} GPUs)"
        self.active[node] = NodeFault(kind, time.monotonic() + self.rng.uniform(*self.heal_seconds), body)
        gangs = {gang_of(p)[0] for p in pods if gang_of(p) and kubeio.node_name(p) == node}
        self.timeline.note_gangs(gangs, f"FAULT {kind} on {node}{detail} (gang members there)")
        return f"{node}{detail}; gangs bound there: {', '.join(sorted(gangs)) or 'none'}"

    def heal(self, everything: bool = False) -> None:
        """Heal node faults that are due (all of them with `everything`)."""
        now = time.monotonic()
        for node, fault in list(self.active.items()):
            if everything or fault.heal_at <= now:
                try:
                    self._heal(node, fault)
                    del self.active[node]
                    self.timeline.cluster(f"healed {fault.kind} on {node}")
                except Exception as exc:  # noqa: BLE001 - retried on the next call
                    self.timeline.cluster(f"could not heal {fault.kind} on {node} yet: {str(exc)[:120]}")

    def _heal(self, node: str, fault: NodeFault) -> None:
        status = fault.body["status"]
        if fault.kind == "node-not-ready":
            self.core.patch_node_status(node, {"status": {"conditions": status["conditions"]}})
        elif fault.kind == "node-cordoned":
            self.core.patch_node(node, {"spec": {"unschedulable": False}})
        elif fault.kind == "gpu-allocatable-lowered":
            self.core.patch_node_status(node, {"status": {"allocatable": status["allocatable"]}})
        else:
            meta = fault.body["metadata"]
            created = self.core.create_node(node_body(node, kubeio.node_gpus(fault.body, "capacity"),
                                                      status["capacity"]["cpu"], status["capacity"]["memory"],
                                                      meta["labels"]))
            if not (created.status and created.status.allocatable):
                self.core.patch_node_status(node, {"status": status})

    # ----- processes ------------------------------------------------------------------------------------------
    def _process_ready(self) -> bool:
        return (time.monotonic() - self._last_process_fault >= self.process_spacing and self.healthy()
                and self.stack.settled())

    def _meshfit(self, _pods: list[dict]) -> str | None:
        if not self._process_ready():
            return None
        leader, standby = self.stack.leader(), self.stack.standby()
        kind = self._kind
        targets = {"meshfit-leader-killed": [leader], "meshfit-standby-killed": [standby],
                   "meshfit-both-killed": [leader, standby], "meshfit-leader-stopped": [leader]}[kind]
        if any(t is None for t in targets):
            return None
        names = ", ".join(f"{t.name} ({t.identity}{', leader' if t is leader else ''})" for t in targets)
        if leader in targets:  # a fail-over window starts (a standby's death is no fail-over)
            self.stack.disrupted(f"{kind}: {names}")
        for target in targets:
            target.terminate() if kind == "meshfit-leader-stopped" else target.kill()
        self._last_process_fault = time.monotonic()
        return names

    def _kube_scheduler(self, _pods: list[dict]) -> str | None:
        if not self._process_ready():
            return None
        self.stack.kill_scheduler()
        self._last_process_fault = time.monotonic()
        return "SIGKILL; restarted by the supervisor after 1-3 s"
