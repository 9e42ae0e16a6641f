"""A shared, thread-safe record of what happened during a soak: per gang and cluster-wide, with run-relative times."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Iterable


class Timeline:
    """Recent events per gang (and cluster-wide ones: faults, fail-overs), stamped with seconds since the start."""

    def __init__(self, per_gang: int = 60, cluster_wide: int = 400) -> None:
        self.started = time.monotonic()
        self._per_gang = per_gang
        self._gangs: dict[str, deque] = {}
        self._cluster: deque = deque(maxlen=cluster_wide)
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the soak started."""
        return time.monotonic() - self.started

    def note(self, gang: str, text: str) -> None:
        """Record `text` in gang `gang`'s timeline."""
        stamp = self.now()
        with self._lock:
            self._gangs.setdefault(gang, deque(maxlen=self._per_gang)).append((stamp, text))

    def note_gangs(self, gangs: Iterable[str], text: str) -> None:
        """Record the same `text` for several gangs (a fault touching their nodes)."""
        for gang in set(gangs):
            self.note(gang, text)

    def cluster(self, text: str) -> None:
        """Record a cluster-wide event (a fault, a replica restart, a fail-over)."""
        stamp = self.now()
        with self._lock:
            self._cluster.append((stamp, text))

    def of_gang(self, gang: str, since: float | None = None) -> list[tuple[float, str]]:
        """The gang's events (newer than `since` seconds when given), oldest first."""
        with self._lock:
            events = list(self._gangs.get(gang, ()))
        return [e for e in events if since is None or e[0] >= since]

    def cluster_since(self, since: float) -> list[tuple[float, str]]:
        """Cluster-wide events at or after `since` seconds."""
        with self._lock:
            return [e for e in self._cluster if e[0] >= since]

    def merged(self, gang: str, window: float = 90.0) -> list[str]:
        """The gang's events plus cluster-wide ones in the last `window` seconds, as `t=12.3s text` lines."""
        now = self.now()
        events = self.of_gang(gang) + [(t, f"[cluster] {text}") for t, text in self.cluster_since(now - window)]
        events.sort(key=lambda e: e[0])
        return [f"t={t:7.1f}s {text}" for t, text in events]
