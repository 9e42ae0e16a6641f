"""What the gang scheduler asks of the cluster besides binding: requeue a pod, evict a pod, record an Event.

`ClusterActions` is the extension point (`scheduler.kube.actions.KubeActions` talks to the API
server; `MemoryActions` records the calls for the embedded mode and tests).  Decisions are made
under the state lock; the calls themselves go through an `ActionDispatcher`, which runs them on a
small thread pool off the lock and off the event loop, and logs (never raises) failures -- every
action is retried by the decision that asked for it (requeues are repeated by the sweeper,
rollbacks re-evaluated) so a lost call costs time, not correctness.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol

log = logging.getLogger("meshfit.actions")

EVENT_NORMAL = "Normal"
EVENT_WARNING = "Warning"


@dataclass(frozen=True)
class PodRef:
    """Namespace, name and uid of one pod (uid may be empty when unknown)."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


class ClusterActions(Protocol):
    """Side effects on the cluster other than binding; each call raises on failure."""

    def requeue(self, pod: PodRef, node: str | None) -> None:
        """Make the scheduler try `pod` again now (and, with `node`, try that node first)."""
        ...

    def evict(self, pod: PodRef, reason: str) -> None:
        """Delete `pod` (its controller recreates it): how a bound gang member is rolled back."""
        ...

    def event(self, pod: PodRef, reason: str, message: str, kind: str = EVENT_NORMAL) -> None:
        """Record a Kubernetes Event on `pod` (what `kubectl describe pod` shows)."""
        ...


@dataclass(frozen=True)
class ActionRecord:
    """One call made to `MemoryActions`."""

    action: str
    pod: PodRef
    detail: str
    reason: str = ""


class MemoryActions:
    """Implements `ClusterActions` by recording the calls (embedded mode, tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[ActionRecord] = []

    def _record(self, record: ActionRecord) -> None:
        with self._lock:
            self.calls.append(record)

    def requeue(self, pod: PodRef, node: str | None) -> None:
        """Record the requeue."""
        self._record(ActionRecord("requeue", pod, node or ""))

    def evict(self, pod: PodRef, reason: str) -> None:
        """Record the eviction."""
        self._record(ActionRecord("evict", pod, reason))

    def event(self, pod: PodRef, reason: str, message: str, kind: str = EVENT_NORMAL) -> None:
        """Record the event."""
        self._record(ActionRecord("event", pod, message, reason))

    def of(self, action: str) -> list[ActionRecord]:
        """The recorded calls of one kind, in order."""
        with self._lock:
            return [c for c in self.calls if c.action == action]


class ActionDispatcher:
    """Runs `ClusterActions` calls on a thread pool; `synchronous=True` runs them inline (tests)."""

    def __init__(self, actions: ClusterActions, workers: int = 4, synchronous: bool = False) -> None:
        self.actions = actions
        self.synchronous = synchronous
        self._pool = None if synchronous else ThreadPoolExecutor(workers, thread_name_prefix="meshfit-action")
        self._pending = 0
        self._idle = threading.Condition()
        self.failures = 0

    def submit(self, what: str, call: Callable[[], None]) -> None:
        """Run `call` (a bound ClusterActions method with its arguments) soon; failures are logged."""
        if self._pool is None:
            self._run(what, call)
            return
        with self._idle:
            self._pending += 1
        self._pool.submit(self._run_counted, what, call)

    def _run(self, what: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - an API failure must not kill the worker; logged, retried later
            self.failures += 1
            log.warning("%s failed: %s", what, exc)

    def _run_counted(self, what: str, call: Callable[[], None]) -> None:
        try:
            self._run(what, call)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def requeue(self, pod: PodRef, node: str | None) -> None:
        """Submit a requeue of `pod`."""
        self.submit(f"requeue of pod {pod.key}", lambda: self.actions.requeue(pod, node))

    def evict(self, pod: PodRef, reason: str) -> None:
        """Submit an eviction of `pod`."""
        self.submit(f"eviction of pod {pod.key}", lambda: self.actions.evict(pod, reason))

    def event(self, pod: PodRef, reason: str, message: str, kind: str = EVENT_NORMAL) -> None:
        """Submit an Event on `pod`."""
        self.submit(f"event {reason} on pod {pod.key}", lambda: self.actions.event(pod, reason, message, kind))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every submitted call has run; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def shutdown(self) -> None:
        """Stop the pool after the calls already submitted."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
