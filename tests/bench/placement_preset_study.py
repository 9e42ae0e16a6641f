"""Preset part of the placement quality study: `meshfit` vs `kueue-tas` and `volcano-hypernode`.

Grid: preset x fabric x occupancy x job shape x rank order x seed.
- Fabrics: each preset's links as shipped (non-blocking fat tree), and the same with 2:1 and 4:1
  oversubscription on every tier above the leaf (the `spine`, `core` and `cluster` roles), set
  through the topology config's `links` overrides exactly as an operator would.
- Occupancy: nodes are fragmented the way busy clusters are: 40% of nodes hold a partial job
  (2, 4 or 6 of 8 GPUs; 1, 2 or 3 of 4), the rest are wholly busy or wholly free in the
  proportion that gives 30 / 50 / 70% of GPUs in use, scattered at random.
- Shapes: 8-GPU pods (whole node), 4-GPU and 2-GPU pods whose TP groups span pods, jobs larger
  than one leaf / scalable unit, cp > 1 and ep > 1 (MoE) shapes; both Megatron rank orders.
Ratio = meshfit's predicted step time / the baseline's (< 1: meshfit faster); an instance counts
only if all three policies place the gang.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot
from topology.generator import generate_nodelist
from topology.loaders import topology_from_objects
from topology.model import ClusterTopology
from topology.presets import get_preset

PRESETS = ("hgx-h100", "gb200-nvl72", "gke-a3", "aws-p5")
PRESET_NODES = {"hgx-h100": 1024, "gb200-nvl72": 1152, "gke-a3": 1024, "aws-p5": 1024}
FABRICS = {"non-blocking": 1.0, "2:1": 2.0, "4:1": 4.0}
OCCUPANCIES = (0.3, 0.5, 0.7)
RANK_ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
BASELINES = ("kueue-tas", "volcano-hypernode")
PARTIAL_SHARE = 0.4
"""Share of nodes holding a partial (fragmenting) job."""

DENSE = ModelShape(params=70e9, layers=80, hidden=8192, seq=4096, micro_batch=1, global_batch=512)
MOE = ModelShape(params=47e9, layers=32, hidden=4096, seq=4096, micro_batch=1, global_batch=512, moe_topk=2)


@dataclass(frozen=True)
class JobShape:
    """A study job: name, GPUs per pod, degrees, and whether it is a MoE model."""

    name: str
    gpus_per_pod: int
    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1

    def gang(self, rank_order: str) -> Gang:
        """The gang for this shape under `rank_order`."""
        par = Parallelism(tp=self.tp, cp=self.cp, ep=self.ep, pp=self.pp, dp=self.dp)
        pods = par.world_size // self.gpus_per_pod
        return Gang("study", self.name, tuple(PodSlot(i, f"p{i}", self.gpus_per_pod) for i in range(pods)), par,
                    rank_order, MOE if self.ep > 1 else DENSE)


SHAPES_8 = (
    JobShape("pod8 tp8-pp4-dp8", 8, 8, 4, 8),
    JobShape("pod8 tp8-pp8-dp16 (1k)", 8, 8, 8, 16),
    JobShape("pod4 tp8-pp4-dp8", 4, 8, 4, 8),
    JobShape("pod2 tp8-pp4-dp4", 2, 8, 4, 4),
    JobShape("pod2 tp4-pp4-dp8", 2, 4, 4, 8),
    JobShape("pod8 tp4-cp2-pp4-dp8", 8, 4, 4, 8, cp=2),
    JobShape("pod4 tp2-ep4-pp2-dp16", 4, 2, 2, 16, ep=4),
)
SHAPES_4 = (
    JobShape("pod4 tp16-pp4-dp4", 4, 16, 4, 4),
    JobShape("pod4 tp8-pp8-dp16 (1k)", 4, 8, 8, 16),
    JobShape("pod2 tp8-pp4-dp8", 2, 8, 4, 8),
    JobShape("pod2 tp4-pp4-dp8", 2, 4, 4, 8),
    JobShape("pod4 tp8-cp2-pp4-dp4", 4, 8, 4, 4, cp=2),
    JobShape("pod4 tp4-ep8-pp2-dp4", 4, 4, 2, 4, ep=8),
)


def shapes_for(gpus_per_node: int) -> tuple[JobShape, ...]:
    """The study's job shapes for nodes of `gpus_per_node` GPUs."""
    return SHAPES_8 if gpus_per_node == 8 else SHAPES_4


def fabric_config(preset: str, oversubscription: float) -> dict:
    """Topology config: the preset's link profile with every tier above the leaf oversubscribed."""
    links = {role: {"oversubscription": oversubscription} for role in ("spine", "core", "cluster")}
    return {"profile": get_preset(preset).link_profile, "links": links if oversubscription > 1 else {}}


