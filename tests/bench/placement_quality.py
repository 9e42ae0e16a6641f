"""Placement quality study: `meshfit` vs `optimal` on small instances, and vs the baselines on the presets.

Run the full study (prints two tables and writes JSON when given a path):

    python tests/bench/placement_quality.py [--small 200] [--seeds 3] [--presets a,b] [--json out.json]

Small instances: <= 16 nodes with random partial occupancy, drawn from hand-shaped spine/rack/NVLink
clusters (with and without spine oversubscription) and from every preset's labels (Topograph old and
new keys, NVIDIA clique, GKE, AWS), jobs of <= 12 pods with random tp/pp/dp(/cp).  Ratio = meshfit's
predicted step time / optimal's; only instances optimal proved are counted.
Presets (see `placement_preset_study`): preset x fabric (non-blocking, 2:1, 4:1 above the leaf) x
fragmented occupancy (30/50/70%) x job shape x rank order; ratio = meshfit / baseline (< 1 means
meshfit is faster): median, p90, min and the share better / equal / worse.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from plugins.policies import get_policy  # noqa: E402
from scheduler.placement.engine import place  # noqa: E402
from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot  # noqa: E402
from tests.placement.placement_builders import make_cluster  # noqa: E402
from tests.bench.placement_preset_study import (  # noqa: E402
    PRESETS, hard_small_instance, markdown_table, run_grid, summarize,
)
from topology.generator import generate_cluster  # noqa: E402

MODEL = ModelShape(params=70e9, layers=80, hidden=8192, seq=4096, micro_batch=1, global_batch=512)


def make_job(tp: int, pp: int, dp: int, gpus_per_pod: int, cp: int = 1, order: str = "tp-cp-ep-dp-pp") -> Gang:
    """A gang of world / gpus_per_pod pods with the given degrees and the study's 70B model."""
    par = Parallelism(tp=tp, cp=cp, pp=pp, dp=dp)
    pods = par.world_size // gpus_per_pod
    return Gang("study", f"tp{tp}-cp{cp}-pp{pp}-dp{dp}", tuple(PodSlot(i, f"p{i}", gpus_per_pod) for i in range(pods)),
                par, order, MODEL)


def small_instance(rng: random.Random):
    """A <= 16-node cluster with random occupancy and a job of <= 12 pods that fits it (or None)."""
    if rng.random() < 0.5:
        racks, nodes = rng.choice([(2, 4), (4, 4), (2, 8), (4, 2), (3, 4)])
        gpus = rng.choice([4, 8])
        total = racks * nodes
        used = {i: rng.choice([0, gpus // 2, gpus]) for i in range(total) if rng.random() < 0.4}
        topo = make_cluster(racks=racks, nodes=nodes, gpus=gpus, used=used,
                            spine_oversubscription=rng.choice([1.0, 2.0, 4.0]),
                            nvlink_nodes=rng.choice([0, 0, 2, 4]) if gpus == 4 else 0)
    else:
        preset = rng.choice(PRESETS)
        topo = generate_cluster(preset, rng.randint(6, 16), seed=rng.randint(0, 10**6), used_fraction=rng.choice([0.2, 0.4]))
    g = max(n.gpus_total for n in topo.nodes)
    pod_gpus = rng.choice([g, g // 2])
    tp = rng.choice([d for d in (2, 4, 8, 16) if d % pod_gpus == 0 or pod_gpus % d == 0])
    pp, dp = rng.choice([1, 2, 4]), rng.choice([1, 2, 3, 4])
    world = tp * pp * dp
    if world % pod_gpus or world // pod_gpus > 12 or world > topo.gpus_free:
        return None
    return topo, make_job(tp, pp, dp, pod_gpus, order=rng.choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "auto"]))


def optimal_study(count: int, seed: int = 0, instance=None) -> dict:
    """Ratios meshfit / optimal over `count` solvable small instances (drawn by `instance`, default `small_instance`)."""
    instance_of = instance or small_instance
    rng = random.Random(seed)
    optimal = get_policy("optimal")
    ratios: list[float] = []
    unproven = attempts = 0
    while len(ratios) < count and attempts < count * 20:
        attempts += 1
        drawn = instance_of(rng)
        if drawn is None:
            continue
        topo, gang = drawn
        ours, best = place(gang, topo, "meshfit"), place(gang, topo, optimal)
        if not (ours.placed and best.placed):
            continue
        if not optimal.last_proven:
            unproven += 1
            continue
        ratios.append(ours.cost.step_comm_seconds / best.cost.step_comm_seconds)
    return summarize_optimal(ratios, unproven)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def summarize_optimal(ratios: list[float], unproven: int) -> dict:
    """Distribution of meshfit / optimal ratios."""
    within = sum(r <= 1.05 for r in ratios) / len(ratios) if ratios else 0.0
    return {"instances": len(ratios), "unproven_skipped": unproven, "within_5pct": within,
            "exact": sum(r <= 1 + 1e-9 for r in ratios) / max(len(ratios), 1),
            "median": _quantile(ratios, 0.5) if ratios else None, "p90": _quantile(ratios, 0.9) if ratios else None,
            "p99": _quantile(ratios, 0.99) if ratios else None, "max": max(ratios) if ratios else None}


def _print_small(title: str, small: dict) -> None:
    print(title)
    print("  " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in small.items()))


def main(argv: list[str] | None = None) -> None:
    """Run both studies and print (and optionally save) the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    small = optimal_study(args.small)
    _print_small("meshfit / optimal on <=16-node instances", small)
    fragmented = optimal_study(args.small, instance=hard_small_instance)
    _print_small("meshfit / optimal on <=16-node fragmented, oversubscribed instances (2/4-GPU pods, cp/ep)", fragmented)
    records = run_grid(args.seeds, presets=tuple(args.presets.split(",")))
    for keys in (("preset", "fabric", "shape"), ("preset", "fabric"), ("pods", "fabric"), ("occupancy",), ("order",),
                 ("fabric",)):
        print(f"\nmeshfit / baseline predicted step time by {' x '.join(keys)} (lower is better)\n")
        print(markdown_table(summarize(records, keys), keys))
    if args.json:
        args.json.write_text(json.dumps({"optimal": small, "optimal_fragmented": fragmented, "records": records}, indent=2))


if __name__ == "__main__":
    main()
