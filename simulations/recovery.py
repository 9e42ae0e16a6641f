"""Failure traces, spares and the three recovery policies of a gang that lost nodes.

**Failure trace.**  Each node fails after an exponential time with mean `node_mtbf_hours` and is
repaired after an exponential time with mean `repair_hours`, from its own seeded stream (so every
policy sees the same trace); or `FailureModel.scripted` lists the failures (time, node, repair).

**Spares** (`FailureModel.spares` = F).  In every leaf domain (the smallest domain of several nodes) the ceil(F x nodes) highest-index
nodes are held back: ordinary placements never see them (they are unschedulable with reason
"spare").  A spare taken for a replacement becomes an ordinary node; a repaired node refills its
leaf's spare pool when that pool is below target.

**Recovery** (`config.Recovery`).  Every policy rolls the job back to its last checkpoint and pays
`restart_minutes` before training resumes.  `restart`: the whole gang is released and requeued at
its position (it must be placed again from scratch, so it waits for a whole gang's capacity).
`replace-one` and `meshfit`: the gang keeps its other pods (and holds their GPUs, idle) while the
lost pods get replacement nodes: `replace-one` one failed node at a time, each a batch that takes
`replace_minutes` once a node is free (no spares); `meshfit` every lost pod in one batch, spares
first within the same locality, nearest domain (longest common topology path) first.  A batch
starts only when a node with room is free; a job waits (holding its nodes) until then.  The resumed
run is priced by the cost model (`scheduler.placement.result.cost.estimate_cost`) on its new layout.
"""

from __future__ import annotations

import random
from typing import Any

from scheduler.placement import engine
from scheduler.gangs import spares
from scheduler.placement.cost import estimate_cost
from simulations.config import Recovery
from simulations.jobstate import RECOVERING, RunJob

Simulator = Any
"""The `simulations.simulator.Simulator` driving this (not imported: the simulator imports this module)."""

SPARE_REASON = "spare"


def leaf_of(sim: Simulator, node: int) -> int:
    """The leaf domain of `node` (`scheduler.gangs.spares.leaf_of`, the service's rule)."""
    return spares.leaf_of(sim.topo, node)


def pick_spares(sim: Simulator, share: float) -> tuple[set[int], dict[int, int]]:
    """(spare node indices, target spares per leaf): `scheduler.gangs.spares.pick_spares` (the service's rule)."""
    return spares.pick_spares(sim.topo, share)


