"""Helpers shared by every CLI command: the output convention, one-line errors with exit code 2, printing.

The convention (kubectl's): `-o/--output table|json|yaml` chooses what is *printed*; files and folders
get their own options, `--to FILE` (one document) and `--out-dir DIR` (several files).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console, ConsoleDimensions

UNBOUNDED_WIDTH = 1_000_000
"""Columns of stdout off a terminal: more than any table or line meshfit prints (rich pads nothing to it)."""


class OutputConsole(Console):
    """The stdout console: as wide as the terminal on one; off one (CI logs, `| less`, `> file`) unbounded, so rich
    never cuts a cell (`fabric.…`), splits a header (`positio n`) or wraps a line: every value stays whole."""

    @property
    def size(self) -> ConsoleDimensions:
        """The terminal's size, or an unbounded width off a terminal (decided at each print: stdout may change)."""
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        return size if self.is_terminal else ConsoleDimensions(UNBOUNDED_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = OutputConsole()
err_console = Console(stderr=True)

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNSCHEDULABLE = 3


class OutputFormat(str, Enum):
    """`-o table|json|yaml`, accepted by every command that prints a result."""

    table = "table"
    json = "json"
    yaml = "yaml"


class DocumentFormat(str, Enum):
    """`-o json|yaml` for commands whose result is a document (no table form)."""

    json = "json"
    yaml = "yaml"


OutputOption = typer.Option(OutputFormat.table, "-o", "--output", help="Printed output: table, json or yaml.")
ToOption = typer.Option(None, "--to", help="Write the document to this file instead of stdout.")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error to stderr and exit (2 = bad input), never a traceback."""
    first_line = " ".join(str(message).split())
    print(f"error: {first_line}", file=sys.stderr)
    raise typer.Exit(code)


def names_column(table: Any, header: str, names: list[str]) -> None:
    """Add a column of names (nodes, pods) that is never cut: one name a line, as wide as the longest."""
    table.add_column(header, no_wrap=True, min_width=max([len(header), *map(len, names)], default=len(header)))


def print_table(table: Any, target: Console | None = None) -> None:
    """Print a rich table; off a terminal (CI logs, pipes) at its natural width, so nothing is cut at 80 columns."""
    out = target or console
    if out.is_terminal or isinstance(out, OutputConsole):
        out.print(table)
        return
    natural = out.measure(table, options=out.options.update_width(10_000)).maximum
    Console(file=out.file, width=max(out.width, natural), no_color=out.no_color, highlight=False).print(table)


def print_json(payload: Any) -> None:
    """Print JSON to stdout (sorted keys off: field order follows the contracts)."""
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def print_yaml(payload: Any) -> None:
    """Print YAML to stdout, keys in the same order as the JSON form."""
    import yaml

    sys.stdout.write(yaml.safe_dump(payload, sort_keys=False))


def print_document(payload: Any, output: OutputFormat | DocumentFormat) -> None:
    """Print `payload` as JSON or YAML according to `-o` (tables are the caller's job)."""
    if output.value == "yaml":
        print_yaml(payload)
    else:
        print_json(payload)


def document_text(payload: Any, fmt: DocumentFormat) -> str:
    """`payload` as JSON or YAML text (a single document)."""
    if fmt == DocumentFormat.yaml:
        import yaml

        return yaml.safe_dump(payload, sort_keys=False)
    return json.dumps(payload, indent=2) + "\n"


def format_for(output: DocumentFormat | None, to: Path | None, default: DocumentFormat) -> DocumentFormat:
    """The document format: `-o` if given, else from the `--to` file's suffix, else `default`."""
    if output is not None:
        return output
    if to is not None and to.suffix.lower() in (".yaml", ".yml"):
        return DocumentFormat.yaml
    if to is not None and to.suffix.lower() == ".json":
        return DocumentFormat.json
    return default


def write_text_or_stdout(text: str, to: Path | None) -> None:
    """Write `text` to the `--to` file (one-line error on failure) or to stdout."""
    if to is None:
        sys.stdout.write(text)
        return
    try:
        to.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {to}: {exc.strerror or exc}")


def version_text() -> str:
    """`meshfit X.Y.Z` from the installed distribution (or `unknown` when run from a bare tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"meshfit {version('meshfit')}"
    except PackageNotFoundError:
        return "meshfit unknown"
