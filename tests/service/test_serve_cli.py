"""`meshfit serve` as a subprocess: bad or missing flags and taken ports are one line with exit 2; SIGTERM
drains and exits 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.service.helpers import make_nodes

MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]


def cluster_file(tmp_path: Path) -> Path:
    """A NodeList of 8 GPU nodes."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList",
                                "items": [{**n, "kind": "Node", "apiVersion": "v1"} for n in make_nodes()]}))
    return path


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `meshfit serve ARGS` to completion, without any in-cluster configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return subprocess.run([*MESHFIT, "serve", *args], capture_output=True, text=True, timeout=timeout, env=env)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, a single `error: ...` line on stderr naming every fragment, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_no_cluster_and_no_in_cluster_config_is_one_line():
    assert_one_line_error(serve(), "--cluster", "--kubeconfig")


@pytest.mark.parametrize("flags, fragment", [
    (["--log-format", "xml"], "--log-format"),
    (["--log-level", "loud"], "--log-level"),
    (["--port", "-1"], "--port"),
    (["--port", "65536"], "--port"),
    (["--grpc-port", "-5"], "--grpc-port"),
    (["--grpc-port", "70000"], "--grpc-port"),
    (["--reservation-ttl", "-1"], "--reservation-ttl"),
    (["--reservation-ttl", "nan"], "--reservation-ttl"),
    (["--metrics-port", "-1"], "--metrics-port"),
    (["--metrics-port", "65536"], "--metrics-port"),
    (["--port", "7001", "--metrics-port", "7001"], "--metrics-port and --port must differ"),
    (["--grpc-port", "7002", "--metrics-port", "7002"], "--metrics-port and --grpc-port must differ"),
    (["--bind-backlog", "0"], "--bind-backlog"),
    (["--bind-backlog", "100001"], "--bind-backlog"),
    (["--backfill", "best-efort"], "did you mean 'best-effort'?"),
])
def test_bad_flag_values_are_one_line(tmp_path, flags, fragment):
    assert_one_line_error(serve("--cluster", str(cluster_file(tmp_path)), *flags), fragment)


def test_a_missing_kubeconfig_is_one_line(tmp_path):
    assert_one_line_error(serve("--kubeconfig", str(tmp_path / "absent")), "--kubeconfig")


@pytest.mark.parametrize("taken", ["--port", "--grpc-port"])
def test_a_taken_port_is_one_line(tmp_path, taken):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = {"--port": str(free_port()), "--grpc-port": str(free_port()), taken: str(busy)}
        result = serve("--cluster", str(cluster_file(tmp_path)), "--host", "127.0.0.1",
                       *[item for pair in ports.items() for item in pair])
    assert_one_line_error(result, "cannot listen", str(busy))


def wait_healthy(port: int, process: subprocess.Popen, seconds: float = 60) -> None:
    """Poll /healthz until it answers ok (fails if the process ends first)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("meshfit serve did not become healthy")


def test_sigterm_drains_stops_grpc_and_exits_zero(tmp_path):
    http_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process = subprocess.Popen([*MESHFIT, "serve", "--cluster", str(cluster_file(tmp_path)), "--host", "127.0.0.1",
                                "--port", str(http_port), "--grpc-port", str(grpc_port), "--log-format", "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(http_port, process)
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=2):
            pass  # gRPC listens
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    lines = [json.loads(line) for line in stderr.splitlines()]  # --log-format json: every line is an object
    started = next(line for line in lines if line["message"].startswith("meshfit serving"))
    assert started["logger"] == "meshfit.serve" and started["level"] == "INFO" and "time" in started
    assert (started["mode"], started["nodes"], started["gpus"]) == ("embedded", 8, 64)
    assert (started["http_port"], started["grpc_port"], started["policy"]) == (http_port, grpc_port, "meshfit")
    assert any(line["message"].startswith("meshfit stopped") and line["signal"] == "SIGTERM" for line in lines)
    for port in (http_port, grpc_port):  # both released (SO_REUSEADDR: a live listener would still refuse)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()
