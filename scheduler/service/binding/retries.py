"""`BindRetries`: backoff for members whose Binding or nomination write failed, and the members left to
kube-scheduler with the reason why."""

from __future__ import annotations

from typing import Any, Callable

RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 15.0


class BindRetries:
    """When a member may be tried again, and why a member is left to kube-scheduler (call under the state lock)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.retry_at: dict[str, tuple[float, int, tuple]] = {}
        """Pod uid -> (not before, failures so far, pod fingerprint at the last failure)."""
        self.refused: dict[str, str] = {}
        """Pod uid -> why it is left to kube-scheduler (logged once per reason)."""

    def back_off(self, record: Any, conflict: bool) -> float:
        """Note one more failure of `record`'s write; returns the seconds until it may be tried again (a conflict waits
        for the pod to change instead)."""
        _, failures, _ = self.retry_at.get(record.uid, (0.0, 0, ()))
        wait = min(RETRY_FIRST_SECONDS * 2 ** failures, RETRY_MAX_SECONDS)
        self.retry_at[record.uid] = (self.clock() + wait, failures + 1, record.fingerprint if conflict else ())
        return wait

    def waiting(self, record: Any, now: float) -> bool:
        """True while `record` must not be tried again yet (backing off, or unchanged since a conflict)."""
        retry = self.retry_at.get(record.uid)
        return retry is not None and (now < retry[0] or bool(retry[2] and retry[2] == record.fingerprint))

    def succeeded(self, uid: str) -> None:
        """`uid`'s write went through: no backoff any more."""
        self.retry_at.pop(uid, None)

    def forget_gone(self, known: Any) -> None:
        """Drop what is kept of pods not in `known`."""
        for table in (self.retry_at, self.refused):
            for uid in [u for u in table if u not in known]:
                del table[uid]
