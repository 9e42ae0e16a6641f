"""`ReservedNotices`: a gang's `GangReserved` Event, written only for a gang that is not bound promptly.

Most reserved gangs are bound within a second or two; a `GangReserved` Event followed at once by `GangBound` is
two API writes saying one thing.  So the reservation's Event is held back: a gang fully bound within
`RESERVED_NOTICE_SECONDS` gets one Event, `GangBound`, whose message also says where and how it was reserved; a gang
still not bound by then gets its `GangReserved` Event then, saying how long it has been reserved.  Before any other
Event about a gang whose notice is held (released, rolled back, expired, preempted, reserved again) the notice is
written first, so `kubectl describe pod` shows a gang's story in order.  Events are best effort: a notice held when
meshfit stops is not written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scheduler.service.lifecycle.actions import EVENT_NORMAL, ActionDispatcher, PodRef

RESERVED_NOTICE_SECONDS = 5.0
"""How long a gang's `GangReserved` Event is held back for the gang to be fully bound (then `GangBound` says both)."""


@dataclass
class HeldNotice:
    """A `GangReserved` Event not written yet: on which pod, the gang, what was reserved, and when."""

    ref: PodRef
    key: str
    detail: str
    at: float


class ReservedNotices:
    """Held `GangReserved` Events by gang key; see the module docstring (call under the state lock)."""

    def __init__(self, dispatcher: ActionDispatcher, clock: Callable[[], float],
                 delay: float = RESERVED_NOTICE_SECONDS) -> None:
        self.dispatcher, self.clock, self.delay = dispatcher, clock, delay
        self.held: dict[str, HeldNotice] = {}

    def hold(self, key: str, ref: PodRef, detail: str) -> None:
        """The gang was reserved (`detail`: what and where, e.g. "4 pods x 8 GPUs reserved on 1 node(s) (queue)"):
        hold its Event (a notice still held for an earlier reservation is written first)."""
        self.flush(key)
        self.held[key] = HeldNotice(ref, key, detail, self.clock())

    def flush(self, key: str) -> None:
        """Write the gang's held notice now (before another Event about the gang); nothing if none is held."""
        notice = self.held.pop(key, None)
        if notice is not None:
            waited = self.clock() - notice.at
            self._write(notice, f" ({waited:.1f} s ago)" if waited >= 0.1 else "")

    def bound(self, key: str) -> str:
        """The gang is fully bound: its held notice is dropped; returns what `GangBound` adds ("" if none was held)."""
        notice = self.held.pop(key, None)
        if notice is None:
            return ""
        return f", {self.clock() - notice.at:.1f} s after {notice.detail}"

    def write_due(self) -> int:
        """Write every notice held `delay` seconds or longer (the periodic pass); returns how many."""
        now = self.clock()
        due = [key for key, notice in self.held.items() if now - notice.at >= self.delay]
        for key in due:
            notice = self.held.pop(key)
            self._write(notice, f"; {now - notice.at:.0f} s later not every pod is bound yet")
        return len(due)

    def _write(self, notice: HeldNotice, suffix: str) -> None:
        self.dispatcher.event(notice.ref, "GangReserved", f"gang {notice.key}: {notice.detail}{suffix}", EVENT_NORMAL)
