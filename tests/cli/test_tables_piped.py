"""Issue 26 item 5, the table commands test_tables_whole.py does not run: `run`, `demo` and `submit`, each a
real process whose stdout is a pipe (as `| cat`, `| less`, a CI log), with COLUMNS=80 in its environment.
No cell is cut with '…', no header is split, and long node, pod and job names appear whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.test_serve_cli import free_port, wait_healthy

MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]
LONG_PREFIX = "gpu-node-in-the-east-datacenter-hall-a-row-07-"
"""Prepended to every generated node name (a 59-character node name)."""
LONG_JOB = "pair-with-a-rather-long-job-name-for-the-table"
JOB = f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: {LONG_JOB}, namespace: research-team-with-a-long-namespace}}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    metadata:
      annotations: {{meshfit.io/parallelism: "tp=2,dp=2"}}
    spec:
      schedulerName: meshfit
      restartPolicy: Never
      containers:
        - name: trainer
          image: example
          resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


def _env() -> dict[str, str]:
    """This environment at 80 columns, without in-cluster settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return {**env, "COLUMNS": "80"}


def _piped(*args: str, cwd: Path | None = None) -> str:
    """stdout of `meshfit ARGS` read through a pipe; the command must succeed."""
    result = subprocess.run([*MESHFIT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=240, env=_env(), cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _assert_whole(out: str, *values: str) -> None:
    """No cut cell, every value in `values` whole, and one header line per table in `out`."""
    assert "…" not in out, out
    for value in values:
        assert value in out, f"{value!r} not whole in:\n{out}"
    headers = [line for line in out.splitlines() if line.startswith("┃")]
    assert headers and len(headers) == out.count("┏"), f"no table, or a header split over several lines:\n{out}"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A 4-node HGX cluster file whose node names are long, and a 4-pod job with a long name."""
    folder = tmp_path_factory.mktemp("piped")
    plain, cluster, job = folder / "plain.json", folder / "cluster.json", folder / "job.yaml"
    _piped("cluster", "generate", "--preset", "hgx-h100", "--nodes", "4", "--to", str(plain))
    cluster.write_text(plain.read_text().replace('"dgx-h100-', f'"{LONG_PREFIX}dgx-h100-'))
    job.write_text(JOB)
    return {"cluster": cluster, "job": job}


def test_run_piped_keeps_every_ranks_node_whole(inputs):
    pytest.importorskip("torch")
    out = _piped("run", "--cluster", str(inputs["cluster"]), "--job", str(inputs["job"]), "--steps", "1")
    _assert_whole(out, f"{LONG_PREFIX}dgx-h100-0000", "ranks as the worker processes saw them", "dp group")


def test_demo_piped_keeps_its_tables_whole(tmp_path):
    pytest.importorskip("torch")
    out = _piped("demo", "--steps", "1", cwd=tmp_path)
    _assert_whole(out, "predicted communication per training step", "volcano-hypernode", "vs meshfit",
                  "lower bound", "ranks as the worker processes saw them")


def test_submit_piped_keeps_pods_and_nodes_whole(inputs):
    port = free_port()
    process = subprocess.Popen([*MESHFIT, "serve", "--cluster", str(inputs["cluster"]), "--port", str(port),
                                "--grpc-port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=_env())
    try:
        wait_healthy(port, process)
        out = _piped("submit", "--cluster", str(inputs["cluster"]), "--job", str(inputs["job"]), "--url",
                     f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.communicate(timeout=30)
    _assert_whole(out, f"{LONG_JOB}-3", f"{LONG_PREFIX}dgx-h100-0000",
                  f"research-team-with-a-long-namespace/{LONG_JOB}")
