"""Decision guard: fixed traces and placement sequences on fixed seeds, and every decision they make.

Speed work on the placement engine and the simulator must never change a decision silently.  Each
scenario below replays a fixed workload (simulator scenarios: every placement attempt, in order) or a
fixed sequence of gangs on a fragmented cluster (placement scenarios: place, apply, release) and
records one line per decision: job, status, node index per pod, rank order and predicted step
seconds (12 significant digits, so only a real change of layout or cost shows).
`tests/placement/data/decision_guard.json` holds, per scenario, the decision count, a SHA-256 over
all lines, a short hash per decision (to point at the first one that changed) and the first lines
in full.  `test_decision_guard.py` replays and compares.

Regenerate the fixture only when a decision change is intended, and say so in the commit:
`python -m tests.placement.decision_guard --write`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from scheduler.placement import engine
from scheduler.placement.jobs import AUTO_RANK_ORDER, Gang, ModelShape, Parallelism, PodSlot, TopologyConstraint
from scheduler.placement.result import Placement
from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import FailureModel, KueueSlices, SimConfig
from simulations.simulator import Simulator
from simulations.synthetic import generate
from tests.bench.placement_preset_study import fabric_config, fragment
from topology.generator import generate_nodelist
from topology.loaders import topology_from_objects
from topology.model import ClusterTopology

FIXTURE = Path(__file__).parent / "data" / "decision_guard.json"
FULL_LINES = 6
"""Decisions kept in full per scenario (the rest as short hashes)."""


def decision_line(job: str, placement: Placement, topo: ClusterTopology) -> str:
    """One decision as a stable text line (node indices, rank order, cost to 12 significant digits)."""
    if not placement.placed:
        return f"{job}|unschedulable"
    nodes = ",".join(str(topo.node_by_name[name].index) for name in placement.pod_nodes)
    return f"{job}|placed|{nodes}|{placement.rank_order}|{placement.cost.step_comm_seconds:.12g}"


class RecordingSimulator(Simulator):
    """A `Simulator` that writes down every placement attempt's decision."""

    lines: list[str]

    def _try_place(self, rj):  # type: ignore[override]
        result = super()._try_place(rj)
        if result is None:
            self.lines.append(f"{rj.job.job_id}|unschedulable")
        else:
            self.lines.append(decision_line(rj.job.job_id, result[0], self.topo))
        return result


@dataclass(frozen=True)
class SimScenario:
    """A synthetic trace replayed by one policy on one preset cluster."""

    name: str
    preset: str
    nodes: int
    jobs: int
    seed: int
    policy: str
    oversubscription: float = 1.0
    max_tp: int = 8
    config: SimConfig = field(default_factory=SimConfig)
    auto_every: int = 0
    """Every n-th gang gets `rank-order: auto` (0: none)."""

    def run(self) -> list[str]:
        """Replay and return the decision lines."""
        links = {role: {"oversubscription": self.oversubscription} for role in ("spine", "core", "cluster")}
        spec = ClusterSpec(self.preset, self.nodes, links=links if self.oversubscription > 1 else {})
        topo = build_cluster(spec)
        workload = generate(self.jobs, topo.gpus_total, seed=self.seed, max_tp=self.max_tp)
        sim = RecordingSimulator(topo, workload, self.policy, self.config)
        sim.lines = []
        if self.auto_every:
            for index, rj in enumerate(sim.jobs):
                if index % self.auto_every == 0:
                    rj.gang = replace(rj.gang, rank_order=AUTO_RANK_ORDER)
        sim.run()
        return sim.lines


DENSE = ModelShape(params=70e9, layers=80, hidden=8192, seq=4096, micro_batch=1, global_batch=512)
MOE = ModelShape(params=47e9, layers=32, hidden=4096, seq=4096, micro_batch=1, global_batch=512, moe_topk=2)
SHAPES = (  # (GPUs per pod as a share of the node: 1 = whole node, 2 = half, ...), tp, cp, ep, pp, dp
    (1, 8, 1, 1, 4, 8), (1, 8, 1, 1, 8, 16), (2, 8, 1, 1, 4, 8), (4, 8, 1, 1, 4, 4), (4, 4, 1, 1, 4, 8),
    (1, 4, 2, 1, 4, 8), (2, 2, 1, 4, 2, 16), (1, 8, 1, 1, 2, 2), (2, 4, 1, 1, 1, 2), (8, 1, 1, 1, 1, 1),
    (4, 2, 1, 1, 1, 1), (2, 4, 1, 1, 1, 1), (1, 8, 1, 1, 1, 1), (1, 1, 1, 1, 1, 8), (2, 16, 1, 1, 2, 2),
)


