"""Issue 26 item 7: `meshfit submit` drives kube-scheduler's extender calls for a job's pods against a real
`meshfit serve --cluster` subprocess on loopback, and shows the gang reserved, bound and its rank table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.test_serve_cli import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]
INDEXED_JOB = ROOT / "manifests" / "examples" / "indexed-job.yaml"


def _meshfit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*MESHFIT, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A 16-node HGX cluster file (half its GPUs in use) served by `meshfit serve --cluster` on loopback."""
    folder = tmp_path_factory.mktemp("submit")
    cluster = folder / "cluster.json"
    generated = _meshfit("cluster", "generate", "--preset", "hgx-h100", "--nodes", "16", "--used-fraction", "0.5",
                         "--to", str(cluster))
    assert generated.returncode == 0, generated.stderr
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process = subprocess.Popen([*MESHFIT, "serve", "--cluster", str(cluster), "--port", str(port), "--grpc-port", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(port, process)
        yield cluster, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_submit_reserves_the_gang_at_the_first_filter_then_binds_every_member(service):
    cluster, url = service
    result = _meshfit("submit", "--cluster", str(cluster), "--job", str(INDEXED_JOB), "--url", url, "-o", "json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["job"] == "ml/bert-large"
    reserved = record["reservation"]
    assert reserved["status"] == "reserved" and len(reserved["pods"]) == 4, "the first /filter reserved all 4 pods"
    for pod in record["pods"]:
        assert pod["offered"] == 16
        assert pod["filter"] == [reserved["pods"][pod["pod"]]], "each member is offered exactly its reserved node"
        assert pod["bound_to"] == reserved["pods"][pod["pod"]]
    assert record["gang"]["state"] == "bound" and record["gang"]["bound"] == 4
    table = record["rank_table"]
    assert table["world_size"] == 16 and {p["name"]: p["node"] for p in table["pods"]} == reserved["pods"]

    gangs = _meshfit("gangs", "--url", url, "-o", "json")
    assert gangs.returncode == 0, gangs.stderr
    rows = {row["gang"]: row for row in json.loads(gangs.stdout)["gangs"]}
    assert rows["ml/bert-large"]["state"] == "bound"


def test_submit_prints_each_call_in_table_form(service, tmp_path):
    cluster, url = service
    job = tmp_path / "job.yaml"
    job.write_text(INDEXED_JOB.read_text().replace("name: bert-large", "name: bert-small"))
    result = _meshfit("submit", "--cluster", str(cluster), "--job", str(job), "--url", url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "reserved it: bert-small-0 -> dgx-h100-" in out
    assert out.count("/bind bert-small-") == 4 and "4/4 pods bound" in out
    assert "gang ml/bert-small: bound" in out


def test_a_gang_that_does_not_fit_waits_with_the_reason_exit_3(service, tmp_path):
    cluster, url = service
    job = tmp_path / "huge.yaml"
    job.write_text(INDEXED_JOB.read_text().replace("completions: 4", "completions: 64")
                   .replace("parallelism: 4", "parallelism: 64").replace("name: bert-large", "name: huge")
                   .replace('"tp=4,pp=2,dp=2"', '"tp=4,pp=2"').replace("meshfit.io/required-level: leaf", ""))
    result = _meshfit("submit", "--cluster", str(cluster), "--job", str(job), "--url", url)
    assert result.returncode == 3, result.stderr
    assert "the gang waits" in result.stdout and "does not fit" in result.stdout


def test_no_service_is_one_line_exit_2(tmp_path, service):
    cluster, _ = service
    result = _meshfit("submit", "--cluster", str(cluster), "--job", str(INDEXED_JOB), "--url",
                      f"http://127.0.0.1:{free_port()}", "--wait", "0.5")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "meshfit serve --cluster" in lines[0], result.stderr
