"""Side-by-side speed of placement policies (issue 21): simulator CPU seconds and in-process placements.

    python tests/bench/policy_speed.py sim --jobs 100000 --repeats 2 [--policies meshfit,kueue-tas]
    python tests/bench/policy_speed.py place [--repeats 5]

`sim`: CPU seconds of `Simulator.run` on a synthetic Kalos-calibrated trace on 2,048 hgx-h100 nodes
(16,384 GPUs), the policies interleaved within each repeat so both see the same machine load; prints
one line per run and, per policy, min / max and the ratio range to the first policy.
`place`: median CPU time of `engine.place` for 64- and 256-GPU gangs (tp=8, pp=2/4, dp from the size) on
a 16,384-GPU hgx-h100 cluster at 60% random occupancy (each call sees the same free GPUs, its caches invalidated
by a pod added and removed), the policies interleaved, `--calls` per measurement, `--repeats` measurements each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scheduler.placement.cost import geometry  # noqa: E402
from scheduler.placement.engine import place  # noqa: E402
from scheduler.placement.jobs import Gang, PodSlot  # noqa: E402
from simulations.cluster import ClusterSpec, build_cluster  # noqa: E402
from simulations.config import SimConfig  # noqa: E402
from simulations.simulator import Simulator  # noqa: E402
from simulations.synthetic import generate  # noqa: E402
from simulations.workload import default_model, infer_parallelism  # noqa: E402
from topology.generator import generate_cluster  # noqa: E402


def sim_seconds(policy: str, jobs: int, nodes: int, seed: int = 0) -> float:
    """CPU seconds of one `Simulator.run` (cluster and workload built outside the timing)."""
    topo = build_cluster(ClusterSpec("hgx-h100", nodes))
    workload = generate(jobs, topo.gpus_total, seed=seed)
    simulator = Simulator(topo, workload, policy, SimConfig(seed=seed))
    started = time.process_time()
    simulator.run()
    return time.process_time() - started


def ratio_table(times: dict[str, list[float]]) -> list[str]:
    """Per policy: min-max seconds and the per-repeat ratio range to the first policy listed last."""
    names = list(times)
    reference = times[names[-1]]
    lines = []
    for name in names:
        ratios = [a / b for a, b in zip(times[name], reference)]
        lines.append(f"{name}: {min(times[name]):.2f}-{max(times[name]):.2f} s "
                     f"(runs {', '.join(f'{t:.2f}' for t in times[name])}); "
                     f"ratio to {names[-1]} {min(ratios):.2f}-{max(ratios):.2f}x")
    return lines


def sim_study(policies: list[str], jobs: int, nodes: int, repeats: int) -> None:
    """Interleaved simulator runs; prints each run and the summary table."""
    times: dict[str, list[float]] = {p: [] for p in policies}
    for repeat in range(repeats):
        for policy in policies:
            seconds = sim_seconds(policy, jobs, nodes)
            times[policy].append(seconds)
            print(f"repeat {repeat} {policy}: {seconds:.2f} s CPU", flush=True)
    print("\n".join(ratio_table(times)))


def sized_gang(gpus: int) -> Gang:
    """A gang of `gpus` GPUs in 8-GPU pods with the simulator's inferred parallelism and model."""
    par = infer_parallelism(gpus)
    pods = tuple(PodSlot(i, f"p{i}", 8) for i in range(gpus // 8))
    return Gang("bench", f"job-{gpus}", pods, par, model=default_model(gpus))


def place_seconds(policy: str, gang: Gang, topo, calls: int) -> float:
    """Mean CPU seconds of one `place` call over `calls` calls.

    Between calls (outside the timing) a 1-GPU pod is added and removed, so the free GPUs end as they were but
    every cache keyed on the cluster's state is invalidated, and the layout prices remembered per job shape are
    forgotten (the same gang on the same free GPUs would otherwise find every layout already priced)."""
    node = topo.nodes[next(n.index for n in topo.nodes if n.gpus_free)].name
    total = 0.0
    for _ in range(calls):
        topo.add_pod("bench/touch", node, 1)
        topo.remove_pod("bench/touch")
        for pricer in geometry(topo).__dict__.get("shared_pricers", {}).values():
            pricer._memo.clear()
            pricer._reports.clear()
        started = time.process_time()
        place(gang, topo, policy, with_ranks=False)
        total += time.process_time() - started
    return total / calls


def place_study(policies: list[str], repeats: int, calls: int) -> None:
    """Interleaved in-process placements of 64 and 256 GPUs on 16,384 GPUs at 60% occupancy."""
    topo = generate_cluster("hgx-h100", 2048, seed=7, used_fraction=0.6)
    for gpus in (64, 256):
        gang = sized_gang(gpus)
        for policy in policies:
            place(gang, topo, policy)  # warm the per-topology caches, as a long-running service would
        times: dict[str, list[float]] = {p: [] for p in policies}
        for _ in range(repeats):
            for policy in policies:
                times[policy].append(place_seconds(policy, gang, topo, calls))
        medians = {p: statistics.median(t) for p, t in times.items()}
        reference = policies[-1]
        for policy in policies:
            spread = f"{min(times[policy]) * 1e3:.3f}-{max(times[policy]) * 1e3:.3f}"
            print(f"{gpus} GPUs {policy}: median {medians[policy] * 1e3:.3f} ms (spread {spread} ms), "
                  f"{medians[policy] / medians[reference]:.2f}x {reference}")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=["sim", "place"])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--policies", default="meshfit,kueue-tas")
    args = parser.parse_args()
    policies = args.policies.split(",")
    if args.study == "sim":
        sim_study(policies, args.jobs, args.nodes, args.repeats)
    else:
        place_study(policies, args.repeats, args.calls)


if __name__ == "__main__":
    main()
