"""Issue 40 item 4: a green run looks green.  No traceback in a passing run -- their two causes fixed: a service's
background threads (the direct binder's waker, its pools) outliving the service and logging into a stream that
was gone, and the API double treating a client that hangs up as an error -- and one line of skip reasons, grouped,
at the end of the run (tests/skip_summary.py, printed by tests/conftest.py)."""

from __future__ import annotations

import io
import logging
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.service.ops.logs import configure_logging
from tests.k8s_double.server import ApiServerDouble
from tests.service.test_direct_binding import direct_service
from tests.skip_summary import SkipSummary

ROOT = Path(__file__).resolve().parents[2]


# ----- no traceback --------------------------------------------------------------------------------------------
def test_a_client_that_resets_its_connection_is_no_error_of_the_api_double(capfd):
    double = ApiServerDouble().start()
    try:
        for payload in (b"", b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n"):  # idle, and cut mid-request
            client = socket.create_connection(("127.0.0.1", int(double.url.rsplit(":", 1)[1])))
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
            client.sendall(payload)
            time.sleep(0.2)
            client.close()
        time.sleep(0.5)  # the handler threads see the reset
    finally:
        double.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err


def test_a_services_background_threads_end_with_it():
    service = direct_service(synchronous=False)
    with service.client:  # the app's lifespan: started, then shut down
        assert service.scheduler.direct.waking
    assert not service.scheduler.direct.waking and service.scheduler.direct.closed


def test_a_record_logged_after_the_serve_runs_stderr_was_closed_prints_no_logging_error(capfd):
    """`meshfit serve` run in process (a CLI runner) configures logging while stderr is the runner's buffer; a
    thread logging after the run must write to the stderr of now, not raise into logging's error traceback."""
    root, meshfit = logging.getLogger(), logging.getLogger("meshfit")
    levels = root.level, meshfit.level
    runner_stderr, real = io.StringIO(), sys.stderr
    sys.stderr = runner_stderr
    try:
        handler = configure_logging("text", "info")
    finally:
        sys.stderr = real
    runner_stderr.close()
    try:
        logging.getLogger("meshfit.bind").warning("a wake-up after the run")
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        meshfit.setLevel(levels[1])
    err = capfd.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    assert "a wake-up after the run" in err


# ----- the skip summary ----------------------------------------------------------------------------------------
REASONS = [
    "no real Kubernetes binaries (kube-apiserver, kube-scheduler; etcd from the folder or PATH): $MESHFIT_K8S_BIN=x",
    "no real Kubernetes binaries (kube-apiserver, kube-scheduler; etcd from the folder or PATH): $MESHFIT_K8S_BIN=x",
    "version-independent: runs on the newest Kubernetes found (1.37.2) only; MESHFIT_REALK8S_ALL_VERSIONS=1 runs it",
    "no helm ($MESHFIT_HELM unset, no /c/helm and no helm on the PATH): build it with k8sbuild/build_helm.sh",
    "no promtool: set MESHFIT_PROMTOOL or install it (Debian: apt-get install prometheus)",
    "could not import 'torch': No module named 'torch'",
    "needs a GPU (CUDA) for the NCCL path",
    "../shared/data/traces is not beside the checkout",
]


def test_skip_reasons_are_grouped_into_short_categories_with_counts():
    line = SkipSummary(lambda: ["1.36", "1.37"]).add(REASONS).line()
    assert line == ("8 skipped: 2 no Kubernetes binaries (build them with k8sbuild/build.sh 1.36 1.37), "
                    "1 ../shared/data/traces is not beside the checkout, 1 no GPU, "
                    "1 no helm (build it with k8sbuild/build_helm.sh), 1 no promtool, 1 no torch, "
                    "1 version-independent, run on the newest Kubernetes only")
    assert SkipSummary().line() is None


def test_a_run_without_binaries_ends_with_the_skip_summary_and_no_traceback(tmp_path):
    env = {**os.environ, "MESHFIT_K8S_BIN": str(tmp_path / "no-binaries-here"), "PYTHONPATH": str(ROOT)}
    env.pop("MESHFIT_REALK8S_ALL_VERSIONS", None)
    env.pop("CI", None)  # a newcomer's run: under CI=true a missing control plane fails (the test below)
    result = subprocess.run([sys.executable, "-m", "pytest", "tests/realk8s/test_harness.py", "-p", "no:cacheprovider",
                             "-n", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    summary, stats = lines[-2], lines[-1]
    skipped = int(stats.split(" skipped")[0].split()[-1])
    assert summary == (f"{skipped} skipped: {skipped} no Kubernetes binaries "
                       "(build them with k8sbuild/build.sh 1.34 1.35 1.36 1.37)"), lines[-3:]


def test_under_ci_a_missing_control_plane_fails_the_run_in_one_line_naming_the_build(tmp_path):
    env = {**os.environ, "MESHFIT_K8S_BIN": str(tmp_path / "no-binaries-here"), "PYTHONPATH": str(ROOT), "CI": "true"}
    result = subprocess.run([sys.executable, "-m", "pytest", "tests/realk8s/test_harness.py", "-p", "no:cacheprovider",
                             "-n", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Traceback" not in output and " passed" not in output and " skipped" not in output
    [line] = [text for text in output.splitlines() if text.startswith("Exit: ")]
    assert line.startswith("Exit: CI=true and no real Kubernetes control plane") and line.endswith(
        "build it with k8sbuild/build.sh 1.37"), line
