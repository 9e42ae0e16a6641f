"""`meshfit gangs` (also `kubectl meshfit gangs`): every gang, its state, bound / total pods, age and reason.

Reads the cluster directly through the kubeconfig by default (`scheduler.cli.gangs_direct`: the rows of the
service's `GET /gangs`, computed from pods, their owners, meshfit's bind annotations and rank tables), or a
running service with `--url`.  `-n` / `-A` choose namespaces as kubectl does; `--watch` refreshes.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional

import typer

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, print_document

COLUMNS = ("namespace", "gang", "state", "bound", "age", "position", "priority", "gpus_per_pod", "reason")
"""Table columns (`namespace` only across namespaces); `bound` is bound/total pods."""


def fetch_gangs(url: str, timeout: float) -> list[dict]:
    """`GET <url>/gangs` of a running service; ValueError with a one-line reason on any failure."""
    target = url.rstrip("/") + "/gangs"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:  # noqa: S310 - user-given service URL
            payload = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ValueError(f"cannot read {target}: {getattr(exc, 'reason', exc)}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("gangs"), list):
        raise ValueError(f"{target} did not answer a gang list")
    return payload["gangs"]


def in_namespace(rows: list[dict], namespace: str | None) -> list[dict]:
    """The rows of gangs in `namespace` (all rows for None)."""
    return rows if namespace is None else [r for r in rows if str(r.get("gang", "")).partition("/")[0] == namespace]


def age_text(seconds: float | None) -> str:
    """kubectl-style age: `45s`, `12m`, `3h`, `2d` (`-` when unknown)."""
    if seconds is None or seconds < 0:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def table_cells(row: dict, now: float, all_namespaces: bool) -> list[str]:
    """One table row: namespace and gang split, `bound/total`, age from the gang's arrival."""
    namespace, _, name = str(row.get("gang", "")).partition("/")
    arrived = row.get("arrived_at")
    cells = {"namespace": namespace, "gang": name, "state": str(row.get("state") or ""),
             "bound": f"{row.get('bound') or 0}/{row.get('pods') if row.get('pods') is not None else '?'}",
             "age": age_text(now - arrived if isinstance(arrived, (int, float)) else None),
             "position": "" if row.get("position") is None else str(row["position"]),
             "priority": str(row.get("priority", "")), "gpus_per_pod": str(row.get("gpus_per_pod", "")),
             "reason": str(row.get("reason") or "")}
    return [cells[c] for c in COLUMNS if all_namespaces or c != "namespace"]


def gangs_table(rows: list[dict], all_namespaces: bool = True, now: float | None = None):
    """A rich Table of the gang rows, waiting gangs first in queue order."""
    from rich.table import Table

    now = time.time() if now is None else now
    table = Table(title=f"{len(rows)} gang(s)")
    for column in COLUMNS:
        if all_namespaces or column != "namespace":
            table.add_column(column.replace("_", " "), overflow="fold",
                             no_wrap=column in ("namespace", "gang", "state", "bound", "age"))
    for row in rows:
        table.add_row(*table_cells(row, now, all_namespaces))
    return table


def watch(fetch: Callable[[], list[dict]], show: Callable[[list[dict]], None], interval: float,
          rounds: int | None = None) -> None:
    """Call `show` with the rows now and again whenever they change, every `interval` seconds (Ctrl-C stops)."""
    last = None
    done = 0
    try:
        while rounds is None or done < rounds:
            rows = fetch()
            if rows != last:
                show(rows)
                last = rows
            done += 1
            if rounds is None or done < rounds:
                time.sleep(interval)
    except KeyboardInterrupt:
        return


def _source(url: Optional[str], kubeconfig: Optional[Path], context: Optional[str], namespace: Optional[str],
            all_namespaces: bool, timeout: float, scheduler_name: str) -> tuple[Callable[[], list[dict]], bool]:
    """(fetch the rows, whether they span namespaces) for the chosen source and namespaces."""
    if url:
        from scheduler.cli.service_url import service_url

        base = service_url(url)
        scope = None if all_namespaces or namespace is None else namespace
        return (lambda: in_namespace(fetch_gangs(base, timeout), scope)), scope is None
    from scheduler.cli.gangs_direct import gang_rows, load_api_client, read_cluster

    api_client, context_namespace = load_api_client(kubeconfig, context)
    scope = None if all_namespaces else (namespace or context_namespace)
    return (lambda: gang_rows(read_cluster(api_client, scope), scheduler_name)), scope is None


def _printer(output: OutputFormat, spans: bool, watching: bool) -> Callable[[list[dict]], None]:
    def show(rows: list[dict]) -> None:
        """Print the rows as a table, or as one JSON / YAML document (a `---` between YAML ones when watching)."""
        if output == OutputFormat.table:
            console.print(gangs_table(rows, spans))
        else:
            if watching and output == OutputFormat.yaml:
                sys.stdout.write("---\n")
            print_document({"gangs": rows}, output)
            sys.stdout.flush()
    return show


def register(app: typer.Typer) -> None:
    """Add `meshfit gangs` to the CLI."""

    @app.command("gangs")
    def gangs(
        namespace: Optional[str] = typer.Option(None, "-n", "--namespace",
                                                help="Only this namespace (default: the kubeconfig context's; "
                                                     "with --url: all)."),
        all_namespaces: bool = typer.Option(False, "-A", "--all-namespaces", help="Gangs of every namespace."),
        watch_flag: bool = typer.Option(False, "-w", "--watch", help="Keep watching; print again on every change."),
        interval: float = typer.Option(2.0, "--interval", help="Seconds between refreshes with --watch."),
        url: Optional[str] = typer.Option(None, "--url", help="Ask a running meshfit serve (GET /gangs) instead "
                                                              "of reading the cluster, e.g. http://127.0.0.1:8888 "
                                                              "(no scheme: http)."),
        kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Kubeconfig file (default: "
                                                                             "$KUBECONFIG, ~/.kube/config)."),
        context: Optional[str] = typer.Option(None, "--context", help="Kubeconfig context."),
        scheduler_name: str = typer.Option("meshfit", "--scheduler-name", help="Scheduler profile of meshfit's pods."),
        output: OutputFormat = OutputOption,
        timeout: float = typer.Option(5.0, "--timeout", help="Seconds to wait for the service (--url)."),
    ) -> None:
        """Every gang: waiting (queue position and why), reserved, binding, bound; bound/total pods and age."""
        if interval <= 0:
            fail(f"--interval must be > 0, got {interval}")
        try:
            fetch, spans = _source(url, kubeconfig, context, namespace, all_namespaces, timeout, scheduler_name)
            show = _printer(output, spans, watch_flag)
            if watch_flag:
                watch(fetch, show, interval)
            else:
                show(fetch())
        except ValueError as exc:
            fail(str(exc))
