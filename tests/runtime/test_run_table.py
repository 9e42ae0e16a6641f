"""`meshfit run` (issue 26 item 3): a line before the worker processes start, and every rank's pod and node in its
table, matching where `meshfit place` put that rank's pod."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]
JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: pair, namespace: default}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    metadata:
      annotations: {meshfit.io/parallelism: "tp=2,dp=2"}
    spec:
      schedulerName: meshfit
      restartPolicy: Never
      containers:
        - name: trainer
          image: example
          resources: {limits: {nvidia.com/gpu: 1}}
"""


def _meshfit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MESHFIT, *args], capture_output=True, text=True, timeout=240)


def test_run_names_every_ranks_node_and_speaks_before_the_workers(tmp_path):
    cluster, job = tmp_path / "cluster.json", tmp_path / "job.yaml"
    assert _meshfit("cluster", "generate", "--preset", "hgx-h100", "--nodes", "4", "--used-fraction", "0.7",
                    "--seed", "1", "--to", str(cluster)).returncode == 0
    job.write_text(JOB)
    placed = _meshfit("place", "--cluster", str(cluster), "--job", str(job), "-o", "json")
    assert placed.returncode == 0, placed.stderr
    node_of_rank = {r["rank"]: r["node"] for r in json.loads(placed.stdout)["ranks"]}

    table = _meshfit("run", "--cluster", str(cluster), "--job", str(job), "--steps", "1")
    assert table.returncode == 0, table.stderr
    starting = table.stderr.index("starting 4 worker processes for default/pair")
    assert "training" not in table.stderr[:starting]
    ranks = table.stdout[table.stdout.index("ranks as the worker processes saw them"):]
    rows = [[cell.strip() for cell in line.split("│")[1:4]] for line in ranks.splitlines() if line.startswith("│ ")]
    assert {int(rank): node for rank, _, node in rows} == node_of_rank, table.stdout

