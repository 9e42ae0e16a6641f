"""Issue 40 item 5: uniform exits.  Bad input exits 2 with one line naming the file or the flag; a topology level
the cluster lacks is exit 2 in a required constraint and a warning in a preferred one (never "unschedulable");
a model-key typo gets a did-you-mean; `--url HOST:PORT` takes a scheme; a manifest the reader cannot use names
its file."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.placement.capacity import constraint_levels
from scheduler.handoff.manifests import load_job
from tests.builders import make_nodelist, write_objects
from topology.loaders import load_cluster

ROOT = Path(__file__).resolve().parents[2]
INDEXED_JOB = (ROOT / "tests" / "fixtures" / "jobs" / "indexed-job.yaml").read_text()
RUNNER = CliRunner()


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    """A 16-node HGX H100 cluster file (levels spine, leaf, host)."""
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=16))


def job_file(folder: Path, old: str, new: str, name: str = "job.yaml") -> Path:
    """The Indexed Job fixture with `old` replaced by `new`."""
    assert old in INDEXED_JOB
    path = folder / name
    path.write_text(INDEXED_JOB.replace(old, new))
    return path


def one_error_line(result, *needles: str) -> str:
    """The one stderr line of a bad-input exit; it contains every needle."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    assert result.stdout == ""
    return lines[0]


# ----- a level the cluster lacks ------------------------------------------------------------------------------
def test_an_unknown_required_level_is_bad_input_naming_the_file_and_the_nearest_level(cluster_file, tmp_path):
    job = job_file(tmp_path, "meshfit.io/required-level: leaf", "meshfit.io/required-level: leaff")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job)])
    one_error_line(result, str(job), "required topology level", "'leaff'", "did you mean 'leaf'?")


def test_an_unknown_preferred_level_is_a_warning_and_the_job_is_placed(cluster_file, tmp_path):
    job = job_file(tmp_path, "meshfit.io/required-level: leaf", "meshfit.io/preferred-level: leaff")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job), "-o", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "placed"
    (warning,) = [w for w in document["warnings"] if "preferred topology level" in w]
    assert str(job) in warning and "did you mean 'leaf'?" in warning
    assert f"warning: {warning}" in result.stderr


def test_the_service_does_not_refuse_a_gang_for_an_unknown_preference(cluster_file, tmp_path):
    """The policies see an unknown preferred level as none (the extender never answers "unschedulable" for it)."""
    job = job_file(tmp_path, "meshfit.io/required-level: leaf", "meshfit.io/preferred-level: leaff")
    assert constraint_levels(load_job(job), load_cluster(cluster_file)) == (None, None)


# ----- did-you-mean for every key typo ------------------------------------------------------------------------
def test_a_model_key_typo_gets_a_did_you_mean_and_names_the_file(cluster_file, tmp_path):
    job = job_file(tmp_path, '"tp=2,dp=4"', '"tp=2,dp=4"\n        meshfit.io/model: "params=7e9,micro-bach=2"')
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job)])
    one_error_line(result, str(job), "meshfit.io/model", "'micro-bach'", "did you mean 'micro-batch'?")


def test_a_manifest_without_api_version_names_its_file(cluster_file, tmp_path):
    job = tmp_path / "no-kind.yaml"
    job.write_text("metadata: {name: x}\nspec: {}\n")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job)])
    one_error_line(result, str(job), "apiVersion and kind")


def test_a_utf16_manifest_is_read_and_any_refusal_names_the_file(cluster_file, tmp_path):
    job = tmp_path / "utf16.yaml"
    job.write_text(INDEXED_JOB.replace("apiVersion: batch/v1\n", ""), encoding="utf-16")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job)])
    one_error_line(result, str(job), "apiVersion and kind")


# ----- --url without a scheme ---------------------------------------------------------------------------------
class GangsHandler(BaseHTTPRequestHandler):
    """Answers GET /gangs with one gang."""

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        """The gang list."""
        data = json.dumps({"gangs": [{"gang": "ml/llama", "state": "bound", "bound": 2, "pods": 2}]}).encode()
        self.send_response(200 if self.path == "/gangs" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
        """No access log."""


@pytest.fixture
def gangs_service():
    """A stand-in service on loopback: its `host:port`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), GangsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_url_without_a_scheme_takes_http(gangs_service):
    result = RUNNER.invoke(app, ["gangs", "--url", gangs_service, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [g["gang"] for g in json.loads(result.stdout)["gangs"]] == ["ml/llama"]


@pytest.mark.parametrize("url,why", [("ftp://host:1", "the scheme must be http or https"),
                                     ("http://:8888", "no host"), ("localhost:http", "the port must be a number")],
                         ids=["scheme", "host", "port"])
def test_a_url_that_cannot_be_a_service_is_one_line_naming_the_flag(url, why):
    result = RUNNER.invoke(app, ["gangs", "--url", url])
    one_error_line(result, "--url must be http://HOST:PORT", why)


def test_the_scheme_follows_the_tls_flags():
    from scheduler.cli.service_url import service_url

    assert service_url("127.0.0.1:8888") == "http://127.0.0.1:8888"
    assert service_url("127.0.0.1:8888", tls=True) == "https://127.0.0.1:8888"
    assert service_url("https://meshfit.meshfit-system.svc:8888/") == "https://meshfit.meshfit-system.svc:8888"
