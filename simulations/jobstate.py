"""Per-job simulation state: queue position, current run, progress, checkpoints and the final record."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.placement.jobs import Gang
from simulations.workload import SimJob

PENDING, QUEUED, RUNNING, DONE, REJECTED = "pending", "queued", "running", "done", "not-completed"
RECOVERING = "recovering"
"""Some nodes failed; the gang keeps its other pods while replacements come up (`simulations.recovery`)."""


@dataclass(slots=True)
class RunJob:
    """A job as the simulator tracks it (times in simulated seconds)."""

    job: SimJob
    gang: Gang
    order: tuple
    state: str = PENDING
    work_left: float = 0.0
    """Ideal-placement seconds of training still to do (on this cluster's GPUs)."""
    ideal: float = 0.0
    """Ideal-placement runtime of the whole job on this cluster's GPUs (`simulations.speed.RunSpeed`)."""
    compute: float | None = None
    """Compute seconds per step for a job timed from its model and steps; None for a trace-relative job."""
    first_start: float | None = None
    start: float = 0.0
    end: float = 0.0
    run_id: int = 0
    restarts: int = 0
    slowdown: float = 1.0
    comm_ratio: float = 1.0
    usage: dict[int, int] = field(default_factory=dict)
    """Node index -> GPUs held by the current run."""
    overhead: float = 0.0
    productive: float = 0.0
    lost: float = 0.0
    weighted_slowdown: float = 0.0
    run_seconds: float = 0.0
    skip_epoch: int = -1
    reason: str | None = None
    tier: str = ""
    pod_nodes: list[int] = field(default_factory=list)
    """Node index per pod of the current run (-1: the pod lost its node and waits for a replacement)."""
    rank_order: str = ""
    held: float = 0.0
    """GPU-seconds held by the job's pods so far (running, restarting, or idle while recovering)."""
    held_gpus: int = 0
    held_since: float = 0.0
    replacements: int = 0

    @property
    def gpus(self) -> int:
        """GPUs of the job."""
        return self.job.gpus

    @property
    def pod_gpus(self) -> int:
        """GPUs per pod on this cluster."""
        return self.gang.gpus_per_pod

    @property
    def shape(self) -> tuple[int, int]:
        """(GPUs per pod, pods): jobs of one shape fit or fail together."""
        return self.gang.gpus_per_pod, len(self.gang.pods)

    def begin(self, now: float, pod_node_indices: list[int], slowdown: float, comm_ratio: float,
              restart_seconds: float) -> None:
        """Start a run at `now` on the given nodes; sets the predicted end."""
        if self.first_start is None:
            self.first_start = now
        self.state = RUNNING
        self.run_id += 1
        self.start = now
        per_pod, usage = self.gang.gpus_per_pod, {}
        for node in pod_node_indices:  # first-seen node order, as Counter would give
            usage[node] = usage.get(node, 0) + per_pod
        self.usage = usage
        self.pod_nodes = list(pod_node_indices)
        self.slowdown, self.comm_ratio = slowdown, comm_ratio
        self.overhead = restart_seconds if self.restarts else 0.0
        self.end = now + self.overhead + self.work_left * slowdown

    def finish(self, now: float) -> None:
        """The current run completed all remaining work at `now`."""
        ran = max(now - self.start - self.overhead, 0.0)
        self.productive += ran
        self._account(now)
        self.work_left = 0.0
        self.state = DONE

    def interrupt(self, now: float, checkpoint_seconds: float) -> None:
        """The current run was killed at `now`: keep checkpointed progress, lose the rest, requeue."""
        self.pause(now, checkpoint_seconds)
        self.state = QUEUED
        self.usage = {}

    def hold(self, now: float, gpus: int) -> None:
        """From `now` on the job's pods hold `gpus` GPUs (integrates `held`)."""
        self.held += self.held_gpus * (now - self.held_since)
        self.held_gpus, self.held_since = gpus, now

    def pause(self, now: float, checkpoint_seconds: float) -> None:
        """A node under the running job failed at `now`: roll back to the last checkpoint (keeps its nodes)."""
        ran = max(now - self.start - self.overhead, 0.0)
        kept = (ran // checkpoint_seconds) * checkpoint_seconds if checkpoint_seconds > 0 else 0.0
        kept = min(kept, self.work_left * self.slowdown)
        self.work_left = max(self.work_left - kept / self.slowdown, 0.0)
        self.productive += kept
        self.lost += ran - kept
        self._account(now)
        self.restarts += 1
        self.state = RECOVERING

    def _account(self, now: float) -> None:
        wall = now - self.start
        self.weighted_slowdown += self.slowdown * wall
        self.run_seconds += wall

    @property
    def mean_slowdown(self) -> float:
        """Run-time-weighted communication slowdown over all runs (1.0 if never ran)."""
        return self.weighted_slowdown / self.run_seconds if self.run_seconds > 0 else self.slowdown
