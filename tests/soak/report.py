"""The soak's end report: what arrived, which faults were injected, what the stand-ins and meshfit did, and every
invariant violation with its timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.soak.faults import FAULT_KINDS
from tests.soak.invariants import Violation


@dataclass
class SoakReport:
    """Numbers and violations of one soak run; `text()` is what gets printed."""

    version: str
    config: Any
    wall_seconds: float
    arrivals: Any
    faults: dict[str, int]
    faults_skipped: dict[str, int]
    controller: Any
    gangs_whole_seen: int
    checker_polls: int
    checker_errors: int
    longest_partial: float
    longest_partial_gang: str
    extender_5xx: dict[int, int]
    failover_503: int
    unreachable: dict[str, int]
    unreachable_outside: int
    endpoint_polls: int
    longest_outage: float
    unexpected_exits: list[str]
    tracebacks: list[str]
    decisions: dict[str, int]
    meshfit_errors: list[str]
    error_timelines: list[list[str]]
    violations: list[Violation] = field(default_factory=list)

    @classmethod
    def build(cls, soak: Any) -> "SoakReport":
        """Collect the numbers of a finished `tests.soak.driver.Soak`."""
        signals, pods = soak.signals, soak.pod_invariants
        return cls(version=soak.plane.install.full, config=soak.config, wall_seconds=soak.wall,
                   arrivals=soak.arrivals, faults=dict(soak.faults.counts), faults_skipped=dict(soak.faults.skipped),
                   controller=soak.controller.stats, gangs_whole_seen=len(pods.whole_seen),
                   checker_polls=soak.checker.polls, checker_errors=soak.checker.errors,
                   longest_partial=pods.longest_partial, longest_partial_gang=pods.longest_partial_gang,
                   extender_5xx=dict(signals.statuses),
                   failover_503=signals.failover_503, unreachable=dict(signals.unreachable),
                   unreachable_outside=signals.unreachable_outside,
                   endpoint_polls=signals.endpoint_polls, longest_outage=signals.longest_outage,
                   unexpected_exits=list(soak.stack.unexpected_exits), tracebacks=list(signals.tracebacks),
                   decisions=dict(signals.decisions), meshfit_errors=list(signals.errors),
                   error_timelines=list(signals.error_timelines),
                   violations=soak.violations.all())

    @property
    def total_faults(self) -> int:
        """Faults injected, all kinds."""
        return sum(self.faults.values())

    def missing_fault_kinds(self) -> list[str]:
        """Fault kinds never injected."""
        return [k for k in FAULT_KINDS if not self.faults.get(k)]

    def text(self, timelines: bool = True) -> str:
        """The report as printed at the end of a run."""
        c, a, s = self.config, self.arrivals, self.controller
        styles = ", ".join(f"{k} {v}" for k, v in sorted(a.by_style.items()))
        lines = [
            f"=== meshfit soak: Kubernetes {self.version}, {c.nodes} nodes x {c.gpus_per_node} GPUs, seed {c.seed}, "
            f"{c.duration / 60:.1f} min of arrivals and faults, {self.wall_seconds / 60:.1f} min in all",
            f"meshfit: 2 replicas --leader-elect (lease {c.lease[0]:g}/{c.lease[1]:g}/{c.lease[2]:g} s) behind a "
            f"readiness-gated proxy; {' '.join(c.meshfit_args)}",
            f"arrivals: {a.gangs} gangs ({styles}; {a.elastic} elastic, {a.with_level} with a topology level; "
            f"{a.gang_pods} pods), {a.plain} plain pods",
            f"faults: {self.total_faults} in all: " + ", ".join(f"{k} {self.faults.get(k, 0)}" for k in FAULT_KINDS),
            f"jobs: {self.gangs_whole_seen} gangs seen whole by the checker ({s.gangs_whole} by the job controller), "
            f"{s.gangs_completed} completed, {s.gangs_cancelled} cancelled (not whole for {c.cancel_after:.0f}s); "
            f"plain pods {s.plain_completed} completed, {s.plain_cancelled} cancelled",
            f"stand-ins: {s.members_created} members created, {s.members_recreated} recreated after a delete, "
            f"{s.deletes_finished} graceful deletes finished (kubelet), {s.pods_collected} pods collected (pod GC), "
            f"{s.api_errors} API errors",
            f"checker: {self.checker_polls} polls ({self.checker_errors} failed), longest partly-bound episode "
            f"{self.longest_partial:.1f}s{f' ({self.longest_partial_gang})' if self.longest_partial_gang else ''} "
            f"(limit {c.partial_limit:.0f}s); endpoints polled {self.endpoint_polls} "
            f"times, longest outage {self.longest_outage:.1f}s (limit {c.failover_window:.0f}s)",
            f"extender answers >= 500 seen by kube-scheduler: {self.extender_5xx or 'none'} "
            f"({self.failover_503} of them 503 during a fail-over); transport errors (no ready replica, a killed "
            f"one's connections): {self.unreachable or 'none'}, {self.unreachable_outside} outside a fail-over",
            "meshfit decisions logged: " + (", ".join(f"{k} {v}" for k, v in sorted(self.decisions.items()))
                                            or "none"),
            f"meshfit processes exiting on their own: {len(self.unexpected_exits)}; tracebacks in meshfit logs: "
            f"{len(self.tracebacks)}; ERROR lines in meshfit logs: {len(self.meshfit_errors)}",
            *[f"    {line[:400]}" for line in self.meshfit_errors[:10]],
            f"VIOLATIONS: {len(self.violations)}" + ("" if self.violations else " (none)"),
        ]
        return "\n".join(lines + self._details(timelines))

    def _details(self, timelines: bool) -> list[str]:
        lines = []
        for v in self.violations:
            lines.append(f"- [{v.kind}] {v.subject}: first at t={v.first:.1f}s, last at t={v.last:.1f}s, "
                         f"seen {v.count}x: {v.message}")
            if timelines:
                lines += [f"    {line}" for line in v.timeline[-80:]]
        if timelines:
            for text in self.unexpected_exits[:5]:
                lines += ["--- exit:"] + [f"    {line}" for line in text.splitlines()]
            for story in self.error_timelines[:5]:
                lines += ["--- meshfit ERROR and its gang's timeline:"] + [f"    {line}" for line in story]
            for text in self.tracebacks[:5]:
                lines += ["--- traceback:"] + [f"    {line}" for line in text.splitlines()]
        return lines