def random_gang(rng: random.Random, index: int, topo: ClusterTopology) -> Gang:
    """A gang of a random study shape, rank order (auto included) and topology constraint."""
    per_node = max(n.gpus_total for n in topo.nodes)
    share, tp, cp, ep, pp, dp = rng.choice(SHAPES)
    per_pod = max(per_node // share, 1)
    if tp * cp * ep * pp * dp < per_pod:
        dp = per_pod // (tp * cp * ep * pp)
    par = Parallelism(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp)
    pods = tuple(PodSlot(i, f"g{index}-{i}", per_pod) for i in range(par.world_size // per_pod))
    short_order = "tp-cp-ep-dp-pp" if ep > 1 else "tp-cp-dp-pp"  # leaves out ep when its degree is 1
    order = rng.choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", AUTO_RANK_ORDER, short_order])
    roles = [level.name for level in topo.levels[:-1]]
    constraint = TopologyConstraint()
    draw = rng.random()
    if draw < 0.15 and roles:
        constraint = TopologyConstraint(preferred_level=rng.choice(roles))
    elif draw < 0.25 and roles:
        constraint = TopologyConstraint(required_level=rng.choice(roles))
    elif draw < 0.3:
        top = [d.name for d in topo.domains if d.level == min(1, topo.host_level - 1)]
        constraint = TopologyConstraint(assigned_domains=tuple(rng.sample(top, min(2, len(top)))))
    return Gang("guard", f"g{index}", pods, par, order, MOE if ep > 1 else DENSE, constraint)


@dataclass(frozen=True)
class PlaceScenario:
    """A fixed sequence of gangs placed, applied and sometimes released on one fragmented preset cluster."""

    name: str
    preset: str
    nodes: int
    occupancy: float
    oversubscription: float
    seed: int
    gangs: int
    policy: str

    def run(self) -> list[str]:
        """Place the sequence and return the decision lines."""
        nodelist = generate_nodelist(self.preset, self.nodes, seed=self.seed)
        topo = topology_from_objects(nodelist["items"], fabric_config(self.preset, self.oversubscription))
        fragment(topo, self.occupancy, self.seed)
        rng = random.Random(f"guard:{self.name}")
        placed: list[Gang] = []
        lines = []
        for index in range(self.gangs):
            gang = random_gang(rng, index, topo)
            placement = engine.place(gang, topo, self.policy, with_ranks=False)
            lines.append(decision_line(gang.name, placement, topo))
            if placement.placed:
                engine.apply(placement, topo)
                placed.append(gang)
            if placed and rng.random() < 0.3:
                engine.release(placed.pop(rng.randrange(len(placed))), topo)
        return lines


BASELINES = ("kueue-tas", "volcano-hypernode", "first-fit")
FAILURES = FailureModel(node_mtbf_hours=40.0, repair_hours=2.0)


def scenarios() -> list[SimScenario | PlaceScenario]:
    """Every guarded scenario."""
    found: list[SimScenario | PlaceScenario] = []
    for policy in ("meshfit", *BASELINES):
        found.append(SimScenario(f"sim-hgx256-{policy}", "hgx-h100", 256, 1500, 0, policy))
        found.append(SimScenario(f"sim-gb200-4to1-{policy}", "gb200-nvl72", 576, 1000, 1, policy, 4.0, max_tp=16))
    found += [
        SimScenario("sim-hgx2048-meshfit", "hgx-h100", 2048, 2500, 3, "meshfit"),
        SimScenario("sim-hgx2048-kueue-tas", "hgx-h100", 2048, 2500, 3, "kueue-tas"),
        SimScenario("sim-aws-2to1-auto-meshfit", "aws-p5", 512, 1000, 4, "meshfit", 2.0, auto_every=3),
        SimScenario("sim-gke-failures-meshfit", "gke-a3", 256, 1000, 5, "meshfit", config=SimConfig(failures=FAILURES)),
        SimScenario("sim-gke-failures-kueue-tas", "gke-a3", 256, 1000, 5, "kueue-tas",
                    config=SimConfig(failures=FAILURES)),
        SimScenario("sim-gb200-slices-meshfit", "gb200-nvl72", 288, 800, 6, "meshfit", 2.0,
                    config=SimConfig(kueue_slices=KueueSlices.all)),
    ]
    for preset, nodes in (("hgx-h100", 512), ("gb200-nvl72", 576), ("gke-a3", 256), ("aws-p5", 256)):
        for fabric in (1.0, 4.0):
            for policy in ("meshfit", *BASELINES):
                found.append(PlaceScenario(f"place-{preset}-{fabric:g}-{policy}", preset, nodes, 0.5, fabric,
                                           7, 60, policy))
    return found


def short_hash(line: str) -> str:
    """Four hex digits of a decision line's SHA-256 (diagnostics only; the full digest decides)."""
    return hashlib.sha256(line.encode()).hexdigest()[:4]


def summary(lines: list[str]) -> dict:
    """The fixture entry of one scenario's decision lines."""
    return {"count": len(lines), "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
            "hashes": "".join(short_hash(line) for line in lines), "first": lines[:FULL_LINES]}


def first_difference(expected: dict, lines: list[str]) -> str:
    """A readable description of where `lines` first departs from the fixture entry `expected`."""
    hashes = [expected["hashes"][i:i + 4] for i in range(0, len(expected["hashes"]), 4)]
    for position, line in enumerate(lines):
        if position >= len(hashes) or hashes[position] != short_hash(line):
            known = expected["first"][position] if position < len(expected["first"]) else "(hash only)"
            return f"decision {position} changed: now {line!r}, was {known}"
    return f"{len(lines)} decisions now, {expected['count']} before"


def record(chosen: Callable[[str], bool] = lambda name: True) -> dict:
    """Run the chosen scenarios and return their fixture entries."""
    return {scenario.name: summary(scenario.run()) for scenario in scenarios() if chosen(scenario.name)}


def main() -> None:
    """`--write` regenerates the fixture; without it, print which scenarios differ from it."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--only", default="", help="substring of the scenario names to run")
    args = parser.parse_args()
    current = record(lambda name: args.only in name)
    if args.write:
        stored = json.loads(FIXTURE.read_text()) if FIXTURE.exists() and args.only else {}
        stored.update(current)
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(current)} scenarios to {FIXTURE}")
        return
    stored = json.loads(FIXTURE.read_text())
    for name, entry in current.items():
        verdict = "same" if entry["sha256"] == stored[name]["sha256"] else "DIFFERENT"
        print(f"{name}: {entry['count']} decisions, {verdict}")


if __name__ == "__main__":
    main()
