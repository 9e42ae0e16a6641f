"""`meshfit topology show|export`: inspect the topology read from a NodeList / List file."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from scheduler.cli.common import OutputFormat, OutputOption, ToOption, console, fail, print_document

if TYPE_CHECKING:
    from rich.tree import Tree

    from topology.model import ClusterTopology

ClusterOption = typer.Option(..., "--cluster", help="NodeList or List file (JSON or YAML), as kubectl prints it.")
ConfigOption = typer.Option(None, "--config", help="Topology config (YAML/JSON): link overrides, levels, GPU resources.")
TolerationOption = typer.Option(
    None, "--toleration", help="Treat nodes with this taint as schedulable: key[=value][:Effect], or '*'. Repeatable.")
MAX_WARNINGS_SHOWN = 10
HOSTS_SHOWN_BY_DEFAULT = 32


class ExportFormat(str, Enum):
    """Graph export formats."""

    graphml = "graphml"
    dot = "dot"


def load_topology(cluster: Path, config: Path | None, tolerations: list[str] | None) -> ClusterTopology:
    """Load the cluster file, turning any TopologyError into a one-line error and exit code 2."""
    from topology.loaders import load_cluster
    from topology.model import TopologyError

    try:
        return load_cluster(cluster, config, tolerations or ())
    except TopologyError as exc:
        fail(str(exc))


def _domain_label(topo: ClusterTopology, domain_id: int) -> str:
    domain = topo.domains[domain_id]
    level = topo.levels[domain.level]
    style = "yellow" if domain.fallback else "bold" if domain.level < topo.host_level else ""
    text = f"[dim]{level.name}[/dim] [{style}]{domain.name}[/{style}]" if style else f"[dim]{level.name}[/dim] {domain.name}"
    extra = ""
    if domain.level == topo.host_level:
        node = topo.nodes[domain.nodes[0]]
        extra = "" if node.schedulable else f" [red]unschedulable: {node.unschedulable_reason}[/red]"
    else:
        extra = f" [dim]({len(domain.nodes)} nodes)[/dim]"
    return f"{text}  {domain.gpus_free}/{domain.gpus_total} GPUs free{extra}"


def topology_tree(topo: ClusterTopology, hosts: bool) -> Tree:
    """A rich tree of domains with free/total GPUs (hosts included when `hosts`)."""
    from rich.tree import Tree

    root = Tree(f"[bold]cluster[/bold]  {topo.gpus_free}/{topo.gpus_total} GPUs free  "
                f"[dim](scheme {topo.scheme}, links {topo.link_profile})[/dim]")
    stack = [(root, d.id) for d in reversed(topo.domains) if d.parent is None]
    while stack:
        parent_branch, domain_id = stack.pop()
        domain = topo.domains[domain_id]
        if domain.level == topo.host_level and not hosts:
            continue
        branch = parent_branch.add(_domain_label(topo, domain_id))
        stack.extend((branch, child) for child in reversed(domain.children))
    return root


def _levels_table(topo: ClusterTopology):
    from rich.table import Table

    from topology.report import level_summary

    table = Table(title="levels (outermost first)")
    for column in ("level", "role", "label", "domains", "free/total GPUs", "GB/s per GPU", "latency us", "oversub"):
        table.add_column(column)
    for row in level_summary(topo):
        fallback = f" ({row['fallback_domains']} fallback)" if row["fallback_domains"] else ""
        table.add_row(row["level"], row["role"], row["label"], f"{row['domains']}{fallback}",
                      f"{row['gpus_free']}/{row['gpus_total']}", f"{row['bandwidth_gbps']:g}",
                      f"{row['latency_us']:g}", f"{row['oversubscription']:g}")
    return table


def _print_warnings(topo: ClusterTopology) -> None:
    for warning in topo.warnings[:MAX_WARNINGS_SHOWN]:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    hidden = len(topo.warnings) - MAX_WARNINGS_SHOWN
    if hidden > 0:
        console.print(f"[yellow]warning:[/yellow] ... {hidden} more (see -o json)")


def show(
    cluster: Path = ClusterOption,
    output: OutputFormat = OutputOption,
    config: Path | None = ConfigOption,
    toleration: list[str] | None = TolerationOption,
    hosts: bool | None = typer.Option(None, "--hosts/--no-hosts",
                                      help=f"Show every host in the tree (default: only up to {HOSTS_SHOWN_BY_DEFAULT} nodes)."),
) -> None:
    """Print the topology tree with free/total GPUs per domain, or its JSON document (levels, domains, nodes)."""
    topo = load_topology(cluster, config, toleration)
    if output != OutputFormat.table:
        from topology.report import topology_json

        print_document(topology_json(topo), output)
        return
    show_hosts = hosts if hosts is not None else len(topo.nodes) <= HOSTS_SHOWN_BY_DEFAULT
    console.print(topology_tree(topo, show_hosts))
    console.print(_levels_table(topo))
    unschedulable = [n for n in topo.nodes if not n.schedulable]
    if unschedulable:
        console.print(f"{len(unschedulable)} unschedulable node(s): " + ", ".join(
            f"{n.name} ({n.unschedulable_reason})" for n in unschedulable[:MAX_WARNINGS_SHOWN]), highlight=False)
    _print_warnings(topo)


def export(
    cluster: Path = ClusterOption,
    fmt: ExportFormat = typer.Option(ExportFormat.graphml, "-o", "--output", "--format",
                                     help="Printed graph format: graphml or dot."),
    to: Path | None = ToOption,
    config: Path | None = ConfigOption,
    toleration: list[str] | None = TolerationOption,
    gpus: bool | None = typer.Option(None, "--gpus/--no-gpus", help="Include one vertex per GPU "
                                     "(default: yes for graphml, no for dot)."),
) -> None:
    """Export the topology graph (cluster -> domains -> nodes -> GPUs) as GraphML or Graphviz DOT."""
    from topology.graph import dot_text, write_graphml

    topo = load_topology(cluster, config, toleration)
    with_gpus = gpus if gpus is not None else fmt == ExportFormat.graphml
    try:
        if fmt == ExportFormat.dot:
            text = dot_text(topo, with_gpus)
            if to is None:
                sys.stdout.write(text)
            else:
                to.write_text(text, encoding="utf-8")
        else:
            write_graphml(topo, to if to is not None else sys.stdout.buffer, with_gpus)
    except OSError as exc:
        fail(f"cannot write {to}: {exc.strerror or exc}")


def register(app: typer.Typer) -> None:
    """Add the `topology` command group to the meshfit app."""
    topology_app = typer.Typer(help="Inspect the topology read from node labels.", no_args_is_help=True)
    topology_app.command("show")(show)
    topology_app.command("export")(export)
    app.add_typer(topology_app, name="topology")
