"""`meshfit cluster generate|presets`: write realistic NodeLists from presets, list the presets."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from scheduler.cli.common import (DocumentFormat, OutputFormat, OutputOption, ToOption, console, document_text, fail,
                                  format_for, print_document, write_text_or_stdout)


def generate(
    preset: str = typer.Option(..., "--preset", help="Preset: hgx-h100, gb200-nvl72, gke-a3, aws-p5."),
    nodes: int = typer.Option(..., "--nodes", help="Number of GPU nodes."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same file)."),
    used_fraction: float = typer.Option(0.0, "--used-fraction", help="Fraction of GPUs held by running pods."),
    unhealthy: int = typer.Option(0, "--unhealthy", help="Nodes made NotReady, cordoned or GPU-tainted."),
    output: DocumentFormat | None = typer.Option(
        None, "-o", "--output", help="json or yaml (default: from the --to suffix, else json)."),
    to: Path | None = ToOption,
) -> None:
    """Write a Kubernetes NodeList (a List with running Pods when --used-fraction > 0)."""
    from topology.generator import generate_nodelist
    from topology.model import TopologyError

    try:
        nodelist = generate_nodelist(preset, nodes, seed, used_fraction, unhealthy)
    except TopologyError as exc:
        fail(str(exc))
    write_text_or_stdout(document_text(nodelist, format_for(output, to, DocumentFormat.json)), to)
    if to is not None:
        pods = sum(1 for item in nodelist["items"] if item["kind"] == "Pod")
        print(f"wrote {nodes} {preset} nodes and {pods} running pods to {to}", file=sys.stderr)


def presets(output: OutputFormat = OutputOption) -> None:
    """List the cluster presets with their node type and default link properties."""
    from rich.table import Table

    from topology.presets import PRESETS

    rows = [{"name": p.name, "gpus_per_node": p.gpus_per_node, "gpu_product": p.gpu_product,
             "instance_type": p.instance_type, "description": p.description,
             "links": {role: spec.model_dump() for role, spec in p.links.items()}} for p in PRESETS.values()]
    if output != OutputFormat.table:
        print_document({"presets": rows}, output)
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
