"""EASY backfill reservations, counted in the head job's pod slots per node (simulator and service alike).

When the queue head cannot start, it gets a reservation: the earliest time (the *shadow time*) at
which enough nodes will have room for its pods, assuming running jobs end when predicted, and the
pod slots to spare at that moment.  A later job may start now only if it ends by the shadow time,
or if the pod slots it takes from the head at the shadow time fit within the spare ones.  Counting
per-node pod slots (not just GPUs) keeps the guarantee honest for whole-node pods.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


class Reservation:
    """The head's shadow time and spare pod slots then; checks and books backfill candidates."""

    def __init__(self, pod_gpus: int, shadow: float, spare: int, free_then: dict[int, int],
                 free_now: Sequence[int]) -> None:
        self.pod_gpus = pod_gpus
        self.shadow = shadow
        self.spare = spare
        self._free_then = free_then
        self._free_now = free_now

    def _free_at_shadow(self, node: int) -> int:
        return self._free_then.get(node, self._free_now[node])

    def slot_loss(self, usage: dict[int, int]) -> int:
        """Head pod slots lost at the shadow time if GPUs `usage` (node -> GPUs) are still held then."""
        g, loss = self.pod_gpus, 0
        for node, gpus in usage.items():
            before = self._free_at_shadow(node)
            loss += before // g - max(before - gpus, 0) // g
        return loss

    def allows(self, usage: dict[int, int], end: float) -> bool:
        """True if a job holding `usage` until `end` does not delay the head."""
        return end <= self.shadow or self.slot_loss(usage) <= self.spare

    def book(self, usage: dict[int, int], end: float) -> None:
        """Account for a backfilled job that is still running at the shadow time."""
        if end <= self.shadow:
            return
        self.spare -= self.slot_loss(usage)
        for node, gpus in usage.items():
            self._free_then[node] = max(self._free_at_shadow(node) - gpus, 0)


def reserve(pod_gpus: int, pods: int, now: float, free_now: Sequence[int], up: Sequence[bool],
            running_by_end: Iterable[tuple[float, dict[int, int]]]) -> Reservation:
    """Reservation for a head of `pods` pods x `pod_gpus` GPUs given free GPUs now and running jobs' ends."""
    slots = sum(free // pod_gpus for free in free_now)
    free_then: dict[int, int] = {}
    if slots >= pods:
        return Reservation(pod_gpus, now, slots - pods, free_then, free_now)
    for end, usage in running_by_end:
        for node, gpus in usage.items():
            if not up[node]:
                continue
            before = free_then.get(node, free_now[node])
            free_then[node] = before + gpus
            slots += (before + gpus) // pod_gpus - before // pod_gpus
        if slots >= pods:
            return Reservation(pod_gpus, end, slots - pods, free_then, free_now)
    return Reservation(pod_gpus, math.inf, 0, free_then, free_now)