class RecoveryState:
    """Failure trace, spare pool and in-place recovery for one `Simulator` (its policy per `config.Recovery`)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.model = sim.config.failures
        self.rngs: dict[int, random.Random] = {}
        self.scripted_repair: dict[int, list[float]] = {}
        self.spares, self.target = pick_spares(sim, self.model.spares)
        self.recovering: list[RunJob] = []
        self.in_flight: set[int] = set()
        self.spare_gpus = sum(sim.topo.nodes[node].gpus_total for node in self.spares)
        self.counters = {"spare_nodes": len(self.spares), "spares_used": 0, "replacements": 0,
                         "in_place_recoveries": 0}
        for node in sorted(self.spares):
            sim.topo.set_schedulable(sim.topo.nodes[node].name, False, SPARE_REASON)

    # ----- the failure trace -------------------------------------------------------------
    def schedule(self, push, now: float, fail_kind: int) -> None:
        """Push every node's first failure (or the scripted ones)."""
        if self.model.scripted:
            for when, node, repair in sorted(self.model.scripted):
                self.scripted_repair.setdefault(node, []).append(repair)
                push(when, fail_kind, node)
            return
        if not self.model.enabled:
            return
        for node in self.sim.topo.nodes:
            rng = random.Random(f"meshfit-failures:{self.sim.config.seed}:{node.index}")
            self.rngs[node.index] = rng
            push(now + rng.expovariate(1.0 / (self.model.node_mtbf_hours * 3600.0)), fail_kind, node.index)

    def repair_delay(self, node: int) -> float:
        """Seconds until the failed `node` is repaired."""
        if node in self.scripted_repair:
            return self.scripted_repair[node].pop(0)
        return self.rngs[node].expovariate(1.0 / max(self.model.repair_hours * 3600.0, 1e-9))

    def next_failure(self, node: int) -> float | None:
        """Seconds from repair to the node's next failure (None for scripted traces)."""
        if node not in self.rngs:
            return None
        return self.rngs[node].expovariate(1.0 / (self.model.node_mtbf_hours * 3600.0))

    def node_failed(self, node: int) -> None:
        """Drop a failed node from the spare pool."""
        self.spares.discard(node)

    def node_repaired(self, node: int) -> bool:
        """True (and the node becomes a spare again) when its leaf's spare pool is below target."""
        leaf = leaf_of(self.sim, node)
        have = sum(1 for spare in self.spares if leaf_of(self.sim, spare) == leaf)
        if have < self.target.get(leaf, 0) and self.sim.topo.nodes[node].gpus_used == 0:
            self.spares.add(node)
            self.sim.topo.set_schedulable(self.sim.topo.nodes[node].name, False, SPARE_REASON)
            return True
        return False

    # ----- in-place recovery -------------------------------------------------------------
    @property
    def in_place(self) -> bool:
        """True unless the policy restarts whole gangs."""
        return self.model.recovery != Recovery.restart

    def lose_node(self, rj: RunJob, node: int) -> None:
        """`node` under `rj` failed: roll back to the checkpoint (if running) and drop its pods there."""
        sim = self.sim
        if rj.state != RECOVERING:
            sim.pause_job(rj)
            rj.pause(sim.now, self.model.checkpoint_minutes * 60.0)
            self.recovering.append(rj)
            self.counters["in_place_recoveries"] += 1
        for pod, where in enumerate(rj.pod_nodes):
            if where == node:
                sim.topo.remove_pod(engine.pod_key(rj.gang, pod))
                rj.pod_nodes[pod] = -1
        gone = rj.usage.pop(node, 0)
        sim.busy -= gone
        rj.hold(sim.now, rj.held_gpus - gone)
        sim.jobs_on_node[node].discard(rj.order[2])

    def _candidates(self, rj: RunJob, lost_near: int) -> list[int]:
        """Nodes with room for one pod in `scheduler.gangs.spares.replacement_order` (the service's order): nearest to
        `lost_near` first, spares first among equals."""
        topo, need = self.sim.topo, rj.pod_gpus
        use_spares = self.model.recovery == Recovery.meshfit
        found = []
        for node in topo.nodes:
            if node.index in self.spares:
                if use_spares and node.gpus_total - node.gpus_used >= need:
                    found.append(node.index)
            elif node.schedulable and node.gpus_free >= need:
                found.append(node.index)
        return spares.replacement_order(topo, lost_near, found, self.spares)

    def try_all(self) -> None:
        """Start a replacement batch for every recovering job that has none in flight and lost pods."""
        for rj in list(self.recovering):
            if id(rj) not in self.in_flight:
                self._start_batch(rj)

    def _start_batch(self, rj: RunJob) -> None:
        sim, topo = self.sim, self.sim.topo
        lost = [pod for pod, node in enumerate(rj.pod_nodes) if node == -1]
        if not lost:
            return
        placed = 0
        for node in self._candidates(rj, self._home(rj)):
            room = (topo.nodes[node].gpus_total - topo.nodes[node].gpus_used) // rj.pod_gpus
            if node in self.spares:
                self.spares.discard(node)
                topo.set_schedulable(topo.nodes[node].name, True)
                self.counters["spares_used"] += 1
            take = lost[placed: placed + room]
            for pod in take:
                topo.add_pod(engine.pod_key(rj.gang, pod), topo.nodes[node].name, rj.pod_gpus)
                rj.pod_nodes[pod] = node
                rj.usage[node] = rj.usage.get(node, 0) + rj.pod_gpus
                sim.jobs_on_node.setdefault(node, set()).add(rj.order[2])
            sim.busy += rj.pod_gpus * len(take)
            placed += len(take)
            self.counters["replacements"] += 1
            if placed == len(lost) or self.model.recovery == Recovery.replace_one:
                break
        if placed:
            rj.hold(sim.now, rj.held_gpus + rj.pod_gpus * placed)
            self.in_flight.add(id(rj))
            sim.epoch += 1
            sim.push_recovered(sim.now + self.model.replace_minutes * 60.0, rj)

    def _home(self, rj: RunJob) -> int:
        """A surviving node of `rj` (replacements go near it), or node 0 if none survives."""
        return next((node for node in rj.pod_nodes if node >= 0), 0)

    def batch_done(self, rj: RunJob) -> None:
        """A replacement batch of `rj` is up: start the next one, or resume training when no pod is lost."""
        self.in_flight.discard(id(rj))
        if rj.state != RECOVERING:
            return
        if any(node == -1 for node in rj.pod_nodes):
            self._start_batch(rj)
            return
        self.recovering.remove(rj)
        cost = estimate_cost(rj.gang, rj.pod_nodes, self.sim.topo, rj.rank_order or None)
        self.sim.resume_job(rj, cost)