def fragment(topo: ClusterTopology, fraction: float, seed: int) -> None:
    """Occupy about `fraction` of the GPUs: partial nodes plus whole busy nodes, at random."""
    rng = random.Random(f"occupancy:{seed}:{fraction}")
    whole_busy = max(0.0, min(1.0, (fraction - PARTIAL_SHARE * 0.5) / (1 - PARTIAL_SHARE)))
    for node in topo.nodes:
        g = node.gpus_total
        if rng.random() < PARTIAL_SHARE:
            used = rng.choice([g // 4, g // 2, 3 * g // 4])
        else:
            used = g if rng.random() < whole_busy else 0
        if used:
            topo.add_pod(f"busy/{node.index}", node.name, used)


def study_cluster(preset: str, fabric: str, occupancy: float, seed: int, nodes: int | None = None) -> ClusterTopology:
    """A generated preset cluster with the given fabric and fragmented occupancy."""
    nodelist = generate_nodelist(preset, nodes or PRESET_NODES[preset], seed=seed)
    topo = topology_from_objects(nodelist["items"], fabric_config(preset, FABRICS[fabric]))
    fragment(topo, occupancy, seed)
    return topo


def compare(gang: Gang, topo: ClusterTopology) -> dict[str, float] | None:
    """Predicted step seconds per policy (meshfit, baselines, lower bound), or None if any cannot place."""
    result: dict[str, float] = {}
    for policy in ("meshfit", *BASELINES):
        placement = place(gang, topo, policy)
        if not placement.placed:
            return None
        result[policy] = placement.cost.step_comm_seconds
        result["lower_bound"] = placement.cost.lower_bound_seconds
    return result


def run_grid(seeds: int, presets=PRESETS, fabrics=tuple(FABRICS), occupancies=OCCUPANCIES,
             nodes: int | None = None) -> list[dict]:
    """One record per placed instance: preset, fabric, occupancy, shape, pods (whole-node / sub-node), order, seed
    and predicted step seconds per policy (plus the lower bound)."""
    records = []
    for preset in presets:
        for fabric in fabrics:
            for occupancy in occupancies:
                for seed in range(seeds):
                    topo = study_cluster(preset, fabric, occupancy, seed, nodes)
                    for shape in shapes_for(topo.nodes[0].gpus_total):
                        for order in RANK_ORDERS:
                            seconds = compare(shape.gang(order), topo)
                            if seconds is not None:
                                pods = "whole-node" if shape.gpus_per_pod == topo.nodes[0].gpus_total else "sub-node"
                                records.append({"preset": preset, "fabric": fabric, "occupancy": occupancy,
                                                "shape": shape.name, "pods": pods, "order": order, "seed": seed,
                                                **seconds})
    return records


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile of `values` (non-empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def ratio_summary(ratios: list[float], tie: float = 1e-6) -> dict:
    """n, median, p90, min, max of meshfit / baseline and the share better / equal / worse."""
    if not ratios:
        return {"n": 0}
    n = len(ratios)
    return {"n": n, "median": quantile(ratios, 0.5), "p90": quantile(ratios, 0.9), "min": min(ratios),
            "max": max(ratios), "better": sum(r < 1 - tie for r in ratios) / n,
            "better_1pct": sum(r < 0.99 for r in ratios) / n,
            "equal": sum(abs(r - 1) <= tie for r in ratios) / n, "worse": sum(r > 1 + tie for r in ratios) / n}


def summarize(records: list[dict], keys=("preset", "fabric", "shape")) -> list[dict]:
    """Per group of `keys`, the ratio summary against each baseline."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(record[k] for k in keys), []).append(record)
    rows = []
    for key, members in groups.items():
        row = dict(zip(keys, key))
        for baseline in BASELINES:
            row[baseline] = ratio_summary([m["meshfit"] / m[baseline] for m in members])
        row["vs_lower_bound"] = quantile([m["meshfit"] / m["lower_bound"] for m in members], 0.5)
        rows.append(row)
    return rows


def markdown_table(rows: list[dict], keys=("preset", "fabric", "shape")) -> str:
    """The summary rows as a Markdown table (median / p90 / min ratio and better/equal/worse shares)."""
    head = [*keys, "n", "kueue med", "p90", "min", "better/eq/worse", ">1% better", "volcano med", "p90", "min",
            "better/eq/worse", ">1% better", "meshfit/LB med"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(row[k]) for k in keys]
        cells.append(str(row[BASELINES[0]]["n"]))
        for baseline in BASELINES:
            s = row[baseline]
            if not s["n"]:
                cells += ["-"] * 5
                continue
            cells += [f"{s['median']:.3f}", f"{s['p90']:.3f}", f"{s['min']:.3f}",
                      f"{s['better']:.0%}/{s['equal']:.0%}/{s['worse']:.0%}", f"{s['better_1pct']:.0%}"]
        cells.append(f"{row['vs_lower_bound']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def hard_small_instance(rng: random.Random) -> tuple[ClusterTopology, Gang] | None:
    """A <= 16-node preset cluster, fragmented like the preset study, with a job of <= 16 pods whose
    TP groups may span pods (2- and 4-GPU pods), cp / ep axes and an oversubscribed fabric; None if it cannot fit."""
    preset = rng.choice(PRESETS)
    nodes = rng.randint(8, 16)
    nodelist = generate_nodelist(preset, nodes, seed=rng.randint(0, 10**6))
    topo = topology_from_objects(nodelist["items"], fabric_config(preset, rng.choice(list(FABRICS.values()))))
    fragment(topo, rng.choice(OCCUPANCIES), rng.randint(0, 10**6))
    g = topo.nodes[0].gpus_total
    pod_gpus = rng.choice([g, g // 2, 2])
    tp = rng.choice([d for d in (2, 4, 8, 16) if d <= 2 * g])
    cp, ep = rng.choice([(1, 1), (1, 1), (2, 1), (1, 2), (1, 4)])
    pp, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4])
    shape = JobShape("small", pod_gpus, tp, pp, dp, cp=cp, ep=ep)
    world = tp * cp * ep * pp * dp
    if world % pod_gpus or not 2 <= world // pod_gpus <= 16 or world > topo.gpus_free:
        return None
    return topo, shape.gang(rng.choice(RANK_ORDERS + ("auto",)))
