"""Helpers shared by every CLI command: output format, one-line errors with exit code 2, JSON printing."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any, NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNSCHEDULABLE = 3


class OutputFormat(str, Enum):
    """`-o table|json`, accepted by every command."""

    table = "table"
    json = "json"


OutputOption = typer.Option(OutputFormat.table, "-o", "--output", help="Output format: table or json.")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error to stderr and exit (2 = bad input), never a traceback."""
    first_line = " ".join(str(message).split())
    print(f"error: {first_line}", file=sys.stderr)
    raise typer.Exit(code)


def print_json(payload: Any) -> None:
    """Print JSON to stdout (sorted keys off: field order follows the contracts)."""
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")
