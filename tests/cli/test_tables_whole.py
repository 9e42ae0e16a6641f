"""Issue 26 item 4: off a terminal (CI logs, `| less`, `> file`) tables keep every value whole.

Every table-printing command runs with its output captured (not a TTY): no cell is cut with '…', no header
is split over two lines, and long values -- label keys, long node, gang and candidate names -- appear whole.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from simulations.tables import legend_lines
from tests.builders import make_nodelist

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
LONG_PREFIX = "gpu-node-in-the-east-datacenter-hall-a-row-07-"
"""Prepended to every generated node name (a 58-character node name)."""
LONG_GANG = "ml-research/llama-3-405b-pretraining-long-context-run-0042"
LONG_CANDIDATE = "hgx-h100-64-nodes-non-blocking-fat-tree-with-spare-capacity"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A cluster whose node names are long, a job, a trace and a candidate with a long name."""
    folder = tmp_path_factory.mktemp("tables")
    cluster = folder / "cluster.json"
    text = json.dumps(make_nodelist("hgx-h100", nodes=16))
    cluster.write_text(text.replace('"dgx-h100-', f'"{LONG_PREFIX}dgx-h100-'), encoding="utf-8")
    trace = folder / "trace.csv"
    trace.write_text("job_id,submit_time,duration_seconds,gpus\nj0,0,60,8\nj1,10,60,16\n", encoding="utf-8")
    candidate = folder / "candidate.yaml"
    candidate.write_text(f"name: {LONG_CANDIDATE}\npreset: hgx-h100\nnodes: 16\n", encoding="utf-8")
    return {"cluster": cluster, "job": ROOT / "tests" / "fixtures" / "jobs" / "pytorchjob.yaml", "trace": trace,
            "candidate": candidate}


def _gang_rows(url: str, timeout: float) -> list[dict]:
    return [{"gang": LONG_GANG, "state": "waiting", "position": 1, "priority": 1000, "pods": 64, "bound": 0,
             "gpus_per_pod": 8, "arrived_at": time.time() - 90,
             "reason": "gang does not fit: 64 pods x 8 GPUs need 512 free GPUs in one spine, the best has 256"}]


COMMANDS = {
    "topology show": (lambda f: ["topology", "show", "--cluster", str(f["cluster"]), "--hosts"],
                      [f"{LONG_PREFIX}dgx-h100-0015", "fabric.topograph.run/tier-0", "kubernetes.io/hostname",
                       "free/total GPUs", "GB/s per GPU"]),
    "place --explain": (lambda f: ["place", "--cluster", str(f["cluster"]), "--job", str(f["job"]), "--explain"],
                        [f"{LONG_PREFIX}dgx-h100-0000", "runner-up - chosen", "seconds/step"]),
    "simulate": (lambda f: ["simulate", "--cluster", str(f["cluster"]), "--trace", str(f["trace"]), "--policy",
                            "meshfit", "--policy", "volcano-hypernode", "--workers", "1"],
                 ["volcano-hypernode", "fragmentation_mean (share)", *legend_lines()]),
    "plan": (lambda f: ["plan", "--candidate", str(f["candidate"]), "--trace", str(f["trace"]), "--workers", "1"],
             [LONG_CANDIDATE]),
    "cluster presets": (lambda f: ["cluster", "presets"], ["NVIDIA-H100-80GB-HBM3", "gb200-nvl72"]),
    "gangs --url": (lambda f: ["gangs", "--url", "http://meshfit:8888", "-A"],
                    ["llama-3-405b-pretraining-long-context-run-0042", "position", "gpus per pod",
                     "the best has 256"]),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_off_a_terminal_keep_every_value_whole(name, inputs, monkeypatch):
    from scheduler.cli import gangs_cmd

    monkeypatch.setattr(gangs_cmd, "fetch_gangs", _gang_rows)
    argv, whole = COMMANDS[name]
    result = RUNNER.invoke(app, [*argv(inputs), "-o", "table"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "…" not in out, out
    for value in whole:
        assert value in out, f"{value!r} not whole in:\n{out}"
    headers = [line for line in out.splitlines() if line.startswith("┃")]
    assert len(headers) == out.count("┏"), f"a header split over several lines:\n{out}"
