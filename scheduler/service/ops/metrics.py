"""Prometheus metrics of the service, in a registry of its own (one per app instance).

Request latency per verb; gangs pending / reserved / bound and GPUs free are read from the state
at scrape time by a collector (no bookkeeping on the hot path); reservation expiries and the
predicted step-time ratio to the lower bound of placed gangs are recorded as they happen.
`meshfit_leader` (1 on the replica that answers the verbs) and `meshfit_gang_oldest_seconds{state}` (age of the
oldest gang per lifecycle state) are what manifests/components/monitoring's alerts need besides the counters.

`/metrics` on the main HTTP port serves `ServiceMetrics.exposition()`; `meshfit serve --metrics-port N`
also serves the same registry on a port of its own (`start_metrics_server`: prometheus_client's WSGI
server, plain HTTP, nothing but the metrics), so a NetworkPolicy can admit Prometheus there alone.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from typing import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import (CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest,
                               start_http_server)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from scheduler.placement.capacity import domain_pod_slots
from scheduler.placement.result import Placement
from scheduler.service.ops.gcpolicy import GcPauseRecorder
from scheduler.service.lifecycle.preemption_flow import PREEMPTORS
from scheduler.cache.state import ClusterState

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
WAIT_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
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


class GangQueueCollector(Collector):
    """`meshfit_gang_queue{state}` and `meshfit_gangs_waiting{priority}` from the scheduler's gang lifecycle."""

    STATES = ("waiting", "reserved", "binding", "bound", "incomplete", "rolling-back", "invalid")

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Gangs per lifecycle state (as `GET /gangs` shows them), the queue length per priority, and the age of
        the oldest gang in each state (seconds since its first member reached meshfit; 0 when none)."""
        lifecycle = self.scheduler.lifecycle
        with self.scheduler.state.lock:
            rows = lifecycle.rows()
            now = lifecycle.clock()
        by_state, by_priority, oldest = Tally(), Tally(), {}
        for row in rows:
            state = row.get("state")
            by_state[state] += 1
            if state == "waiting":
                by_priority[row["priority"]] += 1
            arrived = row.get("arrived_at")
            if isinstance(arrived, (int, float)):
                oldest[state] = max(oldest.get(state, 0.0), now - arrived)
        states = GaugeMetricFamily("meshfit_gang_queue", "Gangs by lifecycle state (GET /gangs).", labels=["state"])
        ages = GaugeMetricFamily("meshfit_gang_oldest_seconds", "Seconds since the first member of the oldest gang "
                                 "in each lifecycle state reached meshfit (0 when no gang is in that state).",
                                 labels=["state"])
        for state in self.STATES:
            states.add_metric([state], by_state.get(state, 0))
            ages.add_metric([state], max(oldest.get(state, 0.0), 0.0))
        yield states
        yield ages
        waiting = GaugeMetricFamily("meshfit_gangs_waiting", "Waiting gangs (queue length) by priority.",
                                    labels=["priority"])
        for priority, count in sorted(by_priority.items()):
            waiting.add_metric([str(priority)], count)
        yield waiting


class LeaderCollector(Collector):
    """`meshfit_leader`: 1 while this replica answers the verbs, else 0 (a standby, or a leader still re-listing)."""

    def __init__(self) -> None:
        self.serving: Callable[[], bool] = _always_serving

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One gauge, read from `serving` at scrape time."""
        yield GaugeMetricFamily("meshfit_leader", "1 while this replica answers the verbs (the serving leader with "
                                "--leader-elect; always without it), else 0.", value=1.0 if self.serving() else 0.0)


def _always_serving() -> bool:
    """Without leader election the one replica answers every verb."""
    return True


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


class TransitionCollector:
    """`meshfit_gang_transitions_total{transition}` from the gang state machine (`scheduler.gangs.lifecycle`)."""

    def __init__(self, machine) -> None:
        self.machine = machine

    def collect(self) -> Iterator[CounterMetricFamily]:
        """One sample per transition name taken so far (`unexpected` included: should stay absent)."""
        family = CounterMetricFamily("meshfit_gang_transitions", "Gang state-machine transitions, by name "
                                     "(queued, reserved, binding, bound, member-lost, repaired, rolled-back, "
                                     "re-placed, released, finished; unexpected = a bug).", labels=["transition"])
        for name, count in sorted(dict(self.machine.counts).items()):
            family.add_metric([name], count)
        yield family


class DirectBindingCollector:
    """`meshfit_direct_binding_events_total{event}`: what the direct binder did (nominations written, skipped or failed,
    members bound, no longer fitting, fence passes, waits and time-outs; `scheduler.service.binding.gang_binding`)."""

    def __init__(self, direct) -> None:
        self.direct = direct

    def collect(self) -> Iterator[CounterMetricFamily]:
        """One sample per event counted so far."""
        family = CounterMetricFamily("meshfit_direct_binding_events", "Direct binder events: nominated, "
                                     "nominate_skipped, nominate_failed, bound, failed, conflicts, no_longer_fit, "
                                     "cleared, unnominated (bound without a nomination first), fence_passed, "
                                     "fence_waited, fence_timed_out.", labels=["event"])
        counts = {**dict(self.direct.counts), **{f"fence_{k}": v for k, v in dict(self.direct.fence.counts).items()}}
        for name, count in sorted(counts.items()):
            family.add_metric([name], count)
        yield family


