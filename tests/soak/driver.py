"""The soak driver: a seeded random workload (gang and plain-pod arrivals) and faults against the real control plane,
with the job-controller / kubelet stand-ins and the invariant checker running throughout; returns a `SoakReport`."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

from tests.realk8s.cluster_builders import create_nodes, ensure_priority_class
from tests.realk8s.controlplane import ControlPlane
from tests.soak import kubeio
from tests.soak.controller import JobController
from tests.soak.faults import FaultInjector
from tests.soak.invariants import Checker, PodInvariants, Violations
from tests.soak.report import SoakReport
from tests.soak.signals import ServiceSignals
from tests.soak.stack import SoakStack
from tests.soak.timeline import Timeline
from tests.soak.workload import NODE_CPU, NODE_MEMORY, PRIORITIES, WorkloadGenerator


@dataclass
class SoakConfig:
    """What one soak run does: how long, on how many nodes, from which seed, at which rates, with which meshfit."""

    duration: float = 180.0
    nodes: int = 40
    seed: int = 19
    gang_rate: float = 0.6  # gang arrivals per second
    plain_rate: float = 0.15  # plain-pod arrivals per second
    fault_interval: float = 6.0  # mean seconds between faults
    run_seconds: tuple[float, float] = (15.0, 60.0)  # how long a job runs once whole
    heal_seconds: tuple[float, float] = (10.0, 40.0)  # how long a node fault lasts
    leaf_nodes: int = 8
    gpus_per_node: int = 8
    completion_timeout: float = 30.0
    unhealthy_grace: float = 5.0
    reservation_ttl: float = 60.0
    partial_grace: float = 20.0
    lease: tuple[float, float, float] = (6.0, 4.0, 1.0)  # duration, renew deadline, retry period
    cancel_after: float = 240.0  # a job that waits this long without being whole is cancelled
    process_spacing: float = 12.0  # fewest seconds between two process faults (each also waits for a ready leader)
    drain: float | None = None  # seconds after the last arrival and fault (default: partly-bound limit + 15)
    long: bool = False  # print the full report

    @property
    def partial_limit(self) -> float:
        """How long a gang may stay partly bound: the completion timeout plus grace."""
        return self.completion_timeout + self.partial_grace

    @property
    def failover_window(self) -> float:
        """How long a fail-over may keep the leader's endpoints down: lease duration + 10 s."""
        return self.lease[0] + 10.0

    @property
    def meshfit_args(self) -> list[str]:
        """The `meshfit serve` flags under test (besides leader election)."""
        return ["--gang-completion-timeout", str(self.completion_timeout), "--unhealthy-grace",
                str(self.unhealthy_grace), "--reservation-ttl", str(self.reservation_ttl)]

    @classmethod
    def from_env(cls) -> "SoakConfig":
        """`MESHFIT_SOAK_MINUTES` (3: the short run; 10 or more is a long run, its report printed),
        `MESHFIT_SOAK_SEED`, `MESHFIT_SOAK_NODES`."""
        minutes = float(os.environ.get("MESHFIT_SOAK_MINUTES", "3"))
        return cls(duration=minutes * 60, seed=int(os.environ.get("MESHFIT_SOAK_SEED", "19")),
                   nodes=int(os.environ.get("MESHFIT_SOAK_NODES", "40")), long=minutes >= 10,
                   fault_interval=6.0 if minutes < 10 else 7.0)


@dataclass
class Arrivals:
    """Jobs that arrived, by kind."""

    gangs: int = 0
    gang_pods: int = 0
    plain: int = 0
    by_style: dict = field(default_factory=dict)
    elastic: int = 0
    with_level: int = 0


