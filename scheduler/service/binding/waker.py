"""`Waker`: calls back with a key at (or soon after) a due time, from one background thread."""

from __future__ import annotations

import heapq
import threading
import time
from typing import Callable


class Waker:
    """One daemon thread that calls `callback(key)` once each key's earliest due time (monotonic) has come."""

    def __init__(self, callback: Callable[[str], None], name: str = "meshfit-waker") -> None:
        self.callback = callback
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def at(self, key: str, delay: float) -> None:
        """Call back with `key` in `delay` seconds (an earlier due time already set for it wins)."""
        due = time.monotonic() + max(delay, 0.0)
        with self._cv:
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    return
                due, key = heapq.heappop(self._heap)
                if self._due.get(key) != due:
                    continue  # superseded by an earlier due time, already called
                del self._due[key]
            try:
                self.callback(key)
            except Exception:  # noqa: BLE001 - a failing callback must not stop later wake-ups
                import logging

                logging.getLogger("meshfit.bind").exception("wake-up of %s failed", key)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (pending wake-ups are dropped) and wait for a call back in progress to return."""
        with self._cv:
            self._stopped = True
            self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """True until the thread has ended."""
        return self._thread.is_alive()
