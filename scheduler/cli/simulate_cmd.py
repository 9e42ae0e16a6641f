"""`meshfit simulate` (trace replay, policies side by side) and `meshfit plan` (candidate topologies).

Both are thin: they parse options and hand over to `simulations.session`.  Bad input (unknown
policy, unreadable trace, invalid cluster or candidate) exits 2 with a one-line error.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, print_document, print_table
from simulations.config import Backfill, KueueSlices, QueueOrder, Recovery

RUNTIME_HELP = "Runtime model: share of raw step time that is communication at the ideal placement."


def _settings(backfill: Backfill, queue: QueueOrder, comm_fraction: float, overlap: float, mtbf: float,
              repair: float, checkpoint: float, restart: float, horizon: float | None,
              kueue_slices: KueueSlices = KueueSlices.auto, max_comm_ratio: float | None = None,
              recovery: Recovery = Recovery.restart, spares: float = 0.0, replace: float = 3.0,
              trace_gpu: str = "h100-sxm", mfu: float = 0.4) -> dict:
    return {"backfill": backfill, "queue": queue, "comm_fraction": comm_fraction, "overlap": overlap,
            "trace_gpu": trace_gpu, "mfu": mfu,
            "node_mtbf_hours": mtbf, "repair_hours": repair, "checkpoint_minutes": checkpoint,
            "restart_minutes": restart, "horizon_hours": horizon, "kueue_slices": kueue_slices,
            "max_comm_ratio": max_comm_ratio, "recovery": recovery, "spares": spares, "replace_minutes": replace}


BackfillOption = typer.Option(Backfill.easy, "--backfill", help="easy (reserve the head), none, aggressive.")
QueueOption = typer.Option(QueueOrder.fifo, "--queue", help="Queue order: fifo or priority.")
CommOption = typer.Option(0.2, "--comm-fraction", help=RUNTIME_HELP)
OverlapOption = typer.Option(0.5, "--overlap", help="Share of communication hidden behind compute.")
TraceGpuOption = typer.Option("h100-sxm", "--trace-gpu",
                              help="GPU generation the trace's durations were measured on (h100-sxm, h200, b200, "
                                   "gb200); other clusters' GPUs run trace jobs faster or slower by the peak ratio.")
MfuOption = typer.Option(0.4, "--mfu", help="Model FLOPs utilisation for jobs that give their model and steps.")
MtbfOption = typer.Option(0.0, "--node-mtbf-hours", "--mtbf-hours",
                          help="Mean time between failures per node (0 = none).")
RepairOption = typer.Option(4.0, "--repair-hours", help="Mean node repair time.")
CheckpointOption = typer.Option(30.0, "--checkpoint-minutes", help="Checkpoint interval while running.")
RestartOption = typer.Option(5.0, "--restart-minutes", help="Cost of every restart after a failure.")
RecoveryOption = typer.Option(
    Recovery.restart, "--recovery",
    help="On a node failure: restart the whole gang (Volcano-like), replace-one node at a time (Kueue-like), "
         "or meshfit (every failed node at once, spares first, nearest domain first).")
SparesOption = typer.Option(0.0, "--spares", help="Share of each leaf domain's nodes held back as spares.")
ReplaceOption = typer.Option(3.0, "--replace-minutes", help="Time to bring up the pods of one replacement node.")
HorizonOption = typer.Option(None, "--horizon-hours", help="Stop at this simulated time.")
WorkersOption = typer.Option(None, "--workers", help="Local worker processes (default: one per CPU).")
DaskOption = typer.Option(None, "--dask", help="Run on this Dask scheduler address instead of locally.")
LoadOption = typer.Option(0.9, "--load", help="Synthetic: offered load as a share of the cluster's GPUs.")
MaxCommRatioOption = typer.Option(
    None, "--max-comm-ratio",
    help="Give every gang meshfit.io/max-comm-ratio R: wait rather than start on a layout whose predicted "
         "step communication exceeds R x its lower bound.")
OverwriteOption = typer.Option(False, "--overwrite",
                               help="Use a --out-dir that is not empty: first remove the files a previous "
                                    "simulate or plan run wrote there (without it, a used folder is refused).")
KueueSlicesOption = typer.Option(
    KueueSlices.auto, "--kueue-slices",
    help="Kueue slice annotations (one tp group per slice, inside one domain of the smallest level that holds "
         "it): auto gives them to kueue-tas gangs, all to every policy's gangs, off to none.")


def simulate_command(
    cluster: Path | None = typer.Option(None, "--cluster", help="NodeList / List file of the cluster."),
    preset: str | None = typer.Option(None, "--preset", help="Cluster preset instead of a file."),
    nodes: int = typer.Option(64, "--nodes", help="Nodes of the preset cluster."),
    link: list[str] = typer.Option([], "--link", help="Link override LEVEL.FIELD=VALUE (repeatable)."),
    trace: Path | None = typer.Option(None, "--trace", help="Generic CSV, Gavel .trace, or a directory of them."),
    synthetic: int | None = typer.Option(None, "--synthetic", help="Generate N synthetic LLM-era jobs."),
    load: float = LoadOption,
    arrival_scale: float = typer.Option(1.0, "--arrival-scale", help="Multiply submit times (< 1 = more load)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Use only the first N jobs."),
    max_tp: int = typer.Option(8, "--max-tp", help="Largest inferred tensor-parallel degree (16: 4 GB200 trays)."),
    policy: list[str] = typer.Option(["meshfit"], "--policy", help="Placement policy (repeatable)."),
    seed: list[int] = typer.Option([0], "--seed", help="Seed (repeatable: a sweep over seeds)."),
    backfill: Backfill = BackfillOption, queue: QueueOrder = QueueOption,
    comm_fraction: float = CommOption, overlap: float = OverlapOption,
    trace_gpu: str = TraceGpuOption, mfu: float = MfuOption,
    node_mtbf_hours: float = MtbfOption, repair_hours: float = RepairOption,
    checkpoint_minutes: float = CheckpointOption, restart_minutes: float = RestartOption,
    recovery: Recovery = RecoveryOption, spares: float = SparesOption, replace_minutes: float = ReplaceOption,
    horizon_hours: float | None = HorizonOption,
    kueue_slices: KueueSlices = KueueSlicesOption,
    max_comm_ratio: float | None = MaxCommRatioOption,
    workers: int | None = WorkersOption, dask: str | None = DaskOption,
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots."),
    output: OutputFormat = OutputOption,
    out_dir: Path | None = typer.Option(None, "--out-dir", "--out",
                                        help="Directory for summary.json, details.json, CSVs and PNGs "
                                             "(nothing is written without it); a new or empty folder."),
    overwrite: bool = OverwriteOption,
    legacy_format: OutputFormat | None = typer.Option(None, "--format", hidden=True,
                                                      help="Deprecated spelling of -o."),
) -> None:
    """Replay a trace on a modelled cluster under one or more policies; write summary.json, CSVs, plots."""
    from simulations import session
    from simulations.report import summary_document, write_outputs
    from simulations.runner import sweep_specs
    from simulations.tables import legend_lines, summary_table

    from simulations.outdir import prepare_out_dir

    output = legacy_format or output
    try:
        if out_dir is not None:
            prepare_out_dir(out_dir, overwrite)
        policies = session.check_policies(policy)
        spec = session.cluster_spec(cluster, preset, nodes, session.parse_links(link))
        gpus = session.build_cluster(spec, fast=False).gpus_total
        workload = session.load_workload(trace, synthetic, gpus, seed[0], load, arrival_scale, max_jobs,
                                         max_tp)
        config = session.base_config(seed[0], **_settings(backfill, queue, comm_fraction, overlap, node_mtbf_hours,
                                                          repair_hours, checkpoint_minutes, restart_minutes,
                                                          horizon_hours, kueue_slices, max_comm_ratio,
                                                          recovery, spares, replace_minutes, trace_gpu, mfu))
        specs = sweep_specs([spec], policies, list(dict.fromkeys(seed)), config)
        show = output == OutputFormat.table and session.stdout_is_tty()
        results, wall = session.execute(specs, workload, workers, dask, show)
        meta = {"cluster": spec.label(), "gpus": gpus, "workload": workload.source, "jobs": len(workload.jobs),
                "duration_method": workload.method, "notes": workload.notes, "config": _describe(config)}
        if out_dir is None:
            document = summary_document(results, wall)
        else:
            document = write_outputs(out_dir, results, wall, meta, plots=not no_plots)
    except (session.InputError, OSError) as exc:
        fail(str(exc))
    if output != OutputFormat.table:
        print_document(document, output)
        return
    print_table(summary_table(document, f"{len(workload.jobs)} jobs on {spec.label()} ({gpus} GPUs)"))
    for line in legend_lines():
        console.print(line, highlight=False, markup=False)
    console.print(f"{document['events']} events in {document['wall_seconds']:.2f} s "
                  f"({document['events'] / max(document['wall_seconds'], 1e-9):,.0f} events/s)"
                  + (f"; outputs in {out_dir}" if out_dir is not None else ""))


def _describe(config: object) -> dict:
    from dataclasses import asdict

    return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(config).items()}  # type: ignore[arg-type]


def plan_command(
    candidate: list[Path] = typer.Option(..., "--candidate", help="Candidate topology YAML (repeatable)."),
    workload_file: Path | None = typer.Option(None, "--trace", "--workload",
                                              help="Trace to replay on every candidate (as simulate's --trace)."),
    synthetic: int | None = typer.Option(None, "--synthetic", help="Or N synthetic jobs (load vs the smallest)."),
    load: float = LoadOption,
    arrival_scale: float = typer.Option(1.0, "--arrival-scale", help="Multiply submit times."),
    policy: str = typer.Option("meshfit", "--policy", help="Placement policy used on every candidate."),
    seed: int = typer.Option(0, "--seed", help="Seed."),
    backfill: Backfill = BackfillOption, queue: QueueOrder = QueueOption,
    node_mtbf_hours: float = MtbfOption,
    trace_gpu: str = TraceGpuOption, mfu: float = MfuOption,
    workers: int | None = WorkersOption, dask: str | None = DaskOption,
    out: Path | None = typer.Option(None, "--out-dir", "--out",
                                    help="Directory for plan.json and plots; a new or empty folder."),
    overwrite: bool = OverwriteOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Compare candidate topologies on the same workload; print them ranked (cost to train, else time to train)."""
    from simulations import session
    from simulations.planner import run_plan
    from simulations.outdir import prepare_out_dir
    from simulations.tables import plan_table

    try:
        if out is not None:
            prepare_out_dir(out, overwrite)
        document = run_plan(candidate, workload_file, synthetic, load, arrival_scale, policy,
                            session.base_config(seed, **_settings(backfill, queue, 0.2, 0.5, node_mtbf_hours,
                                                                  4.0, 30.0, 5.0, None, trace_gpu=trace_gpu,
                                                                  mfu=mfu)),
                            workers, dask, out, show_progress=output == OutputFormat.table and session.stdout_is_tty())
    except (session.InputError, OSError) as exc:
        fail(str(exc))
    if output != OutputFormat.table:
        print_document(document, output)
        return
    print_table(plan_table(document["candidates"], document["ranked_by"]))
    if out is not None:
        console.print(f"plan.json and plan.png in {out}")


def register(app: typer.Typer) -> None:
    """Add `meshfit simulate` and `meshfit plan` to the CLI."""
    app.command("simulate")(simulate_command)
    app.command("plan")(plan_command)
