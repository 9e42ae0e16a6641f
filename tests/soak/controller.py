"""The soak's stand-ins for what runs beside the scheduler: the PyTorchJob controller (creates members, recreates a
deleted one under its name, deletes a finished job's pods), the kubelet (finishes graceful deletes of bound pods) and
the pod garbage collector (deletes pods bound to a Node that is gone)."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.soak import kubeio
from tests.soak.timeline import Timeline
from tests.soak.workload import GangSpec, PlainSpec, gang_of

JOB_DONE_GRACE = 30
"""Grace period of the controller's deletes (a finished job, a cancelled one): bound pods go Terminating."""


@dataclass
class ControllerStats:
    """What the stand-ins did."""

    members_created: int = 0
    members_recreated: int = 0
    deletes_finished: int = 0
    pods_collected: int = 0
    gangs_whole: int = 0
    gangs_completed: int = 0
    gangs_cancelled: int = 0
    plain_created: int = 0
    plain_completed: int = 0
    plain_cancelled: int = 0
    api_errors: int = 0


@dataclass
class GangRun:
    """One gang's life as its controller sees it."""

    spec: GangSpec
    created: float
    due: dict[int, float] = field(default_factory=dict)  # index -> when to (re)create it
    made: set[int] = field(default_factory=set)  # indexes created at least once
    whole_seconds: float = 0.0
    ever_whole: bool = False
    waiting_since: float = 0.0
    finished: str = ""  # "", "completed" or "cancelled"


@dataclass
class PlainRun:
    """One plain pod's life."""

    spec: PlainSpec
    created: float
    bound_at: float | None = None
    finished: bool = False