class Soak:
    """One run: nodes, the HA meshfit stack, the stand-ins and the checker; `run()` drives it and reports."""

    def __init__(self, config: SoakConfig, plane: ControlPlane, namespace: str, core) -> None:
        self.config, self.plane, self.namespace, self.core = config, plane, namespace, core
        self.timeline = Timeline()
        self.arrivals = Arrivals()
        self._stop = threading.Event()
        seed = config.seed
        self.stack = SoakStack(plane, namespace, self.timeline, seed + 1, config.meshfit_args, config.lease)
        self.controller = JobController(str(plane.kubeconfig), namespace, self.timeline, seed + 2,
                                        cancel_after=config.cancel_after)
        self.workload = WorkloadGenerator(seed + 3, config.nodes, config.gpus_per_node, config.leaf_nodes,
                                          config.run_seconds)
        self.violations = Violations(self.timeline)
        self.pod_invariants = PodInvariants(self.violations, self.timeline, config.partial_limit)
        self.signals = ServiceSignals(self.stack, self.timeline, self.violations, config.failover_window)
        self.violations.context = self.signals.context
        self.checker = Checker(str(plane.kubeconfig), self.timeline, self.violations, self.pod_invariants,
                               self.signals)
        self.faults: FaultInjector | None = None
        self.wall = 0.0

    def setup(self) -> None:
        """Nodes, priority classes, then meshfit a (leader), b (standby), the proxy and kube-scheduler."""
        config = self.config
        create_nodes(self.core, config.nodes, gpus=config.gpus_per_node, leaf_size=config.leaf_nodes,
                     cpu=NODE_CPU, memory=NODE_MEMORY)
        for name, value in PRIORITIES:
            ensure_priority_class(self.core.api_client, name, value)
        bodies = {n["metadata"]["name"]: n for n in kubeio.list_nodes(self.core)}
        self.stack.start()
        self.faults = FaultInjector(kubeio.core(kubeio.new_client(str(self.plane.kubeconfig))), self.namespace,
                                    self.stack, self.timeline, config.seed + 4, bodies, config.heal_seconds,
                                    max_node_faults=max(2, config.nodes // 8),
                                    process_spacing=config.process_spacing, healthy=self.signals.healthy)

    def run(self) -> SoakReport:
        """Drive arrivals and faults for `duration`, heal, drain, and return the report."""
        began = time.monotonic()
        self.timeline.started = began
        self.controller.start()
        self.checker.start()
        threads = [threading.Thread(target=self._arrive, name="soak-arrivals", daemon=True),
                   threading.Thread(target=self._inject, name="soak-faults", daemon=True)]
        for thread in threads:
            thread.start()
        self._stop.wait(self.config.duration)
        self._stop.set()
        for thread in threads:
            thread.join(60)
        self.timeline.cluster("arrivals and faults stopped; healing every node fault")
        self.faults.heal(everything=True)
        settled = self.stack.wait_settled(90)
        self.timeline.cluster(f"drain: {'stack settled' if settled else 'stack NOT settled after 90 s'}")
        time.sleep(self.config.drain if self.config.drain is not None else self.config.partial_limit + 15)
        self.checker.stop()
        self.controller.stop()
        self.wall = time.monotonic() - began
        return SoakReport.build(self)

    def _arrive(self) -> None:
        rng = random.Random(self.config.seed + 5)
        rate = self.config.gang_rate + self.config.plain_rate
        while not self._stop.wait(rng.expovariate(rate)):
            try:
                if rng.random() < self.config.gang_rate / rate:
                    spec = self.workload.gang()
                    self.controller.submit_gang(spec)
                    arrivals = self.arrivals
                    arrivals.gangs += 1
                    arrivals.gang_pods += spec.pods
                    arrivals.by_style[spec.style] = arrivals.by_style.get(spec.style, 0) + 1
                    arrivals.elastic += bool(spec.elastic_min)
                    arrivals.with_level += bool(spec.level)
                    for _ in range(rng.choice((0, 1, 2, 3))):  # CPU-only pods in the same burst, placed by
                        self.controller.submit_plain(self.workload.plain(gpus=0))  # kube-scheduler alone
                        arrivals.plain += 1
                else:
                    self.controller.submit_plain(self.workload.plain())
                    self.arrivals.plain += 1
            except Exception as exc:  # noqa: BLE001 - the API server is busy: the next arrival tries again
                self.timeline.cluster(f"arrival failed: {type(exc).__name__}: {str(exc)[:160]}")

    def _inject(self) -> None:
        rng = random.Random(self.config.seed + 6)
        next_fault = time.monotonic() + rng.expovariate(1 / self.config.fault_interval)
        while not self._stop.wait(1.0):
            try:
                self.faults.heal()
                if time.monotonic() >= next_fault:
                    self.faults.inject()
                    next_fault = time.monotonic() + rng.expovariate(1 / self.config.fault_interval)
            except Exception as exc:  # noqa: BLE001 - the API server is busy: try again next round
                self.timeline.cluster(f"fault injection failed: {type(exc).__name__}: {str(exc)[:160]}")

    def teardown(self) -> None:
        """Stop everything this run started (idempotent)."""
        self._stop.set()
        self.checker.stop()
        self.controller.stop()
        self.stack.stop()
