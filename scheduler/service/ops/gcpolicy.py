"""How the long-running service keeps Python's garbage collector from pausing requests.

The cluster state is large and long-lived (at 2,048 nodes some 85,000 tracked objects: node and pod
dicts, topology, records).  Left alone, CPython's full (generation-2) collections rescan all of it
whenever enough new long-lived objects pile up -- measured at ~75 ms per pass at 2,048 nodes, paid
by whichever filter call happens to allocate the object that triggers it, while every other request
waits on the event loop.  The standard remedy for such servers is `gc.freeze()`: after a
`gc.collect()`, move every surviving object to the permanent generation, which collections never
scan.  `GcPolicy` does that

- once the state is loaded (`meshfit serve` start-up),
- whenever the state was rebuilt (`ClusterState.generation` moved: the first list in real mode, a
  node's labels changed, a Topology object arrived), checked by the service's background sweeper,
- and every `refreeze_seconds` (default 5 minutes), so objects the watch keeps replacing (pod and
  node updates) do not accumulate unfrozen and make full collections expensive again.

A full collection then only scans objects created since the last freeze (~12 ms after 250 gangs
were placed at 2,048 nodes, instead of ~75 ms).  The thresholds stay CPython's defaults: young
collections of the per-request garbage are cheap, and raising the first threshold only makes each
of them scan more.

The trade-off: a frozen object is still freed by reference counting as soon as nothing refers to it
(the state's dicts, records and topologies are acyclic: a dropped topology is freed without the
collector, which the tests check), but one that later becomes part of a garbage *cycle* (an HTTP
connection's objects, alive at a freeze and closed afterwards) is not reclaimed while frozen.  So
every `thorough_every`-th periodic freeze (default: hourly) first unfreezes everything, and that one
collection scans the whole heap once (~80 ms at 2,048 nodes) and frees such cycles.
"""

from __future__ import annotations

import bisect
import gc
import time
from typing import Callable

from scheduler.cache.state import ClusterState

DEFAULT_REFREEZE_SECONDS = 300.0
DEFAULT_THOROUGH_EVERY = 12


def collect_and_freeze(thorough: bool = False) -> float:
    """Collect every generation, then freeze the survivors (`thorough`: unfreeze first, so the collection
    also reaches earlier frozen objects); returns the seconds it took."""
    started = time.perf_counter()
    if thorough:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - started


class GcPolicy:
    """Freezes the long-lived state after loads, rebuilds and every `refreeze_seconds` (module docstring)."""

    def __init__(self, state: ClusterState, refreeze_seconds: float = DEFAULT_REFREEZE_SECONDS,
                 thorough_every: int = DEFAULT_THOROUGH_EVERY, clock: Callable[[], float] = time.monotonic,
                 freeze: Callable[[bool], float] = collect_and_freeze) -> None:
        self.state = state
        self.refreeze_seconds = refreeze_seconds
        self.thorough_every = thorough_every
        self.clock = clock
        self._freeze = freeze
        self._generation: int | None = None
        self._frozen_at = 0.0
        self.freezes = 0
        self.periodic = 0
        """Freezes made because `refreeze_seconds` passed (every `thorough_every`-th one is thorough)."""

    def freeze_now(self, thorough: bool = False) -> float:
        """Collect and freeze now (after the initial load); returns the seconds it took."""
        self._generation, self._frozen_at = self.state.generation, self.clock()
        self.freezes += 1
        return self._freeze(thorough)

    def maybe_refreeze(self) -> bool:
        """Freeze again if the state was rebuilt or `refreeze_seconds` passed since the last freeze."""
        if self._generation != self.state.generation:
            self.freeze_now()
            return True
        if self.clock() - self._frozen_at < self.refreeze_seconds:
            return False
        self.periodic += 1
        self.freeze_now(thorough=self.periodic % self.thorough_every == 0)
        return True


class GcPauseRecorder:
    """Every collection's pause per generation as histogram counts, recorded from `gc.callbacks`.

    The callback runs inside whatever allocation triggered the collection, so it only updates plain
    lists (no locks: collections never nest, and the GIL is held); scrapes read them.
    """

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [[0] * (len(self.buckets) + 1) for _ in range(3)]
        """Per generation, pauses per bucket (the last one: above every bound)."""
        self.sums = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = min(2, max(0, int(info.get("generation", 0))))
        self.counts[generation][bisect.bisect_left(self.buckets, pause)] += 1
        self.sums[generation] += pause

    def install(self) -> Callable[[], None]:
        """Start recording; returns the function that stops it."""
        gc.callbacks.append(self)
        return lambda: gc.callbacks.remove(self) if self in gc.callbacks else None