class JobController:
    """A thread polling the namespace's pods every `interval` s and acting as controller, kubelet and pod GC."""

    def __init__(self, kubeconfig: str, namespace: str, timeline: Timeline, seed: int,
                 cancel_after: float = 300.0, gc_after: float = 10.0, interval: float = 0.5) -> None:
        self.kubeconfig, self.namespace, self.timeline = kubeconfig, namespace, timeline
        self.rng = random.Random(seed)
        self.cancel_after, self.gc_after, self.interval = cancel_after, gc_after, interval
        self.stats = ControllerStats()
        self.gangs: dict[str, GangRun] = {}
        self.plains: dict[str, PlainRun] = {}
        self._finishing: dict[str, tuple[str, float]] = {}  # pod -> (uid, when to finish its delete)
        self._orphans: dict[str, tuple[str, float]] = {}  # pod bound to a missing node -> (uid, when to GC it)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-job-controller", daemon=True)
        self._core: Any = None
        self._nodes: set[str] = set()
        self._nodes_read = 0.0

    def submit_gang(self, spec: GangSpec) -> None:
        """A new job: its members are created now (late ones a few seconds later)."""
        now = time.monotonic()
        run = GangRun(spec, now, waiting_since=now)
        for index in range(spec.pods):
            run.due[index] = now + (self.rng.uniform(2.0, 8.0) if index in spec.late else 0.0)
        with self._lock:
            self.gangs[spec.name] = run
        level = f", {spec.level[0]}-level {spec.level[1]}" if spec.level else ""
        elastic = f", elastic {spec.elastic_min}..{spec.pods}" if spec.elastic_min else ""
        self.timeline.note(spec.name, f"arrived: {spec.style} {spec.pods} pods x {spec.gpus} GPUs, {spec.priority}, "
                                      f"{spec.parallelism}{level}{elastic}, runs {spec.run_seconds:.0f}s whole")

    def submit_plain(self, spec: PlainSpec) -> None:
        """A new plain pod, created now."""
        if kubeio.create_pod(self._core_api(), self.namespace, spec.pod_body(self.namespace)):
            with self._lock:
                self.plains[spec.name] = PlainRun(spec, time.monotonic())
            self.stats.plain_created += 1

    def active_gangs(self) -> dict[str, GangSpec]:
        """Gangs whose job is still running (not completed or cancelled)."""
        with self._lock:
            return {name: run.spec for name, run in self.gangs.items() if not run.finished}

    def start(self) -> "JobController":
        """Start the polling thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._thread.join(10)

    def _core_api(self) -> Any:
        if self._core is None:
            self._core = kubeio.core(kubeio.new_client(self.kubeconfig))
        return self._core

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            try:
                self.tick(now, now - last)
            except Exception as exc:  # noqa: BLE001 - an API hiccup: count it, poll again
                self.stats.api_errors += 1
                self.timeline.cluster(f"job controller: API error {type(exc).__name__}: {str(exc)[:160]}")
            last = now

    def tick(self, now: float, elapsed: float) -> None:
        """One pass: kubelet and pod-GC duties, then every job's members."""
        core = self._core_api()
        pods = kubeio.list_pods(core, self.namespace)
        if now - self._nodes_read > 2.0:
            self._nodes = {n["metadata"]["name"] for n in kubeio.list_nodes(core)}
            self._nodes_read = now
        self._kubelet(core, pods, now)
        members: dict[str, dict[int, dict]] = {}
        by_name = {}
        for pod in pods:
            by_name[pod["metadata"]["name"]] = pod
            found = gang_of(pod)
            if found:
                members.setdefault(found[0], {})[found[1]] = pod
        with self._lock:
            gangs, plains = list(self.gangs.values()), list(self.plains.values())
        for run in gangs:
            self._gang(core, run, members.get(run.spec.name, {}), now, elapsed)
        for plain in plains:
            self._plain(core, plain, by_name.get(plain.spec.name), now)

    def _kubelet(self, core: Any, pods: list[dict], now: float) -> None:
        seen = set()
        for pod in pods:
            meta, node = pod["metadata"], kubeio.node_name(pod)
            name, uid = meta["name"], meta["uid"]
            if node and kubeio.terminating(pod):
                seen.add(name)
                if name not in self._finishing:
                    self._finishing[name] = (uid, now + self.rng.uniform(0.5, 1.0))
            if node and node not in self._nodes and now - self._nodes_read < 2.5:
                if name not in self._orphans:
                    self._orphans[name] = (uid, now + self.gc_after)
                elif self._orphans[name][1] <= now and kubeio.delete_pod(core, self.namespace, name, 0, uid):
                    self.stats.pods_collected += 1
                    self._note_pod(pod, f"pod GC deleted {name}: bound to {node}, a Node that no longer exists")
            elif name in self._orphans and (not node or node in self._nodes):
                del self._orphans[name]
        for name, (uid, when) in list(self._finishing.items()):
            if name not in seen:
                del self._finishing[name]
            elif when <= now:
                del self._finishing[name]
                if kubeio.delete_pod(core, self.namespace, name, 0, uid):
                    self.stats.deletes_finished += 1
                    self._note_name(name, f"kubelet finished the graceful delete of {name}")

    def _note_pod(self, pod: dict, text: str) -> None:
        found = gang_of(pod)
        self.timeline.note(found[0], text) if found else self.timeline.cluster(text)

    def _note_name(self, name: str, text: str) -> None:
        gang = name.rsplit("-worker-", 1)[0] if "-worker-" in name else name.rsplit("-", 1)[0]
        if gang in self.gangs:
            self.timeline.note(gang, text)

    def _gang(self, core: Any, run: GangRun, present: dict[int, dict], now: float, elapsed: float) -> None:
        spec = run.spec
        if run.finished:
            if not present:
                with self._lock:
                    self.gangs.pop(spec.name, None)
            return
        bound = {i for i, pod in present.items() if kubeio.node_name(pod) and not kubeio.terminating(pod)}
        whole = bound == set(range(len(bound))) and spec.min_pods <= len(bound) <= spec.pods
        if whole:
            run.whole_seconds += elapsed
            run.waiting_since = now
            if not run.ever_whole:
                run.ever_whole = True
                self.stats.gangs_whole += 1
                self.timeline.note(spec.name, f"job controller: gang whole ({len(bound)} pods bound)")
            if run.whole_seconds >= spec.run_seconds:
                return self._finish(core, run, present, "completed")
        elif now - run.waiting_since > self.cancel_after:
            return self._finish(core, run, present, "cancelled")
        self._create_missing(core, run, present, now)

    def _create_missing(self, core: Any, run: GangRun, present: dict[int, dict], now: float) -> None:
        spec = run.spec
        for index in range(spec.pods):
            if index in present:
                run.due.pop(index, None)
                continue
            when = run.due.get(index)
            if when is None:  # deleted (evicted, failed, GC'd): recreated under its name after a short delay
                run.due[index] = now + self.rng.uniform(0.5, 3.0)
            elif when <= now:
                if kubeio.create_pod(core, self.namespace, spec.pod_body(self.namespace, index)):
                    again = index in run.made
                    run.made.add(index)
                    run.due.pop(index, None)
                    if again:
                        self.stats.members_recreated += 1
                        self.timeline.note(spec.name, f"job controller recreated {spec.pod_name(index)}")
                    else:
                        self.stats.members_created += 1
                else:
                    run.due[index] = now + 0.5  # its predecessor is still there: try again shortly

    def _finish(self, core: Any, run: GangRun, present: dict[int, dict], how: str) -> None:
        run.finished = how
        if how == "completed":
            self.stats.gangs_completed += 1
        else:
            self.stats.gangs_cancelled += 1
        self.timeline.note(run.spec.name, f"job {how}: its {len(present)} pods deleted (grace {JOB_DONE_GRACE}s)")
        for pod in present.values():
            if not kubeio.terminating(pod):
                kubeio.delete_pod(core, self.namespace, pod["metadata"]["name"], JOB_DONE_GRACE,
                                  pod["metadata"]["uid"])

    def _plain(self, core: Any, run: PlainRun, pod: dict | None, now: float) -> None:
        name = run.spec.name
        if pod is None:  # finished, or evicted by someone else: forgotten
            with self._lock:
                self.plains.pop(name, None)
            return
        if run.finished or kubeio.terminating(pod):
            return
        if kubeio.node_name(pod) and run.bound_at is None:
            run.bound_at = now
        done = run.bound_at is not None and now - run.bound_at >= run.spec.run_seconds
        if done or (run.bound_at is None and now - run.created > self.cancel_after):
            run.finished = True
            if done:
                self.stats.plain_completed += 1
            else:
                self.stats.plain_cancelled += 1
            kubeio.delete_pod(core, self.namespace, name, JOB_DONE_GRACE, pod["metadata"]["uid"])
