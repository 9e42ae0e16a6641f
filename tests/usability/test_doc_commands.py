"""Issue 22 item 2: every command block of README.md, docs/ and simulations/README.md is run (or, when marked as
needing a cluster, Docker, a GPU or CI's fresh clone, parsed by the CLI), so a documented command cannot rot.

Blocks run in document order in one scratch folder per document, which holds links to the repository's
top-level entries (so `manifests/...` and `simulations/examples/...` resolve) and keeps what earlier blocks
wrote (`nodes.json`).  The marker syntax is in `tests/usability/docs_blocks.py`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.usability.docs_blocks import (
    DOCUMENTS, KNOWN_LANGUAGES, ROOT, all_blocks, blocks, check_meshfit_args, check_not_run, commands,
)

BLOCK_TIMEOUT_SECONDS = 120
SKIPPED_ENTRIES = {".git", ".venv", "out", "plan"}


def _scratch(tmp_path: Path) -> Path:
    for entry in ROOT.iterdir():
        if entry.name not in SKIPPED_ENTRIES and not entry.name.endswith(".egg-info"):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MPLBACKEND", "Agg")
    return env


def test_every_block_has_a_known_language():
    unlabelled = [b.label for b in all_blocks() if b.language not in KNOWN_LANGUAGES]
    assert not unlabelled, f"label these fences (bash, yaml, text, ...): {unlabelled}"


def test_readme_results_command_is_runnable_as_printed():
    """The issue's case: README's Results commands once said `-o out/gb200` (a format, not a folder)."""
    results = [b for b in blocks(ROOT / "README.md") if "meshfit simulate" in b.text]
    assert results and all(b.runnable for b in results)
    for block in results:
        for argv in commands(block.text):
            assert check_meshfit_args(argv[1:]) == "meshfit simulate"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_document_commands_run(document, tmp_path):
    scratch = _scratch(tmp_path)
    for block in blocks(document):
        if not block.runnable:
            continue
        returncode, stderr = _run_block(block.script(), scratch)
        assert returncode == 0, f"{block.label} failed (rc {returncode}):\n{stderr[-2000:]}"


def _run_block(script: str, cwd: Path) -> tuple[int, str]:
    """Run one block in its own process group (a block may start a server with `&`), and end whatever of that
    group is still running afterwards, even when the block failed before its own `kill`."""
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=_environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=BLOCK_TIMEOUT_SECONDS)
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, stderr


@pytest.mark.parametrize("block", [b for b in all_blocks() if not b.runnable and b.language in ("bash", "sh", "shell")],
                         ids=lambda b: b.label)
def test_commands_not_run_still_parse(block):
    argvs = commands(block.script())
    assert argvs, f"{block.label}: no command found"
    for argv in argvs:
        check_not_run(argv, block.label)


@pytest.mark.parametrize("block", [b for b in all_blocks() if b.language in ("yaml", "json", "toml")],
                         ids=lambda b: b.label)
def test_data_blocks_parse_and_use_only_known_meshfit_keys(block):
    from scheduler.placement.annotation_keys import MESHFIT_PREFIX, check_meshfit_keys

    if block.language == "toml":
        tomllib.loads(block.text)
        return
    documents = [json.loads(block.text)] if block.language == "json" else list(yaml.safe_load_all(block.text))
    for document in documents:
        if isinstance(document, dict) and any(str(k).startswith(MESHFIT_PREFIX) for k in document):
            check_meshfit_keys(document, None, block.label)


DOCKERFILE_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                           "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


@pytest.mark.parametrize("block", [b for b in all_blocks() if b.language == "dockerfile"], ids=lambda b: b.label)
def test_dockerfile_blocks_use_dockerfile_instructions(block):
    lines = [line for line in block.text.replace("\\\n", " ").splitlines() if line.strip() and
             not line.lstrip().startswith("#")]
    assert lines and {line.split()[0] for line in lines} <= DOCKERFILE_INSTRUCTIONS, block.label


def test_markers_are_recognised_and_checks_catch_a_typo():
    with pytest.raises(Exception, match="No such option"):
        check_meshfit_args(["simulate", "--preset", "hgx-h100", "--synthtic", "3"])
    with pytest.raises(Exception, match="is not one of .table., .json., .yaml."):
        check_meshfit_args(["simulate", "--preset", "gb200-nvl72", "-o", "out/gb200"])
    assert commands("A=1 meshfit place --job j.yaml \\\n  -o json > p.json && kubectl apply -f x  # note") == [
        ["meshfit", "place", "--job", "j.yaml", "-o", "json"], ["kubectl", "apply", "-f", "x"]]
