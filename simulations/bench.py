"""Simulator throughput benchmark: `python -m simulations.bench --jobs 100000 --nodes 2048 --policy meshfit`.

Prints wall and CPU time (CPU time is the fair number on a shared machine), events, events per second and placement attempts for one run of a synthetic
Kalos-calibrated workload on an `hgx-h100` cluster (2,048 nodes = 16,384 GPUs by default).
"""

from __future__ import annotations

import argparse
import json
import time

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import SimConfig
from simulations.simulator import Simulator
from simulations.synthetic import generate


def benchmark(jobs: int, nodes: int, policy: str, preset: str = "hgx-h100", seed: int = 0,
              load: float = 0.9) -> dict:
    """Run once and return the timing numbers."""
    topo = build_cluster(ClusterSpec(preset, nodes))
    workload = generate(jobs, topo.gpus_total, seed=seed, load=load)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = Simulator(topo, workload, policy, SimConfig(seed=seed)).run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return {"policy": policy, "jobs": jobs, "gpus": topo.gpus_total, "wall_seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "events_per_cpu_second": round(result.events / cpu, 1),
            "events": result.events, "events_per_second": round(result.events / wall, 1),
            "placement_attempts": result.details["placement_attempts"],
            "placement_failures": result.details["placement_failures"],
            "placements_skipped": result.details["placements_skipped"],
            "completed": result.summary["completed"], "utilization": result.summary["utilization"]}


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--preset", default="hgx-h100")
    parser.add_argument("--policy", action="append")
    parser.add_argument("--load", type=float, default=0.9)
    args = parser.parse_args()
    for policy in args.policy or ["meshfit"]:
        print(json.dumps(benchmark(args.jobs, args.nodes, policy, args.preset, load=args.load)), flush=True)


if __name__ == "__main__":
    main()
