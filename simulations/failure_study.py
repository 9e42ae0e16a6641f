"""ETTR and goodput of the three recovery policies under seeded node-failure traces (RESULTS.md table).

    python -m simulations.failure_study big --seeds 20      # one 1,024-GPU job + small background jobs
    python -m simulations.failure_study mixed --seeds 3     # the synthetic LLM-era mix on a bigger cluster

Every policy places with the same placement policy (meshfit by default) so only recovery differs;
`meshfit` recovery also holds `--spares` of each leaf as spares (the others hold none).  Each seed
draws a new failure trace (the same one for every policy); numbers are means over seeds, with the
range in brackets.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import FailureModel, Recovery, SimConfig
from simulations.jobstate import DONE
from simulations.simulator import Simulator
from simulations.synthetic import generate
from simulations.workload import SimJob, Workload, infer_parallelism

POLICY_LABELS = {Recovery.meshfit: "meshfit (spares + replacement)", Recovery.restart: "restart whole job (Volcano-like)",
                 Recovery.replace_one: "replace one node at a time (Kueue-like)"}
"""Table label of each recovery policy."""


def big_job_workload(days: float, background_gpus: int, seed: int, load: float, gpus: int = 1024) -> Workload:
    """One `gpus`-GPU job of `days` ideal runtime at t=0 plus 1-8 GPU synthetic jobs offering `load` x `background_gpus`."""
    duration = days * 86400.0
    big = SimJob("big", 0.0, duration, gpus, infer_parallelism(gpus))
    jobs = [big]
    count = 1000
    while background_gpus > 0:
        small = generate(count, background_gpus, seed, load, max_gpus=8).jobs
        if small[-1].submit >= duration:
            jobs += [replace(job, job_id=f"bg{i}", parallelism=job.parallelism or infer_parallelism(job.gpus))
                     for i, job in enumerate(small) if job.submit < duration]
            break
        count = int(count * 1.2 * duration / max(small[-1].submit, 1.0)) + 1
    jobs.sort(key=lambda job: job.submit)
    return Workload(jobs, f"{gpus}-GPU job + background", "synthetic")


def mixed_workload(jobs: int, cluster_gpus: int, load: float) -> Workload:
    """The synthetic LLM-era mix (seed 0) with parallelism inferred."""
    workload = generate(jobs, cluster_gpus, 0, load)
    out = [job if job.parallelism else replace(job, parallelism=infer_parallelism(job.gpus)) for job in workload.jobs]
    return Workload(out, workload.source, workload.method)


def run_one(spec: ClusterSpec, workload: Workload, placement: str, failures: FailureModel, seed: int,
            focus: str | None) -> dict[str, float]:
    """One run; ETTR / goodput over the `focus` job (or every completed job) and run-level numbers."""
    sim = Simulator(build_cluster(spec), workload, placement, replace(SimConfig(), failures=failures, seed=seed,
                                                                     samples=20))
    result = sim.run()
    done = [rj for rj in sim.jobs if rj.state == DONE and (focus is None or rj.job.job_id == focus)]
    productive = sum(rj.gpus * rj.productive for rj in done)
    held = sum(rj.held for rj in done)
    since_submit = sum(rj.gpus * (rj.end - rj.job.submit) for rj in done)
    since_start = sum(rj.gpus * (rj.end - rj.first_start) for rj in done)
    return {"ettr": productive / since_submit if since_submit else 0.0,
            "ettr_start": productive / since_start if since_start else 0.0,
            "goodput": productive / held if held else 0.0,
            "failures": result.details["node_failures"], "hits": result.details["jobs_killed"],
            "lost_gpu_h": sum(rj.gpus * rj.lost for rj in done) / 3600.0,
            "hours": max((rj.end - rj.job.submit for rj in done), default=0.0) / 3600.0 if focus else
            result.summary["jct_mean"] / 3600.0,
            "completed": len([rj for rj in sim.jobs if rj.state == DONE]),
            "spares_used": result.details["spares_used"], "wall": result.wall_seconds}


def compare(spec: ClusterSpec, workloads: list[Workload], placement: str, base: FailureModel, spares: float,
            seeds: list[int], focus: str | None) -> dict[Recovery, list[dict[str, float]]]:
    """Every recovery policy on every seed (workload `i` goes with seed `i`, or the single workload with all)."""
    out: dict[Recovery, list[dict[str, float]]] = {}
    for recovery in (Recovery.meshfit, Recovery.replace_one, Recovery.restart):
        failures = replace(base, recovery=recovery, spares=spares if recovery == Recovery.meshfit else 0.0)
        out[recovery] = [run_one(spec, workloads[i % len(workloads)], placement, failures, seed, focus)
                         for i, seed in enumerate(seeds)]
    return out


def _cell(rows: list[dict[str, float]], key: str, digits: int = 3) -> str:
    values = [row[key] for row in rows]
    mean = statistics.fmean(values)
    if len(values) == 1 or max(values) == min(values):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def table(results: dict[Recovery, list[dict[str, float]]], hours_label: str) -> str:
    """The Markdown table of `compare`'s results."""
    lines = [f"| recovery | ETTR | ETTR from first start | goodput | node failures | job hits | lost GPU-h | {hours_label} "
             "| jobs completed | spares used |", "|---" * 10 + "|"]
    for recovery, rows in results.items():
        lines.append(f"| {POLICY_LABELS[recovery]} | {_cell(rows, 'ettr')} | {_cell(rows, 'ettr_start')} | "
                     f"{_cell(rows, 'goodput')} | {_cell(rows, 'failures', 1)} | {_cell(rows, 'hits', 1)} | "
                     f"{_cell(rows, 'lost_gpu_h', 0)} | {_cell(rows, 'hours', 2)} | {_cell(rows, 'completed', 1)} | "
                     f"{_cell(rows, 'spares_used', 1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Command line: `big` or `mixed` scenario, failure and checkpoint settings; prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=["big", "mixed"])
    parser.add_argument("--preset", default="hgx-h100")
    parser.add_argument("--nodes", type=int, default=None, help="default: 136 (big), 512 (mixed)")
    parser.add_argument("--days", type=float, default=14.0, help="big: ideal runtime of the 1,024-GPU job")
    parser.add_argument("--jobs", type=int, default=20000, help="mixed: synthetic jobs")
    parser.add_argument("--load", type=float, default=0.9, help="offered load (big: of the GPUs the big job leaves)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--placement", default="meshfit")
    parser.add_argument("--mtbf-hours", type=float, default=4300.0, help="per node (Meta RSC-1: 5.6 / 1,000 node-days)")
    parser.add_argument("--repair-hours", type=float, default=4.0)
    parser.add_argument("--checkpoint-minutes", type=float, default=30.0)
    parser.add_argument("--restart-minutes", type=float, default=10.0)
    parser.add_argument("--replace-minutes", type=float, default=3.0)
    parser.add_argument("--spares", type=float, default=0.03)
    args = parser.parse_args(argv)
    nodes = args.nodes or (136 if args.scenario == "big" else 512)
    spec = ClusterSpec(args.preset, nodes)
    gpus = build_cluster(spec, fast=False).gpus_total
    seeds = list(range(args.seeds))
    base = FailureModel(args.mtbf_hours, args.repair_hours, args.checkpoint_minutes, args.restart_minutes,
                        replace_minutes=args.replace_minutes)
    started = time.perf_counter()
    if args.scenario == "big":
        workloads = [big_job_workload(args.days, gpus - 1024, seed, args.load) for seed in seeds]
        results = compare(spec, workloads, args.placement, base, args.spares, seeds, "big")
        hours = "job hours (submit to end)"
    else:
        results = compare(spec, [mixed_workload(args.jobs, gpus, args.load)], args.placement, base, args.spares,
                          seeds, None)
        hours = "mean JCT hours"
    print(table(results, hours))
    print(f"\n{spec.label()} ({gpus} GPUs), {len(seeds)} seeds, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
