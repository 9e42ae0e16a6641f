"""The discrete-event simulator: a heapq event loop driving the real placement engine.

Events are job arrivals (read in submit order), run completions, node failures and repairs.  After
all events of one timestamp, a scheduling pass walks the queue (FIFO or priority order) and asks
`scheduler.placement.result.engine.place` for whole gangs; a placed gang is applied with `engine.apply` and released
with `engine.release`, exactly as the service does.  Backfill follows `config.Backfill`.

Cheap skips keep 100,000-job traces fast without changing any decision a full retry would make
under the (documented) monotonicity assumption that a gang which does not fit still does not fit
after other gangs took more GPUs: a job (and every job of the same pod shape) that failed is not
retried until capacity is released (the *capacity epoch* advances on completions, kills and
repairs), and a job needing more GPUs than are free, or more pods than the free GPUs can hold
(counted per node from a histogram of free GPUs, `cluster.free_pod_slots`), is not attempted at all:
no policy could place it, so the skip changes no decision, only `placement_attempts`.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable

from scheduler.placement import engine
from scheduler.placement.result import Placement
from simulations.cluster import (
    all_schedulable,
    free_pod_slots,
    gpus_per_node,
    node_state,
)
from simulations.config import Backfill, QueueOrder, SimConfig
from simulations.jobstate import DONE, QUEUED, REJECTED, RUNNING, RunJob
from simulations.metrics import RunResult, details, failure_metrics, job_row, summarize
from simulations.recovery import RecoveryState
from scheduler.gangs.backfill import Reservation, reserve
from simulations.sampling import Sampler
from simulations.speed import RunSpeed
from simulations.workload import Workload, kueue_slice_rule, make_gang
from topology.hardware import GpuGeneration, cluster_generation
from topology.model import ClusterTopology

COMPLETE, FAIL, REPAIR, RECOVERED = 0, 1, 2, 3
ProgressCallback = Callable[[int, int], None]


class Simulator:
    """One policy on one cluster and workload; `run()` returns a `RunResult`."""

    def __init__(self, topo: ClusterTopology, workload: Workload, policy: str, config: SimConfig,
                 cluster_name: str = "", progress: ProgressCallback | None = None,
                 hardware: GpuGeneration | None = None, mfu: float | None = None) -> None:
        from plugins.policies import get_policy

        self.topo, self.config, self.cluster_name = topo, config, cluster_name
        self.policy_name = policy
        self.policy = get_policy(policy, seed=config.seed) if policy == "random" else get_policy(policy)
        self.progress = progress
        self.total_gpus = topo.gpus_total
        per_node = gpus_per_node(topo)
        priority = config.queue == QueueOrder.priority
        slices = kueue_slice_rule(topo, policy, config.kueue_slices)
        self.jobs = [RunJob(job, make_gang(job, per_node, slices, config.max_comm_ratio),
                            ((-job.priority if priority else 0), job.submit, index), work_left=job.duration)
                     for index, job in enumerate(workload.jobs)]
        self.hardware = hardware or cluster_generation(n.labels for n in topo.nodes)
        self.speed = RunSpeed(config.runtime, self.hardware, topo, mfu)
        for rj in self.jobs:
            self.speed.prepare(rj)
        self.queue: list[RunJob] = []
        self.running_by_end: list[tuple[float, int, RunJob]] = []
        self.heap: list[tuple[float, int, int, object, int]] = []
        self.seq = 0
        self.epoch = 0
        self.failed_shapes: dict[tuple[int, int], int] = {}
        self.jobs_on_node: dict[int, set[int]] = {}
        self.busy = 0
        self.busy_gpu_seconds = 0.0
        self.window_busy = 0.0
        self.ideal_busy = 0.0
        """Running GPUs weighted by 1 / runtime stretch: the GPU-seconds per second an ideal placement would need."""
        self.window_ideal = 0.0
        self.window_end = workload.jobs[-1].submit if workload.jobs else 0.0
        """Utilisation is measured over the arrival window [first submit, last submit]."""
        self.now = workload.jobs[0].submit if workload.jobs else 0.0
        self.finished = 0
        self.counters = {"events": 0, "passes": 0, "placement_attempts": 0, "placement_failures": 0,
                         "backfilled": 0, "node_failures": 0, "jobs_killed": 0,
                         "placements_skipped": 0}
        self.sampler = Sampler(topo, workload, config.samples)
        self.recovery = RecoveryState(self)
        self.shadows: dict[int, float] = {}
        """Job index -> shadow time of the first EASY reservation it got as the blocked head."""

    # ----- events ------------------------------------------------------------------------
    def _push(self, when: float, kind: int, ref: object, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, kind, self.seq, ref, token))

    def push_recovered(self, when: float, rj: RunJob) -> None:
        """Schedule the end of `rj`'s replacement batch (`recovery.RecoveryState.batch_done`)."""
        self._push(when, RECOVERED, rj)

    def _all_up(self) -> bool:
        """True if every node is schedulable or a healthy spare."""
        if not self.recovery.spares:
            return all_schedulable(self.topo)
        up = node_state(self.topo)[1].copy()
        up[list(self.recovery.spares)] = True
        return bool(up.all())

    def _advance(self, when: float) -> None:
        """Move the clock to `when`, integrating busy GPUs and taking time-series samples."""
        if when > self.now:
            self.sampler.until(when, self)
            self.busy_gpu_seconds += self.busy * (when - self.now)
            if self.now < self.window_end:
                self.window_busy += self.busy * (min(when, self.window_end) - self.now)
                self.window_ideal += self.ideal_busy * (min(when, self.window_end) - self.now)
            self.now = when

    # ----- job lifecycle -----------------------------------------------------------------
    def _enqueue(self, rj: RunJob) -> None:
        rj.state = QUEUED
        bisect.insort(self.queue, rj, key=lambda r: r.order)
        self.sampler.queued(rj.pod_gpus, +1)

    def _arrive(self, rj: RunJob) -> None:
        if rj.gpus > self.total_gpus - self.recovery.spare_gpus:
            spares = f" outside {self.recovery.spare_gpus} spare GPUs" if self.recovery.spare_gpus else ""
            self._reject(rj, f"needs {rj.gpus} GPUs; the cluster has {self.total_gpus - self.recovery.spare_gpus}{spares}")
            return
        self._enqueue(rj)

    def _reject(self, rj: RunJob, reason: str) -> None:
        rj.state, rj.reason = REJECTED, reason
        self.finished += 1

    def _start(self, rj: RunJob, placement: Placement, slowdown: float, comm_ratio: float) -> None:
        nodes = [self.topo.node_by_name[name].index for name in placement.pod_nodes]
        engine.apply(placement, self.topo)
        rj.begin(self.now, nodes, slowdown, comm_ratio, self.config.failures.requeue_seconds)
        rj.tier, rj.rank_order = _widest_tier(placement), placement.rank_order
        rj.hold(self.now, rj.gpus)
        self.busy += rj.gpus
        self.ideal_busy += rj.gpus / max(slowdown, 1e-12)
        for node in rj.usage:
            self.jobs_on_node.setdefault(node, set()).add(rj.order[2])
        bisect.insort(self.running_by_end, (rj.end, rj.order[2], rj))
        self._push(rj.end, COMPLETE, rj, rj.run_id)

    def _stop(self, rj: RunJob) -> None:
        """Release a running job's GPUs and bookkeeping (before finish / interrupt)."""
        engine.release(rj.gang, self.topo)
        self.busy -= rj.gpus
        rj.hold(self.now, 0)
        self.pause_job(rj)
        for node in rj.usage:
            self.jobs_on_node[node].discard(rj.order[2])

    def pause_job(self, rj: RunJob) -> None:
        """Take a running job off the running list (it keeps its GPUs: in-place recovery or `_stop`)."""
        self.ideal_busy = self.ideal_busy - rj.gpus / max(rj.slowdown, 1e-12) if self.busy else 0.0
        del self.running_by_end[bisect.bisect_left(self.running_by_end, (rj.end, rj.order[2], rj))]
        self.epoch += 1

    def resume_job(self, rj: RunJob, cost) -> None:
        """Restart a recovered job on its repaired layout (priced by `cost`) after `restart_minutes`."""
        slowdown = self.speed.stretch(rj, cost.step_comm_seconds, cost.lower_bound_seconds)
        ratio = cost.step_comm_seconds / cost.lower_bound_seconds if cost.lower_bound_seconds > 0 else 1.0
        rj.begin(self.now, rj.pod_nodes, slowdown, ratio, self.config.failures.restart_minutes * 60.0)
        self.ideal_busy += rj.gpus / max(slowdown, 1e-12)
        bisect.insort(self.running_by_end, (rj.end, rj.order[2], rj))
        self._push(rj.end, COMPLETE, rj, rj.run_id)

    def _complete(self, rj: RunJob, run_id: int) -> None:
        if rj.state != RUNNING or rj.run_id != run_id:
            return
        self._stop(rj)
        rj.finish(self.now)
        self.finished += 1

    def _fail_node(self, node: int) -> None:
        failures = self.config.failures
        self.counters["node_failures"] += 1
        for order_index in sorted(self.jobs_on_node.get(node, ())):
            rj = self.jobs[order_index]
            self.counters["jobs_killed"] += 1
            if self.recovery.in_place:
                self.recovery.lose_node(rj, node)
                continue
            self._stop(rj)
            rj.interrupt(self.now, failures.checkpoint_minutes * 60.0)
            self._enqueue(rj)
        self.recovery.node_failed(node)
        self.topo.set_schedulable(self.topo.nodes[node].name, False, "simulated node failure")
        self._push(self.now + self.recovery.repair_delay(node), REPAIR, node)

    def _repair_node(self, node: int) -> None:
        if not self.recovery.node_repaired(node):
            self.topo.set_schedulable(self.topo.nodes[node].name, True)
        self.epoch += 1
        after = self.recovery.next_failure(node)
        if after is not None:
            self._push(self.now + after, FAIL, node)

    def _handle(self, kind: int, ref: object, token: int) -> None:
        if kind == COMPLETE:
            self._complete(ref, token)  # type: ignore[arg-type]
        elif kind == FAIL:
            self._fail_node(ref)  # type: ignore[arg-type]
        elif kind == RECOVERED:
            self.recovery.batch_done(ref)  # type: ignore[arg-type]
        else:
            self._repair_node(ref)  # type: ignore[arg-type]

    # ----- scheduling --------------------------------------------------------------------
    def _try_place(self, rj: RunJob) -> tuple[Placement, float, float] | None:
        """Ask the engine for the whole gang; (placement, slowdown, comm ratio) or None."""
        self.counters["placement_attempts"] += 1
        placement = engine.place(rj.gang, self.topo, self.policy, with_ranks=False)
        if not placement.placed:
            self.counters["placement_failures"] += 1
            rj.reason = placement.reason
            self.failed_shapes[rj.shape] = self.epoch
            return None
        cost = placement.cost
        slowdown = self.speed.stretch(rj, cost.step_comm_seconds, cost.lower_bound_seconds)
        ratio = cost.step_comm_seconds / cost.lower_bound_seconds if cost.lower_bound_seconds > 0 else 1.0
        return placement, slowdown, ratio

    def _worth_trying(self, rj: RunJob) -> bool:
        if rj.skip_epoch == self.epoch or self.failed_shapes.get(rj.shape) == self.epoch:
            return False
        if rj.gpus > self.topo.gpus_free:
            return False
        pods, slots = len(rj.gang.pods), free_pod_slots(self.topo, rj.pod_gpus)
        if slots >= pods:
            return True
        self.counters["placements_skipped"] += 1
        rj.reason = f"needs {pods} pods of {rj.pod_gpus} GPUs; the free GPUs hold only {slots}"
        self.failed_shapes[rj.shape] = self.epoch
        return False

    def _reservation_for(self, head: RunJob) -> Reservation:
        free_now = self.topo.free_arrays()[0].tolist()
        up = node_state(self.topo)[1].tolist()
        ends = ((end, rj.usage) for end, _, rj in self.running_by_end)
        return reserve(head.pod_gpus, len(head.gang.pods), self.now, free_now, up, ends)

    def _schedule(self) -> None:
        """One pass over the head of the queue (at most `backfill_depth` jobs)."""
        self.counters["passes"] += 1
        mode = self.config.backfill
        reservation: Reservation | None = None
        head: RunJob | None = None
        removed: list[RunJob] = []
        for rj in self.queue[: self.config.backfill_depth]:
            attempt = self._try_place(rj) if self._worth_trying(rj) else None
            if attempt is not None and head is not None and mode == Backfill.easy:
                if reservation is None:
                    reservation = self._reservation_for(head)
                    self.shadows.setdefault(head.order[2], reservation.shadow)
                attempt = self._easy_check(rj, attempt, reservation)
            if attempt is None:
                if self._never_fits(rj):
                    self._reject(rj, f"cannot be placed even on the idle cluster: {rj.reason}")
                    removed.append(rj)
                    continue
                rj.skip_epoch = self.epoch
                head = head or rj
                if mode == Backfill.none:
                    break
                continue
            self._start(rj, *attempt)
            removed.append(rj)
            self.counters["backfilled"] += head is not None
        if removed:
            gone = {id(rj) for rj in removed}
            self.queue = [rj for rj in self.queue if id(rj) not in gone]
            for rj in removed:
                self.sampler.queued(rj.pod_gpus, -1)

    def _never_fits(self, rj: RunJob) -> bool:
        """True if `rj` just failed to place on an idle cluster with every node up."""
        return (self.busy == 0 and self.failed_shapes.get(rj.shape) == self.epoch
                and not self.recovery.recovering and self._all_up())

    def _easy_check(self, rj: RunJob, attempt: tuple[Placement, float, float],
                    reservation: Reservation) -> tuple[Placement, float, float] | None:
        """The attempt if starting `rj` now does not delay the head's reservation, else None."""
        placement, slowdown, _ = attempt
        usage: dict[int, int] = {}
        for name in placement.pod_nodes:
            index = self.topo.node_by_name[name].index
            usage[index] = usage.get(index, 0) + rj.pod_gpus
        restart = self.config.failures.requeue_seconds if rj.restarts else 0.0
        end = self.now + restart + rj.work_left * slowdown
        if not reservation.allows(usage, end):
            return None
        reservation.book(usage, end)
        return attempt

    # ----- main loop ---------------------------------------------------------------------
    def _next_time(self, arrival_index: int) -> float:
        arrival = self.jobs[arrival_index].job.submit if arrival_index < len(self.jobs) else math.inf
        return min(arrival, self.heap[0][0] if self.heap else math.inf)

    def _stuck(self, arrival_index: int) -> bool:
        """Nothing runs, nothing arrives, no node is down: the queue can never drain."""
        if arrival_index < len(self.jobs) or self.running_by_end or not self.queue or self.recovery.recovering:
            return False
        return self._all_up()

    def run(self) -> RunResult:
        """Replay the whole workload and return its metrics."""
        started = time.perf_counter()
        self.recovery.schedule(self._push, self.now, FAIL)
        arrival_index, total = 0, len(self.jobs)
        next_report = 0
        while self.finished < total:
            when = self._next_time(arrival_index)
            horizon = self.config.horizon_seconds
            if when == math.inf or (horizon is not None and when > horizon):
                break
            self._advance(when)
            while self.heap and self.heap[0][0] == when:
                _, kind, _, ref, token = heapq.heappop(self.heap)
                self.counters["events"] += 1
                self._handle(kind, ref, token)
            while arrival_index < total and self.jobs[arrival_index].job.submit == when:
                self._arrive(self.jobs[arrival_index])
                self.counters["events"] += 1
                arrival_index += 1
            if self.recovery.recovering:
                self.recovery.try_all()
            if self.queue:
                self._schedule()
            if self._stuck(arrival_index):
                break
            if self.progress and self.finished >= next_report:
                self.progress(self.finished, total)
                next_report = self.finished + max(total // 200, 1)
        return self._result(started)

    def _result(self, started: float) -> RunResult:
        for rj in self.jobs:
            if rj.state not in (DONE, REJECTED):
                rj.reason = f"{rj.state} when the simulation stopped"
                rj.state = REJECTED
        if self.progress:
            self.progress(len(self.jobs), len(self.jobs))
        first = self.jobs[0].job.submit if self.jobs else 0.0
        last = max([rj.end for rj in self.jobs if rj.state == DONE] or [self.now])
        span = (first, max(last, self.now) if self.config.horizon_seconds else last)
        window = (first, self.window_end) if self.window_end > first else span
        samples = self.sampler.rows
        summary = summarize(self.jobs, self.total_gpus, self.window_busy, window, samples, self.window_ideal)
        wall = time.perf_counter() - started
        info = details(self.jobs, dict(self.counters), span)
        info.update(failure_metrics(self.jobs, self.recovery.counters))
        info["busy_gpu_hours"] = round(self.busy_gpu_seconds / 3600.0, 6)
        info["capacity_gpu_hours"] = round(self.total_gpus * (span[1] - span[0]) / 3600.0, 6)
        length = max(window[1] - window[0], 1e-9)
        # like `utilization`, but counting ideal GPU-seconds (what the same progress takes on the ideal layout)
        info["ideal_utilization"] = round(self.window_ideal / (self.total_gpus * length), 6)
        return RunResult(self.policy_name, self.cluster_name, self.config.seed, self.total_gpus, summary, info,
                         samples, [job_row(rj) for rj in self.jobs], self.counters["events"], wall)


def _widest_tier(placement: Placement) -> str:
    tiers = [t for t in placement.cost.tier_by_axis.values() if t != "none"] if placement.cost else []
    return tiers[0] if len(set(tiers)) == 1 else ",".join(sorted(set(tiers)))
