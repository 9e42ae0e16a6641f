"""Prometheus metrics of the service, in a registry of its own (one per app instance).

Request latency per verb; gangs pending / reserved / bound and GPUs free are read from the state
at scrape time by a collector (no bookkeeping on the hot path); reservation expiries and the
predicted step-time ratio to the lower bound of placed gangs are recorded as they happen.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from scheduler.capacity import domain_pod_slots
from scheduler.placement import Placement
from scheduler.service.gcpolicy import GcPauseRecorder
from scheduler.state import ClusterState

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RATIO_BUCKETS = (1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)

log = logging.getLogger("meshfit.metrics")


class SafeCollector(Collector):
    """Wraps a collector so that a failure inside it drops its metrics for one scrape, never the scrape.

    The exception is logged with its traceback and counted in `meshfit_scrape_errors_total{collector}`.
    """

    def __init__(self, inner: Collector, name: str, errors: Counter) -> None:
        self.inner = inner
        self.name = name
        self.errors = errors

    def collect(self) -> Iterator:
        """The inner collector's metrics, or none when it raised."""
        try:
            metrics = list(self.inner.collect())
        except Exception:  # noqa: BLE001 - a scrape must answer whatever one collector does
            log.exception("metrics collector %s failed; its metrics are left out of this scrape", self.name)
            self.errors.labels(self.name).inc()
            return iter(())
        return iter(metrics)


class StateCollector(Collector):
    """Gauges read from `ClusterState` when Prometheus scrapes."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Gangs by status, free GPUs in total and in the largest free domain per level."""
        with self.state.lock:
            counts = self.state.ledger.counts()
            pending = sum(1 for key, members in self.state.gang_index.items()
                          if key not in self.state.ledger.entries and any(not r.node for r in members.values()))
            topo = self.state.topology
            free_total = topo.gpus_free
            largest = {}
            if topo.nodes:
                per_domain = domain_pod_slots(topo, [n.gpus_free for n in topo.nodes])
                for level, spec in enumerate(topo.levels):
                    largest[spec.name] = max((per_domain[d.id] for d in topo.domains if d.level == level), default=0)
        gangs = GaugeMetricFamily("meshfit_gangs", "Gangs by status.", labels=["status"])
        gangs.add_metric(["pending"], pending)
        for status, count in counts.items():
            gangs.add_metric([status], count)
        yield gangs
        yield GaugeMetricFamily("meshfit_gpus_free", "GPUs free on schedulable nodes, net of reservations.",
                                value=free_total)
        per_level = GaugeMetricFamily("meshfit_gpus_free_largest_domain",
                                      "Free GPUs in the largest free domain of each topology level.",
                                      labels=["level"])
        for level, value in largest.items():
            per_level.add_metric([level], value)
        yield per_level


class GcPauseCollector(Collector):
    """`meshfit_gc_pause_seconds{generation}`: the garbage collector's pauses, from a `GcPauseRecorder`."""

    def __init__(self, recorder: GcPauseRecorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """One histogram family with a series per generation."""
        family = HistogramMetricFamily("meshfit_gc_pause_seconds", "Garbage-collection pauses per generation.",
                                       labels=["generation"])
        bounds = [str(b) for b in self.recorder.buckets] + ["+Inf"]
        for generation, counts in enumerate(self.recorder.counts):
            cumulative = [sum(counts[:i + 1]) for i in range(len(counts))]
            family.add_metric([str(generation)], list(zip(bounds, cumulative)), self.recorder.sums[generation])
        yield family


class ServiceMetrics:
    """Every metric of one service instance and its registry."""

    def __init__(self, state: ClusterState) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram("meshfit_request_seconds", "Request latency per verb.", ["verb"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.expiries = Counter("meshfit_reservation_expiries", "Gang reservations released by TTL.",
                                registry=self.registry)
        self.placements = Counter("meshfit_gang_placements", "Gangs placed and reserved.", ["policy"],
                                  registry=self.registry)
        self.step_ratio = Histogram("meshfit_step_time_ratio",
                                    "Predicted step communication time / lower bound of placed gangs.",
                                    buckets=RATIO_BUCKETS, registry=self.registry)
        self.rank_table_failures = Counter("meshfit_rank_table_publish_failures",
                                           "Rank-table ConfigMap publishes that failed (retried later).",
                                           registry=self.registry)
        self.scrape_errors = Counter("meshfit_scrape_errors", "Collectors that raised during a scrape (their "
                                     "metrics were left out of it).", ["collector"], registry=self.registry)
        self.register_collector(StateCollector(state), "state")

    def register_collector(self, collector: Collector, name: str) -> Collector:
        """Register `collector` behind a `SafeCollector`; returns the wrapper (to unregister it)."""
        wrapped = SafeCollector(collector, name, self.scrape_errors)
        self.registry.register(wrapped)
        return wrapped

    def observe_placement(self, placement: Placement) -> None:
        """Count a placed gang and record its predicted step-time ratio."""
        self.placements.labels(placement.policy).inc()
        cost = placement.cost
        if cost is not None and cost.lower_bound_seconds > 0:
            self.step_ratio.observe(cost.step_comm_seconds / cost.lower_bound_seconds)

    def observe_expiries(self, count: int) -> None:
        """Count reservations released by TTL."""
        self.expiries.inc(count)

    def observe_publish_failure(self, gang_key: str, error: Exception) -> None:
        """Count a failed rank-table publish."""
        self.rank_table_failures.inc()

    def track_gc_pauses(self) -> Callable[[], None]:
        """Export garbage-collection pauses (process-wide `gc.callbacks`); returns the function that stops it."""
        recorder = GcPauseRecorder(LATENCY_BUCKETS)
        collector = self.register_collector(GcPauseCollector(recorder), "gc")
        uninstall = recorder.install()

        def stop() -> None:
            uninstall()
            self.registry.unregister(collector)

        return stop

    def exposition(self) -> bytes:
        """The Prometheus text format of everything."""
        return generate_latest(self.registry)