class ServiceMetrics:
    """Every metric of one service instance and its registry."""

    def __init__(self, state: ClusterState) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, resident memory, open fds
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
        self.gang_wait = Histogram("meshfit_gang_wait_seconds",
                                   "Seconds from a gang's first member reaching meshfit until the gang is reserved "
                                   "(until=reserved) or fully bound (until=bound).", ["until"],
                                   buckets=WAIT_BUCKETS, registry=self.registry)
        self.preemptions = Counter("meshfit_gang_preemptions", "Preemptions carried out, each evicting whole "
                                   "lower-priority gangs and pods in one domain, by what preempted: a gang "
                                   "(preemptor=gang) or a lone GPU pod (preemptor=pod).", ["preemptor"],
                                   registry=self.registry)
        self.preempted_gpus = Counter("meshfit_preempted_gpus", "GPUs held by the gangs and pods preempted, by what "
                                      "preempted them (preemptor=gang or pod).", ["preemptor"],
                                      registry=self.registry)
        for preemptor in PREEMPTORS:
            self.preemptions.labels(preemptor)
            self.preempted_gpus.labels(preemptor)
        self.elastic_resizes = Counter("meshfit_elastic_resizes", "Elastic gang resizes (whole DP replicas dropped "
                                       "or added).", ["direction"], registry=self.registry)
        self.bindings = Histogram("meshfit_binding_seconds", "Binding API calls meshfit made, by who asked for them: "
                                  "by=meshfit (its own Bindings of reserved members) or by=kube-scheduler (the "
                                  "/bind verb), and outcome.", ["by", "outcome"], buckets=LATENCY_BUCKETS,
                                  registry=self.registry)
        self.register_collector(StateCollector(state), "state")
        self.leader = LeaderCollector()
        self.register_collector(self.leader, "leader")

    def watch_leadership(self, serving: Callable[[], bool]) -> None:
        """Export `meshfit_leader` from `serving` (with --leader-elect: the elector's `serving`)."""
        self.leader.serving = serving

    def watch_scheduler(self, scheduler) -> None:
        """Export the gang queue of `scheduler` and time its gangs' waits."""
        self.register_collector(GangQueueCollector(scheduler), "gang_queue")
        scheduler.lifecycle.observe_wait = self.observe_gang_wait
        preemption = getattr(scheduler, "preemption", None)
        if preemption is not None:
            preemption.observe = self.observe_preemption
        elastic = getattr(scheduler, "elastic", None)
        if elastic is not None:
            elastic.observe = self.observe_elastic_resize
        self.register_collector(TransitionCollector(scheduler.lifecycle.machine), "gang_transitions")
        if getattr(scheduler, "direct", None) is not None:
            self.register_collector(DirectBindingCollector(scheduler.direct), "direct_binding")
        scheduler.observe_binding = self.observe_binding

    def observe_gang_wait(self, until: str, seconds: float) -> None:
        """A gang waited `seconds` from its first arrival until it was `until` ("reserved", "bound")."""
        self.gang_wait.labels(until).observe(seconds)

    def observe_elastic_resize(self, direction: str) -> None:
        """Count an elastic gang resize ("grow" or "shrink")."""
        self.elastic_resizes.labels(direction).inc()

    def observe_binding(self, by: str, seconds: float, ok: bool) -> None:
        """Time one Binding call made for `by` ("meshfit" or "kube-scheduler")."""
        self.bindings.labels(by, "bound" if ok else "failed").observe(seconds)

    def observe_preemption(self, plan, preemptor: str) -> None:
        """Count a preemption by a `preemptor` ("gang" or "pod") and the GPUs its victims held."""
        self.preemptions.labels(preemptor).inc()
        self.preempted_gpus.labels(preemptor).inc(plan.victim_gpus)

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


def metrics_port_problem(metrics_port: int, port: int, grpc_port: int) -> str:
    """The one-line reason `--metrics-port` cannot be used with these ports ("" when it can; 0 = off)."""
    if not 0 <= metrics_port <= 65535:
        return f"--metrics-port must be between 0 (off) and 65535, got {metrics_port}"
    if metrics_port and metrics_port == port:
        return f"--metrics-port and --port must differ, both are {metrics_port}"
    if metrics_port and metrics_port == grpc_port:
        return f"--metrics-port and --grpc-port must differ, both are {metrics_port}"
    return ""


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """Serve `registry` over plain HTTP on host:port in a daemon thread (prometheus_client's own server, which
    answers every GET path with the metrics); OSError with one line when the port cannot be listened on.
    Stop it with `.shutdown()` then `.server_close()`."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise OSError(f"cannot listen for metrics (--metrics-port) on {host}:{port}: {exc.strerror or exc}") from None
    return server
