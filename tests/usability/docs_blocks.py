"""Fenced blocks of the Markdown documentation, their `docs-test` markers, and checks of commands not run.

A marker is an HTML comment on the line before a fence (invisible when rendered):

    <!-- docs-test: needs=cluster -->                      not run: needs a real cluster / kubectl
    <!-- docs-test: needs=docker -->  needs=gpu  needs=ci   (ci: the set-up and test commands CI runs itself)
    <!-- docs-test: needs=suite -->                        not run: runs meshfit's own test suite (or part of it)
    <!-- docs-test: replace "--jobs 100000" "--jobs 300" --> run, smaller (the comment says how)

Directives are separated by `;`.  Every block needs a language: `bash` / `sh` blocks are commands (run in
order in one scratch folder per document, unless marked `needs=...`), `yaml` / `json` / `toml` must
parse, `dockerfile` must use only Dockerfile instructions, `text` is shown output.  For a block that is not run, each `meshfit ...` command is parsed by the
CLI itself (unknown options, bad values and wrong subcommands fail) and `kubectl -f/-k manifests/...`
paths must exist.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "simulations" / "README.md")
"""The documents whose blocks are tested."""
COMMAND_LANGUAGES = ("bash", "sh", "shell")
KNOWN_LANGUAGES = (*COMMAND_LANGUAGES, "yaml", "json", "toml", "text", "python", "dockerfile")
NEEDS = ("cluster", "docker", "gpu", "ci", "suite")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
_SEPARATORS = {"&&", "||", "|", ";", "&"}
_REDIRECTS = {">", ">>", "2>", "<", "2>&1"}


@dataclass
class Block:
    """One fenced block: where it is, its language, text, and its marker's directives."""

    document: Path
    line: int
    language: str
    text: str
    needs: str | None = None
    replacements: list[tuple[str, str]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """`docs/deployment.md:42` for test ids and messages."""
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        """A command block not marked as needing something this machine lacks."""
        return self.language in COMMAND_LANGUAGES and self.needs is None

    def script(self) -> str:
        """The block's text with the marker's replacements applied (each must match)."""
        text = self.text
        for old, new in self.replacements:
            assert old in text, f"{self.label}: docs-test replace {old!r} matches nothing"
            text = text.replace(old, new)
        return text


def _directives(marker: str, where: str) -> tuple[str | None, list[tuple[str, str]]]:
    needs, replacements = None, []
    for directive in filter(None, (part.strip() for part in marker.split(";"))):
        if directive.startswith("needs="):
            needs = directive.removeprefix("needs=")
            assert needs in NEEDS, f"{where}: docs-test needs={needs!r}; known: {', '.join(NEEDS)}"
        elif directive.startswith("replace "):
            old, new = shlex.split(directive.removeprefix("replace "))
            replacements.append((old, new))
        else:
            raise AssertionError(f"{where}: unknown docs-test directive {directive!r}")
    return needs, replacements


def blocks(document: Path) -> list[Block]:
    """Every fenced block of `document`, in order, with its marker (if the line before is one)."""
    text = document.read_text()
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rpartition("\n")[2]
        marker = _MARKER.search(before)
        block = Block(document, line, match.group(1).strip(), match.group(2))
        if marker:
            block.needs, block.replacements = _directives(marker.group(1), block.label)
        found.append(block)
    return found


def all_blocks() -> list[Block]:
    """The blocks of every tested document."""
    return [block for document in DOCUMENTS for block in blocks(document)]


def commands(script: str) -> list[list[str]]:
    """Each simple command of a shell script as argv (continuations joined, comments, redirections and
    leading VAR=value assignments dropped; split at &&, ||, |, ; and &)."""
    out: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        skip_next = False
        for token in list(lexer) + [";"]:
            if skip_next:
                skip_next = False
            elif token in _SEPARATORS:
                if current:
                    out.append(current)
                current = []
            elif token in _REDIRECTS:
                skip_next = token != "2>&1"
            elif not current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", token):
                continue
            else:
                current.append(token)
    return out


def check_meshfit_args(args: list[str]) -> str:
    """Parse `meshfit ARGS` with the CLI's own parser, running nothing; returns the command path.

    Raises the CLI's usage error for an unknown command or option, a missing required option or a bad value."""
    from typer.main import get_command

    from scheduler.cli import app

    command = get_command(app)
    ctx = command.make_context("meshfit", list(args))
    path = ["meshfit"]
    rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
    while hasattr(command, "resolve_command"):
        assert rest, f"meshfit {' '.join(args)}: no subcommand"
        name, command, rest = command.resolve_command(ctx, rest)
        ctx = command.make_context(name, rest, parent=ctx)
        path.append(name)
        rest = [*(getattr(ctx, "_protected_args", None) or []), *ctx.args]
    return " ".join(path)


def check_not_run(argv: list[str], where: str) -> None:
    """What can be checked of a command that is not run: meshfit parses, kubectl's manifests exist."""
    program = Path(argv[0]).name
    if program in ("meshfit", "kubectl-meshfit"):
        check_meshfit_args(argv[1:])
    elif program == "kubectl":
        for flag, value in zip(argv, argv[1:]):
            if flag in ("-f", "-k", "--filename", "--kustomize") and value.startswith("manifests"):
                assert (ROOT / value).exists(), f"{where}: {value} does not exist"
    elif program == "docker" and "build" in argv:
        assert (ROOT / "Dockerfile").is_file(), f"{where}: no Dockerfile"
