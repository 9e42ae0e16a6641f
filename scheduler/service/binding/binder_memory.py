"""`MemoryBinder`: the embedded mode's binder, keeping bindings and annotations in memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from scheduler.service.binding.binder import BindConflict


@dataclass(frozen=True)
class BindingRecord:
    """One binding as the API server would have stored it."""

    namespace: str
    name: str
    uid: str
    node: str
    annotations: dict[str, str]


class MemoryBinder:
    """Implements the `Binder` protocol in memory: a pod binds once, to one node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bindings: dict[tuple[str, str], BindingRecord] = {}

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        """Record the binding; BindConflict if the pod is already bound to another node."""
        with self._lock:
            old = self.bindings.get((namespace, name))
            if old is not None and (old.node != node or (uid and old.uid and old.uid != uid)):
                raise BindConflict(f"pod {namespace}/{name} is already bound to {old.node}")
            self.bindings[(namespace, name)] = BindingRecord(namespace, name, uid, node, dict(annotations))

    def snapshot(self) -> list[BindingRecord]:
        """Every binding, copied under the lock (safe while other threads bind)."""
        with self._lock:
            return list(self.bindings.values())

    def unbind(self, namespace: str, name: str) -> None:
        """Forget a binding (the pod was deleted)."""
        with self._lock:
            self.bindings.pop((namespace, name), None)


class MemoryNominator:
    """Implements the `Nominator` protocol in memory: the nomination lands in the state at once, as the watch would
    report it (embedded mode and tests); every call is recorded in `calls`."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.calls: list[tuple[str, str, str | None]] = []
        self.failures = 0
        """Fail this many of the next calls (tests of failed API calls)."""

    def nominate(self, namespace: str, name: str, uid: str, node: str | None) -> str | None:
        """Record the call and apply the nomination to the state's record of the pod (no resourceVersion: None)."""
        self.calls.append((namespace, name, node))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("apiserver unreachable")
        self.state.note_nomination(namespace, name, uid, node)
        return None
