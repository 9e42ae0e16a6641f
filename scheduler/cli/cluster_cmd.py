"""`meshfit cluster generate|presets`: write realistic NodeLists from presets, list the presets."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, print_json


def _write_nodelist(nodelist: dict[str, Any], output: Path | None) -> None:
    if output is not None and output.suffix in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(nodelist, sort_keys=False)
    else:
        text = json.dumps(nodelist, indent=4) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


def generate(
    preset: str = typer.Option(..., "--preset", help="Preset: hgx-h100, gb200-nvl72, gke-a3, aws-p5."),
    nodes: int = typer.Option(..., "--nodes", help="Number of GPU nodes."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same file)."),
    used_fraction: float = typer.Option(0.0, "--used-fraction", help="Fraction of GPUs held by running pods."),
    unhealthy: int = typer.Option(0, "--unhealthy", help="Nodes made NotReady, cordoned or GPU-tainted."),
    output: Path | None = typer.Option(None, "-o", "--output", help="File to write (.json or .yaml); stdout if omitted."),
) -> None:
    """Write a Kubernetes NodeList (a List with running Pods when --used-fraction > 0)."""
    from topology.generator import generate_nodelist
    from topology.model import TopologyError

    try:
        nodelist = generate_nodelist(preset, nodes, seed, used_fraction, unhealthy)
    except TopologyError as exc:
        fail(str(exc))
    _write_nodelist(nodelist, output)
    if output is not None:
        pods = sum(1 for item in nodelist["items"] if item["kind"] == "Pod")
        print(f"wrote {nodes} {preset} nodes and {pods} running pods to {output}", file=sys.stderr)


def presets(output: OutputFormat = OutputOption) -> None:
    """List the cluster presets with their node type and default link properties."""
    from rich.table import Table

    from topology.presets import PRESETS

    rows = [{"name": p.name, "gpus_per_node": p.gpus_per_node, "gpu_product": p.gpu_product,
             "instance_type": p.instance_type, "description": p.description,
             "links": {role: spec.model_dump() for role, spec in p.links.items()}} for p in PRESETS.values()]
    if output == OutputFormat.json:
        print_json({"presets": rows})
        return
    table = Table(title="cluster presets")
    for column in ("preset", "GPUs/node", "GPU", "host GB/s", "fabric GB/s", "description"):
        table.add_column(column)
    for row in rows:
        links = row["links"]
        table.add_row(row["name"], str(row["gpus_per_node"]), row["gpu_product"],
                      f"{links['host']['bandwidth_gbps']:g}", f"{links['leaf']['bandwidth_gbps']:g}",
                      row["description"])
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the `cluster` command group to the meshfit app."""
    cluster_app = typer.Typer(help="Generate and describe modelled clusters.", no_args_is_help=True)
    cluster_app.command("generate")(generate)
    cluster_app.command("presets")(presets)
    app.add_typer(cluster_app, name="cluster")
