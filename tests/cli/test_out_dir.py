"""Issue 26 item 3: `simulate --out-dir` / `plan --out-dir` never mix two runs in one folder.

A used folder is refused (exit 2, one line, before anything runs) unless `--overwrite` is given; then the
previous run's files are removed first, and files meshfit never writes are kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
CANDIDATE = ROOT / "simulations" / "examples" / "hgx-h100-64-nonblocking.yaml"


def simulate(out_dir: Path, policy: str, *extra: str):
    """A small simulate run into `out_dir` (no plots, one worker)."""
    return RUNNER.invoke(app, ["simulate", "--preset", "hgx-h100", "--nodes", "16", "--synthetic", "8",
                               "--policy", policy, "--workers", "1", "--no-plots", "-o", "json",
                               "--out-dir", str(out_dir), *extra])


def plan(out_dir: Path, *extra: str):
    """A small plan run into `out_dir`."""
    return RUNNER.invoke(app, ["plan", "--candidate", str(CANDIDATE), "--synthetic", "8", "--workers", "1",
                               "-o", "json", "--out-dir", str(out_dir), *extra])


def _refused(result, folder: Path) -> str:
    text = result.stdout + result.stderr
    assert result.exit_code == 2, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and str(folder) in lines[0] and "--overwrite" in lines[0], text
    return lines[0]


def _nothing_runs(monkeypatch) -> None:
    from simulations import planner, session

    def forbidden(*args, **kwargs):
        raise AssertionError("a refused --out-dir must be refused before any simulation runs")

    monkeypatch.setattr(session, "execute", forbidden)
    monkeypatch.setattr(planner, "run_plan", forbidden)


def test_a_used_folder_is_refused_before_anything_runs_and_left_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert simulate(out, "first-fit").exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "summary.json" in before and "timeseries-first-fit.csv" in before
    _nothing_runs(monkeypatch)
    line = _refused(simulate(out, "meshfit"), out)
    assert "details.json" in line and "more" in line
    _refused(plan(out), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_folder_holding_any_file_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n", encoding="utf-8")
    _nothing_runs(monkeypatch)
    assert "notes.txt" in _refused(simulate(out, "meshfit"), out)


def test_overwrite_removes_the_previous_runs_files_and_keeps_others(tmp_path):
    out = tmp_path / "out"
    assert simulate(out, "first-fit", "--seed", "1", "--seed", "2").exit_code == 0
    assert (out / "timeseries-first-fit-seed1.csv").exists()
    (out / "notes.txt").write_text("my notes\n", encoding="utf-8")
    result = simulate(out, "meshfit", "--overwrite")
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert not [n for n in names if "first-fit" in n], names
    assert {"timeseries-meshfit.csv", "jobs-meshfit.csv", "summary.json", "notes.txt"} <= names
    assert "first-fit" not in (out / "runs.csv").read_text(encoding="utf-8")


def test_plan_overwrite_replaces_a_previous_simulate_run(tmp_path):
    out = tmp_path / "out"
    assert simulate(out, "first-fit").exit_code == 0
    result = plan(out, "--overwrite")
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert "plan.json" in names and not names & {"summary.json", "details.json", "runs.csv"}, names
    assert not [n for n in names if n.startswith(("timeseries-", "jobs-"))], names


@pytest.mark.parametrize("command", [simulate, plan], ids=["simulate", "plan"])
def test_new_or_empty_folders_are_used_and_a_file_is_refused(command, tmp_path):
    args = ("first-fit",) if command is simulate else ()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert command(empty, *args).exit_code == 0
    assert command(tmp_path / "new" / "deeper", *args).exit_code == 0
    a_file = tmp_path / "file.json"
    a_file.write_text("{}", encoding="utf-8")
    result = command(a_file, *args)
    assert result.exit_code == 2 and "is a file, not a folder" in result.stderr, result.output
