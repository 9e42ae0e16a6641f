"""`meshfit demo`: the whole path on one machine — a generated cluster, a 3D-parallel job placed by
meshfit next to `kueue-tas` and `volcano-hypernode`, and the job trained locally with the layout meshfit chose."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, names_column, print_document, print_table

DEMO_PRESET = "hgx-h100"
DEMO_NODES = 8
DEMO_USED_FRACTION = 0.7
DEMO_MODEL = "params=1.3e9,layers=24,hidden=2048,seq=2048,micro-batch=1,global-batch=64"
COMPARED_POLICIES = ("meshfit", "kueue-tas", "volcano-hypernode")


def demo_gang():
    """The example job: 4 pods x 2 GPUs, tp=2 pp=2 dp=2, Megatron rank order."""
    from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot

    return Gang("default", "demo-3d", tuple(PodSlot(i, f"demo-3d-{i}", 2) for i in range(4)),
                Parallelism(tp=2, pp=2, dp=2), model=ModelShape.parse(DEMO_MODEL))


def place_with_each_policy(gang, topo) -> tuple[dict[str, Any], list[str]]:
    """Placements by every compared policy that is installed, and notes for those skipped."""
    from plugins.policies import POLICIES
    from scheduler.placement.engine import place

    placements, notes = {}, []
    for name in COMPARED_POLICIES:
        if name not in POLICIES:
            notes.append(f"policy {name!r} is not installed; skipped")
            continue
        placements[name] = place(gang, topo, name)
    return placements, notes


def comparison_table(placements: dict[str, Any]) -> Table:
    """Each policy's nodes (one a line, never cut), tiers and predicted seconds per step."""
    table = Table(title="predicted communication per training step")
    names_column(table, "policy", list(placements))
    names_column(table, "nodes", [n for p in placements.values() for n in p.pod_nodes])
    for header in ("tp tier", "pp tier", "dp tier", "comm s/step", "lower bound"):
        table.add_column(header, overflow="fold")
    for name, placement in placements.items():
        if not placement.placed:
            table.add_row(name, "unschedulable (see the note below)", "", "", "", "", "")
            continue
        cost = placement.cost
        table.add_row(name, "\n".join(dict.fromkeys(placement.pod_nodes)), cost.tier_by_axis["tp"],
                      cost.tier_by_axis["pp"], cost.tier_by_axis["dp"], f"{cost.step_comm_seconds:.6f}",
                      f"{cost.lower_bound_seconds:.6f}")
    return table


def demo_command(
    steps: int = typer.Option(8, "--steps", min=1, help="Training steps to run locally."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated cluster and of the model."),
    output: OutputFormat = OutputOption,
) -> None:
    """Generate a small cluster, place a tp=2 pp=2 dp=2 job, compare with the baselines, and train it locally."""
    from scheduler.cli.place_cmd import render_table
    from scheduler.cli.runtime_cmd import _import_runtime, _runtime_errors, print_run_summary, run_with_progress
    from topology.generator import generate_cluster

    _import_runtime()
    from plugins.handoffs.local_runtime.worker import TrainOptions

    topo = generate_cluster(DEMO_PRESET, DEMO_NODES, seed, DEMO_USED_FRACTION)
    gang = demo_gang()
    placements, notes = place_with_each_policy(gang, topo)
    chosen = placements.get("meshfit") or next(iter(placements.values()), None)
    if chosen is None or not chosen.placed:
        fail(f"the demo job did not fit the generated cluster: {chosen.reason if chosen else 'no policy'}", 3)
    table_mode = output == OutputFormat.table
    if table_mode:
        console.print(f"[bold]cluster[/bold]: {DEMO_NODES} x {DEMO_PRESET} nodes, {topo.gpus_free} GPUs free "
                      f"(levels {' > '.join(level.name for level in topo.levels)})")
        render_table(chosen)
        print_table(comparison_table(placements))
        for note in notes + [f"{n} unschedulable: {p.reason}" for n, p in placements.items() if not p.placed]:
            console.print(f"note: {note}")
    try:
        result = run_with_progress(chosen, TrainOptions(steps=steps, seed=seed), table_mode)
    except _runtime_errors() as exc:
        fail(str(exc), code=1)
    if table_mode:
        print_run_summary(result, output)
        return
    print_document({"cluster": {"preset": DEMO_PRESET, "nodes": DEMO_NODES, "gpus_free": topo.gpus_free},
                "placements": {name: p.to_json() for name, p in placements.items()},
                "notes": notes, "run": result.to_json()}, output)


def register(app: typer.Typer) -> None:
    """Add `meshfit demo` to the CLI."""
    app.command("demo")(demo_command)
