"""`meshfit place`: place one job manifest on a cluster file and show the rank layout and its cost.

Exit codes (DESIGN.md): 0 placed, 3 unschedulable (with the reason), 2 bad input (one line).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from scheduler.cli.common import (
    EXIT_UNSCHEDULABLE, OutputFormat, OutputOption, console, fail, names_column, print_document, print_table,
)
from scheduler.placement.jobs import AXES, JobSpecError

if TYPE_CHECKING:
    from scheduler.placement.result import Placement
    from topology.model import ClusterTopology

ClusterOption = typer.Option(..., "--cluster", help="NodeList or List (Nodes + Pods) file, JSON or YAML.")
JobOption = typer.Option(..., "--job", help="PyTorchJob, JobSet, TrainJob, Volcano Job or Indexed Job manifest.")
PolicyOption = typer.Option("meshfit", "--policy", help="Placement policy (meshfit, first-fit, kueue-tas, ...).")
ExplainOption = typer.Option(
    False, "--explain", help="Also say why: free GPUs and pod slots per level, the binding constraint, "
                             "and the chosen layout against the runner-up per axis.")
ConfigOption = typer.Option(None, "--config", help="Topology config (YAML/JSON): link overrides, levels.")


def _load_cluster(cluster: Path, config: Path | None) -> ClusterTopology:
    """The cluster topology, or a one-line error (exit 2)."""
    try:
        from topology.loaders import load_cluster
    except ImportError:  # pragma: no cover - the loaders ship with the topology package
        fail("topology loaders are not installed")
    from topology.model import TopologyError

    try:
        return load_cluster(cluster, config)
    except (TopologyError, OSError, ValueError) as exc:
        fail(str(exc))


def _ranges(ranks: list[int]) -> str:
    """`0-7` style text for a sorted run of ranks (comma-separated runs)."""
    runs: list[str] = []
    start = prev = ranks[0]
    for rank in ranks[1:] + [None]:  # type: ignore[list-item]
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return ",".join(runs)


def render_table(placement: Placement) -> None:
    """Rich tables: pods (node, ranks), then per-axis degree, tier and seconds, total and lower bound."""
    gang = placement.gang
    console.print(f"[bold]{gang.key}[/bold] {placement.status} by {placement.policy} "
                  f"(world {gang.world_size}, {gang.parallelism}, order {placement.rank_order})")
    pods = Table("pod", title="pods")
    names_column(pods, "name", [pod.name for pod in gang.pods])
    names_column(pods, "node", list(placement.pod_nodes))
    pods.add_column("ranks", overflow="fold")
    for pod in gang.pods:
        pods.add_row(str(pod.index), pod.name, placement.pod_nodes[pod.index], _ranges(placement.pod_ranks(pod.index)))
    print_table(pods)
    cost = placement.cost
    assert cost is not None
    axes = Table("axis", "degree", "tier", "seconds/step", title="communication cost")
    for axis in AXES:
        axes.add_row(axis, str(gang.parallelism.degree(axis)), cost.tier_by_axis[axis], f"{cost.by_axis[axis]:.6f}")
    axes.add_row("total", "", "", f"{cost.step_comm_seconds:.6f}")
    axes.add_row("lower bound", "", "", f"{cost.lower_bound_seconds:.6f}")
    print_table(axes)


def _difference(chosen: float, other: float) -> str:
    """`tie` for equal predicted seconds, else the signed difference (runner-up minus chosen)."""
    from scheduler.placement.explain_layout import tied

    return "tie" if tied(chosen, other) else f"{other - chosen:+.6f}"


def explain_tables(report: dict, placed: bool) -> None:
    """Rich view of `explain_report`: summary, best domains per level, chosen vs runner-up per axis."""
    if placed:  # an unschedulable gang's summary is the reason already printed
        console.print(report["summary"], highlight=False)
    else:
        console.print(f"binding constraint: {report['binding_constraint']}", highlight=False)
    levels = Table("level", "domain", "free GPUs", f"pod slots ({report['gpus_per_pod']} GPUs)", "fits",
                   title=f"best domains per level (the gang needs {report['pods']} pod slots)")
    for row in report["levels"]:
        for i, best in enumerate(row["best"]):
            label = f"{row['level']} ({row['fitting_domains']}/{row['domains']} fit)" if i == 0 else ""
            levels.add_row(label, best["domain"], f"{best['gpus_free']}/{best['gpus_total']}",
                           str(best["pod_slots"]), "yes" if best["fits"] else "no")
    print_table(levels)
    if report["reservations"]:
        console.print("reservations holding GPUs: " + ", ".join(
            f"{key} ({gpus})" for key, gpus in report["reservations"].items()), highlight=False)
    comparison = report.get("comparison")
    if not comparison:
        return
    chosen, other = comparison["chosen"], comparison["runner_up"]
    if other is None:
        console.print(f"runner-up: none ({comparison['excluded']})", highlight=False)
        return
    title = (f"chosen {chosen['level']} {chosen['domain']} vs runner-up {other['level']} {other['domain']} "
             f"({comparison['excluded']})")
    axes = Table("axis", "chosen s/step", "tier", "runner-up s/step", "tier", "runner-up - chosen", title=title)
    for axis in AXES:
        a, b = chosen["by_axis"][axis], other["by_axis"][axis]
        axes.add_row(axis, f"{a:.6f}", chosen["tier_by_axis"][axis], f"{b:.6f}", other["tier_by_axis"][axis],
                     _difference(a, b))
    a, b = chosen["step_comm_seconds"], other["step_comm_seconds"]
    axes.add_row("total", f"{a:.6f}", "", f"{b:.6f}", "", _difference(a, b))
    print_table(axes)
    console.print(f"why: {comparison['why']}", highlight=False)


def _report(gang, topo, policy: str, placement) -> dict:
    from scheduler.placement.explain import explain_report
    from scheduler.placement.explain_layout import compare_with_runner_up

    comparison = compare_with_runner_up(gang, topo, policy, placement) if placement.placed else None
    return explain_report(gang, topo, placement, comparison)


def _check_policy_limits(policy: str, gang, topo: ClusterTopology) -> None:
    """Exit 2 when the policy cannot take an instance this size (`instance_too_large`), naming another policy."""
    from scheduler.placement.policy import get_policy

    too_large = getattr(get_policy(policy), "instance_too_large", None)
    why = too_large(gang, topo) if too_large is not None else None
    if why:
        fail(f"{why}: --policy {policy} is for small instances; use another policy (e.g. --policy meshfit)")


def place_command(
    cluster: Path = ClusterOption,
    job: Path = JobOption,
    policy: str = PolicyOption,
    explain_flag: bool = ExplainOption,
    config: Path = ConfigOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Place a job's whole gang (or nothing) and print its rank layout and predicted step cost."""
    from scheduler.cli.place_tie import tie_line
    from scheduler.cli.place_warnings import job_warnings
    from scheduler.handoff.manifests import in_file, read_job
    from scheduler.placement.engine import place
    from scheduler.placement.level_check import check_levels

    try:
        manifest, gang = read_job(job)
    except JobSpecError as exc:
        fail(str(exc))
    topo = _load_cluster(cluster, config)
    try:
        gang, level_warnings = check_levels(gang, topo)
    except JobSpecError as exc:
        fail(in_file(job, str(exc)))
    try:
        _check_policy_limits(policy, gang, topo)
        placement = place(gang, topo, policy)
        report = _report(gang, topo, policy, placement) if explain_flag else None
    except (JobSpecError, ValueError) as exc:
        fail(str(exc))
    # only once the input is good: bad input stays one line
    warnings = [in_file(job, w) for w in level_warnings] + job_warnings(manifest)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if output != OutputFormat.table:
        document = {**placement.to_json(), "warnings": warnings}
        if report is not None:
            document["explain"] = report
        print_document(document, output)
    else:
        if placement.placed:
            render_table(placement)
            line = tie_line(gang, topo, placement)
            if line:
                console.print(line, soft_wrap=True)
        else:
            console.print(f"[bold]{gang.key}[/bold] unschedulable by {placement.policy}: {placement.reason}")
        if report is not None:
            explain_tables(report, placement.placed)
    if not placement.placed:
        raise typer.Exit(EXIT_UNSCHEDULABLE)


def register(app: typer.Typer) -> None:
    """Add `meshfit place` to the CLI."""
    app.command("place")(place_command)
