"""The service's garbage-collector policy: when it re-freezes the state, and the pauses it exports."""

from __future__ import annotations

import gc
import time
import weakref

import pytest
from starlette.testclient import TestClient

from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from scheduler.service.ops.gcpolicy import GcPauseRecorder, GcPolicy, collect_and_freeze
from scheduler.service.ops.metrics import LATENCY_BUCKETS, ServiceMetrics
from scheduler.cache.state import ClusterState

from tests.service.helpers import FakeClock, make_node, make_nodes


def loaded_state() -> ClusterState:
    """A state holding the default 8 nodes."""
    state = ClusterState()
    state.replace_all(make_nodes(), [], [])
    return state


class RecordedFreezes(list):
    """A stand-in freeze that records whether each call was thorough (the tests must not freeze pytest's heap)."""

    def __call__(self, thorough: bool = False) -> float:
        self.append(thorough)
        return 0.0


def counting_policy(state: ClusterState, clock: FakeClock, refreeze_seconds: float = 300.0,
                    thorough_every: int = 12) -> GcPolicy:
    """A policy over `state` whose freezes are only recorded (in `policy._freeze`)."""
    return GcPolicy(state, refreeze_seconds, thorough_every, clock=clock, freeze=RecordedFreezes())


@pytest.mark.parametrize("rebuild,elapsed,refreezes", [
    (False, 0.0, False),
    (False, 299.0, False),
    (False, 300.0, True),
    (True, 0.0, True),
], ids=["nothing-changed", "just-before-period", "period-passed", "state-rebuilt"])
def test_refreezes_after_a_rebuild_or_once_the_period_passed(rebuild, elapsed, refreezes):
    state, clock = loaded_state(), FakeClock()
    policy = counting_policy(state, clock)
    policy.freeze_now()
    if rebuild:
        state.upsert_node(make_node("n-new", 8, "rack-9", "block-9"))  # a new node rebuilds the topology
    clock.advance(elapsed)
    assert policy.maybe_refreeze() is refreezes
    assert policy.freezes == 1 + refreezes
    assert policy.maybe_refreeze() is False  # nothing new since


def test_every_nth_periodic_freeze_unfreezes_first_and_rebuilds_never_do():
    state, clock = loaded_state(), FakeClock()
    policy = counting_policy(state, clock, refreeze_seconds=10.0, thorough_every=3)
    policy.freeze_now()
    for _ in range(6):
        clock.advance(10.0)
        assert policy.maybe_refreeze()
    state.upsert_node(make_node("n-new", 8, "rack-9", "block-9"))
    assert policy.maybe_refreeze()
    assert policy._freeze == [False, False, False, True, False, False, True, False]


class Cyclic:
    """An object that refers to itself: only the collector can free it."""

    def __init__(self) -> None:
        self.me = self


def test_only_a_thorough_freeze_frees_a_cycle_that_died_while_frozen():
    cycle = Cyclic()
    alive = weakref.ref(cycle)
    gc.freeze()
    try:
        del cycle  # garbage now, but frozen
        collect_and_freeze()
        assert alive() is not None
        collect_and_freeze(thorough=True)
        assert alive() is None
    finally:
        gc.unfreeze()


def test_first_sweep_freezes_a_state_loaded_after_start_up():
    state, clock = ClusterState(), FakeClock()
    policy = counting_policy(state, clock)
    policy.freeze_now()  # `meshfit serve` start-up in real mode: nothing listed yet
    state.replace_all(make_nodes(), [], [])  # the cache's first list
    assert policy.maybe_refreeze() and policy.freezes == 2


def test_sweeper_drives_the_policy():
    state, clock = loaded_state(), FakeClock()
    policy = counting_policy(state, clock)
    policy.freeze_now()
    scheduler, metrics = build_scheduler(state, MemoryBinder(), "first-fit")
    with TestClient(create_app(scheduler, metrics, sweep_seconds=0.01, gc_policy=policy)):
        state.upsert_node(make_node("n-new", 8, "rack-9", "block-9"))
        deadline = time.monotonic() + 5.0
        while policy.freezes < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert policy.freezes == 2


def test_a_replaced_topology_is_freed_without_the_collector():
    state = loaded_state()
    old = weakref.ref(state.topology)
    gc.disable()
    try:
        state.upsert_node(make_node("n-new", 8, "rack-9", "block-9"))
        assert old() is None, "the topology is kept alive by a reference cycle: frozen copies would leak"
    finally:
        gc.enable()


@pytest.mark.parametrize("generation", [0, 1, 2], ids=["gen0", "gen1", "gen2"])
def test_pause_recorder_counts_each_collection_in_its_generation(generation):
    recorder = GcPauseRecorder(LATENCY_BUCKETS)
    stop = recorder.install()
    try:
        gc.collect(generation)
    finally:
        stop()
    assert sum(recorder.counts[generation]) >= 1
    assert recorder not in gc.callbacks


def test_gc_pauses_are_exported_until_tracking_stops():
    metrics = ServiceMetrics(loaded_state())
    stop = metrics.track_gc_pauses()
    gc.collect(2)
    text = metrics.exposition().decode()
    stop()
    assert 'meshfit_gc_pause_seconds_count{generation="2"}' in text
    count = next(line for line in text.splitlines() if line.startswith('meshfit_gc_pause_seconds_count{generation="2"}'))
    assert float(count.split()[-1]) >= 1
    assert "meshfit_gc_pause_seconds" not in metrics.exposition().decode()
