"""`meshfit gangs`: the gang queue of a running `meshfit serve`, as a table for a person (or JSON/YAML)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import typer

from scheduler.cli.common import OutputFormat, OutputOption, console, fail, print_document

COLUMNS = ("position", "gang", "state", "priority", "pods", "gpus_per_pod", "reason")


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


def gangs_table(rows: list[dict]):
    """A rich Table of the gang rows, waiting gangs first in queue order."""
    from rich.table import Table

    table = Table(title=f"{len(rows)} gang(s)")
    for column in COLUMNS:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in COLUMNS))
    return table


def register(app: typer.Typer) -> None:
    """Add `meshfit gangs` to the CLI."""

    @app.command("gangs")
    def gangs(
        url: str = typer.Option("http://127.0.0.1:8888", "--url", help="Base URL of a running meshfit serve."),
        output: OutputFormat = OutputOption,
        timeout: float = typer.Option(5.0, "--timeout", help="Seconds to wait for the service."),
    ) -> None:
        """Every gang the service knows: waiting (position and reason), reserved, binding, bound."""
        try:
            rows = fetch_gangs(url, timeout)
        except ValueError as exc:
            fail(str(exc))
        if output == OutputFormat.table:
            console.print(gangs_table(rows))
        else:
            print_document({"gangs": rows}, output)
