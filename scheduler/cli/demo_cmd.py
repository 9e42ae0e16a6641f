"""`meshfit demo`: why topology-aware placement matters, on one machine.

A fragmented HGX H100 cluster from meshfit's own generator (`meshfit cluster generate --used-fraction`), regenerated
with the next seed until no host has room for the whole job (so the job must span hosts: the choice is made on the
cluster alone, never on how any policy does); a tp=2 pp=2 dp=2 job of one-GPU pods placed by meshfit, `kueue-tas`
and `volcano-hypernode`, with each one's predicted step communication; a PNG of the topology tree with each policy's
ranks drawn on it; then the job trained locally (torch.distributed, gloo) on the layout meshfit chose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, names_column, print_document, print_table

DEMO_PRESET = "hgx-h100"
DEMO_NODES = 12
DEMO_USED_FRACTION = 0.8
"""The generated cluster: 12 HGX H100 nodes with 80% of the GPUs held by other pods, scattered."""
DEMO_PODS, DEMO_GPUS_PER_POD = 8, 1
DEMO_PARALLELISM = "tp=2,pp=2,dp=2"
DEMO_MODEL = "params=1.3e9,layers=24,hidden=2048,seq=2048,micro-batch=1,global-batch=64"
"""The job: 8 one-GPU pods of a 1.3B-parameter model, 3D-parallel (the traffic volumes the cost model prices)."""
SEEDS_TRIED = 100
"""Seeds tried (from --seed on) for a cluster where no host holds the whole job."""
DEFAULT_PICTURE = Path("meshfit-demo.png")
"""Where the picture goes without --picture: the current folder."""
COMPARED_POLICIES = ("meshfit", "kueue-tas", "volcano-hypernode")
"""The policies placed side by side, meshfit first (the others are compared with it)."""


def demo_gang():
    """The example job: 8 one-GPU pods, tp=2 pp=2 dp=2, Megatron rank order (tensor-parallel pairs span pods)."""
    from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot

    return Gang("default", "demo-3d", tuple(PodSlot(i, f"demo-3d-{i}", DEMO_GPUS_PER_POD) for i in range(DEMO_PODS)),
                Parallelism.parse(DEMO_PARALLELISM), model=ModelShape.parse(DEMO_MODEL))


def spanning_cluster(first_seed: int, gpus_needed: int) -> tuple[int, Any]:
    """(seed, topology) of the first generated cluster from `first_seed` where the job fits in total but on no
    single host; the policies are never consulted.  ValueError when none of `SEEDS_TRIED` seeds gives one."""
    from topology.generator import generate_cluster

    for seed in range(first_seed, first_seed + SEEDS_TRIED):
        topo = generate_cluster(DEMO_PRESET, DEMO_NODES, seed, DEMO_USED_FRACTION)
        if topo.gpus_free >= gpus_needed and max(node.gpus_free for node in topo.nodes) < gpus_needed:
            return seed, topo
    raise ValueError(f"no seed in {first_seed}-{first_seed + SEEDS_TRIED - 1} generates a cluster the demo job "
                     "must span hosts on")


def generate_command(seed: int) -> str:
    """The `meshfit cluster generate` command that writes the demo's cluster."""
    return (f"meshfit cluster generate --preset {DEMO_PRESET} --nodes {DEMO_NODES} "
            f"--used-fraction {DEMO_USED_FRACTION} --seed {seed} --to demo-cluster.json")


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


def _versus(placement, reference) -> str:
    """Predicted step communication relative to meshfit's (`1.00x` = the same)."""
    if reference is None or not reference.placed or not placement.placed:
        return ""
    return f"{placement.cost.step_comm_seconds / reference.cost.step_comm_seconds:.2f}x"


def _node_lines(placement) -> list[str]:
    """`node (pods on it)` for each node the placement uses, in pod order."""
    nodes = list(dict.fromkeys(placement.pod_nodes))
    return [f"{node} ({placement.pod_nodes.count(node)})" for node in nodes]


def comparison_table(placements: dict[str, Any]) -> Table:
    """Each policy's nodes (one a line, never cut), tiers, predicted seconds per step and the ratio to meshfit."""
    table = Table(title="predicted communication per training step")
    names_column(table, "policy", list(placements))
    names_column(table, "nodes (pods)", [line for p in placements.values() if p.placed for line in _node_lines(p)])
    for header in ("tp tier", "pp tier", "dp tier", "comm s/step", "vs meshfit", "lower bound"):
        table.add_column(header, no_wrap=True)
    reference = placements.get("meshfit")
    for name, placement in placements.items():
        if not placement.placed:
            table.add_row(name, "unschedulable (see the note below)", "", "", "", "", "", "")
            continue
        cost = placement.cost
        table.add_row(name, "\n".join(_node_lines(placement)), cost.tier_by_axis["tp"], cost.tier_by_axis["pp"],
                      cost.tier_by_axis["dp"], f"{cost.step_comm_seconds:.6f}", _versus(placement, reference),
                      f"{cost.lower_bound_seconds:.6f}")
    return table


