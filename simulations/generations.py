"""The generation example: HGX H100 with a 4:1 spine vs GB200 NVL72, time and cost to train a stated model mix.

    python -m simulations.generations --out-dir out/generations

runs `meshfit plan` (`simulations.planner.run_plan`, policy meshfit) on the two candidates of
`simulations/examples/generations/` and the model mix `model-mix.csv` there (every job gives its model and its
steps, all submitted at once), then writes, next to the plan's own files:

- `generations.png`: time to train and cost to train side by side, and per job type the step time split into
  compute and exposed communication on each candidate;
- `generations.md`: the numbers behind it, each traceable: FLOPs per step (6 N tokens + 12 L h s tokens), the
  GPU's dense BF16 peak (topology.hardware), MFU, the pipeline bubble, compute = FLOPs / (GPUs x peak x MFU)
  x bubble, the cost model's communication on the candidate's layout, step = compute + (1 - overlap) comm.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLE_DIR = Path(__file__).parent / "examples" / "generations"
CANDIDATES = ("h100-spine-4to1.yaml", "gb200-nvl72.yaml")
MIX = "model-mix.csv"


def job_breakdown(workload: Any, candidate_files: list[Path]) -> list[dict[str, Any]]:
    """Per job type and candidate: FLOPs, peak, compute, communication (ideal layout) and step seconds."""
    from scheduler.placement.steptime import StepTimeModel, flops_per_step
    from simulations.cluster import build_cluster
    from simulations.planner import load_candidate
    from simulations.speed import RunSpeed
    from simulations.config import RuntimeModel
    from simulations.jobstate import RunJob
    from simulations.workload import make_gang

    rows: list[dict[str, Any]] = []
    kinds = {job.job_id.rsplit("-", 1)[0]: job for job in workload.jobs}
    for path in candidate_files:
        candidate, spec = load_candidate(path)
        topo = build_cluster(spec, fast=False)
        speed = RunSpeed(RuntimeModel(), spec.hardware(topo), topo, spec.mfu)
        per_node = max(n.gpus_total for n in topo.nodes)
        for kind, job in kinds.items():
            gang = make_gang(job, per_node)
            rj = RunJob(job, gang, (0, 0, 0))
            speed.prepare(rj)
            comm = (rj.ideal / job.steps - rj.compute) / (1.0 - speed.steptime.overlap)
            rows.append({"candidate": spec.label(), "job": kind, "gpus": job.gpus, "steps": job.steps,
                         "flops_per_step": flops_per_step(gang.model), "gpu": speed.hardware.name,
                         "peak_tflops": speed.hardware.dense_bf16_tflops, "mfu": speed.steptime.mfu,
                         "compute_s": rj.compute, "comm_lower_bound_s": comm,
                         "ideal_hours": rj.ideal / 3600.0})
    return rows


def plot(path: Path, ranked: list[dict[str, Any]], breakdown: list[dict[str, Any]]) -> None:
    """Time and cost to train per candidate, and each job type's step split into compute and communication."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    names = [f"{row['candidate']}\n({row['gpu']}, {row['gpus']} GPUs)" for row in ranked]
    for ax, key, title, unit in ((axes[0], "time_to_train_hours", "time to train the mix", "hours"),
                                 (axes[1], "cost_to_train", "cost to train the mix", "price units")):
        ax.bar(range(len(names)), [row[key] for row in ranked], color=["tab:blue", "tab:orange"][:len(names)])
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
    jobs = sorted({row["job"] for row in breakdown})
    candidates = list(dict.fromkeys(row["candidate"] for row in breakdown))
    width = 0.8 / len(candidates)
    for offset, candidate in enumerate(candidates):
        mine = {row["job"]: row for row in breakdown if row["candidate"] == candidate}
        xs = [i + offset * width for i in range(len(jobs))]
        compute = [mine[j]["compute_s"] for j in jobs]
        comm = [0.5 * mine[j]["comm_lower_bound_s"] for j in jobs]
        axes[2].bar(xs, compute, width, label=f"{candidate}: compute", alpha=0.9)
        axes[2].bar(xs, comm, width, bottom=compute, label=f"{candidate}: exposed comm", alpha=0.5, hatch="//")
    axes[2].set_xticks([i + 0.4 - width / 2 for i in range(len(jobs))], jobs, fontsize=8)
    axes[2].set_title("step time at the ideal layout, per job type")
    axes[2].set_ylabel("seconds per step")
    axes[2].legend(fontsize=7)
    fig.suptitle("HGX H100 (4:1 spine) vs GB200 NVL72 on the same model mix (simulations/examples/generations)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(ranked: list[dict[str, Any]], breakdown: list[dict[str, Any]]) -> str:
    """The example's numbers as two markdown tables."""
    lines = ["| rank | candidate | GPU | GPUs | time to train (h) | cost to train | price/GPU-h |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rank']} | {r['candidate']} | {r['gpu']} | {r['gpus']} | {r['time_to_train_hours']:.2f} | "
              f"{r['cost_to_train']:,.0f} | {r['price_per_gpu_hour']} |" for r in ranked]
    lines += ["", "| candidate | job | GPUs | steps | FLOPs/step | peak TFLOP/s | MFU | compute s/step | "
              "comm lower bound s/step | ideal hours |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {b['candidate']} | {b['job']} | {b['gpus']} | {b['steps']:g} | {b['flops_per_step']:.3e} | "
              f"{b['peak_tflops']:g} | {b['mfu']:g} | {b['compute_s']:.3f} | {b['comm_lower_bound_s']:.3f} | "
              f"{b['ideal_hours']:.2f} |" for b in breakdown]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the example; return the plan document."""
    from simulations.config import SimConfig
    from simulations.outdir import prepare_out_dir
    from simulations.planner import run_plan
    from simulations.traces import load_csv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    prepare_out_dir(args.out_dir, args.overwrite)
    files = [EXAMPLE_DIR / name for name in CANDIDATES]
    document = run_plan(files, EXAMPLE_DIR / MIX, None, 0.9, 1.0, "meshfit", SimConfig(), 1, None, args.out_dir)
    breakdown = job_breakdown(load_csv(EXAMPLE_DIR / MIX), files)
    plot(args.out_dir / "generations.png", document["candidates"], breakdown)
    (args.out_dir / "generations.md").write_text(markdown(document["candidates"], breakdown), encoding="utf-8")
    print(markdown(document["candidates"], breakdown))
    return document


if __name__ == "__main__":
    main()