def _print_scenario(seed: int, first_seed: int, topo, gang) -> None:
    most = max(node.gpus_free for node in topo.nodes)
    console.print(f"[bold]cluster[/bold]: {DEMO_NODES} x {DEMO_PRESET} nodes with {DEMO_USED_FRACTION:.0%} of the "
                  f"GPUs held by other pods (levels {' > '.join(level.name for level in topo.levels)}): "
                  f"{topo.gpus_free} GPUs free, at most {most} on one host", highlight=False)
    console.print(f"  seed {seed}: the first from {first_seed} where no host has room for the job's "
                  f"{gang.world_size} GPUs, so it must span hosts; the same file: {generate_command(seed)}",
                  highlight=False, soft_wrap=True)
    console.print(f"[bold]job[/bold]: {gang.key}, {len(gang.pods)} pods x {gang.gpus_per_pod} GPU, "
                  f"{DEMO_PARALLELISM} (rank order {gang.rank_order}): each tensor-parallel pair spans two pods",
                  highlight=False)


def _write_picture(topo, placements: dict[str, Any], picture: Path) -> Path:
    from scheduler.cli.demo_picture import write_picture

    try:
        if picture.parent != Path(""):
            picture.parent.mkdir(parents=True, exist_ok=True)
        write_picture(topo, placements, picture)
    except OSError as exc:
        fail(f"cannot write the picture {picture}: {exc.strerror or exc}")
    return picture.resolve()


def demo_command(
    steps: int = typer.Option(8, "--steps", min=1, help="Training steps to run locally."),
    seed: int = typer.Option(0, "--seed", min=0, help="First seed tried for the generated cluster (the demo takes the "
                                                      "first one where the job must span hosts); also the model's."),
    picture: Path = typer.Option(DEFAULT_PICTURE, "--picture",
                                 help="PNG of the topology tree with each policy's ranks on it (replaced if present)."),
    output: OutputFormat = OutputOption,
) -> None:
    """Place a job that must span hosts on a fragmented cluster with meshfit and two baselines, draw the three
    layouts, and train the job locally on meshfit's."""
    from scheduler.cli.place_cmd import render_table
    from scheduler.cli.runtime_cmd import _import_runtime, _runtime_errors, print_run_summary, run_with_progress

    _import_runtime()
    from plugins.handoffs.local_runtime.worker import TrainOptions

    gang = demo_gang()
    try:
        cluster_seed, topo = spanning_cluster(seed, gang.world_size)
    except ValueError as exc:
        fail(str(exc))
    placements, notes = place_with_each_policy(gang, topo)
    chosen = placements.get("meshfit") or next(iter(placements.values()), None)
    if chosen is None or not chosen.placed:
        fail(f"the demo job did not fit the generated cluster: {chosen.reason if chosen else 'no policy'}", 3)
    drawn = _write_picture(topo, placements, picture)
    table_mode = output == OutputFormat.table
    if table_mode:
        _print_scenario(cluster_seed, seed, topo, gang)
        render_table(chosen)
        print_table(comparison_table(placements))
        for note in notes + [f"{n} unschedulable: {p.reason}" for n, p in placements.items() if not p.placed]:
            console.print(f"note: {note}")
        console.print(f"[bold]picture[/bold]: {drawn} (the topology tree, each policy's ranks on it)",
                      highlight=False, soft_wrap=True)
    try:
        result = run_with_progress(chosen, TrainOptions(steps=steps, seed=seed), table_mode)
    except _runtime_errors() as exc:
        fail(str(exc), code=1)
    if table_mode:
        print_run_summary(result, output)
        return
    print_document({"cluster": {"preset": DEMO_PRESET, "nodes": DEMO_NODES, "used_fraction": DEMO_USED_FRACTION,
                                "seed": cluster_seed, "gpus_free": topo.gpus_free,
                                "generate": generate_command(cluster_seed)},
                    "placements": {name: p.to_json() for name, p in placements.items()},
                    "picture": str(drawn), "notes": notes, "run": result.to_json()}, output)


def register(app: typer.Typer) -> None:
    """Add `meshfit demo` to the CLI."""
    app.command("demo")(demo_command)
