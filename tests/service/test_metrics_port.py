"""`meshfit serve --metrics-port N`: the service's own registry on a port of its own (prometheus_client's server,
plain HTTP, GET only), next to /metrics on the main port; with mutual TLS on the main port the metrics port
stays plain HTTP and never reaches a verb; bad, clashing or taken ports are one line with exit 2 (the flag
checks are in tests/service/test_serve_cli.py); SIGTERM releases the port."""

from __future__ import annotations

import shutil
import signal
import socket

import pytest

from tests.service.test_serve_cli import assert_one_line_error, cluster_file, free_port, serve
from tests.service.tls_served import Served, call, client_context, filter_body, make_test_pki


def _sample(text: str, name: str) -> float:
    """The value of the one sample line starting with `name` (labels included) in a text exposition."""
    (value,) = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


def test_metrics_port_serves_the_same_registry_and_nothing_else(tmp_path):
    metrics_port = free_port()
    served = Served(tmp_path, "--metrics-port", str(metrics_port)).wait(None)
    try:
        status, body, headers = call(metrics_port, "GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain"), body[:200]
        assert _sample(body.decode(), "meshfit_gpus_free") == 64  # the served cluster: 8 nodes x 8 GPUs
        assert call(served.port, "POST", "/filter", filter_body())[0] == 200  # a verb on the main port ...
        text = call(metrics_port, "GET", "/metrics")[1].decode()  # ... is counted in the metrics port's registry
        assert _sample(text, 'meshfit_request_seconds_count{verb="filter"}') == 1
        assert call(served.port, "GET", "/metrics")[0] == 200  # /metrics stays on the main port too
        for path in ("/filter", "/scheduler/filter", "/scheduler/bind", "/volcano/predicate"):
            assert call(metrics_port, "POST", path, filter_body())[0] == 405  # GET only: no verb is reachable
        output = served.output()
        assert f"metrics: plain HTTP on 127.0.0.1:{metrics_port}" in output
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(30) == 0, served.output()
    finally:
        served.stop()
    with socket.socket() as sock:  # released on exit
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", metrics_port))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed to make certificates")
def test_with_mutual_tls_the_metrics_port_is_plain_http_and_the_verbs_still_need_a_certificate(tmp_path):
    pki = make_test_pki(tmp_path / "pki", client_names=("kube-scheduler",))
    metrics_port = free_port()
    served = Served(tmp_path, "--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file",
                    str(pki / "server.key"), "--client-ca-file", str(pki / "ca.crt"), "--allowed-client-names",
                    "kube-scheduler", "--metrics-port", str(metrics_port)).wait(client_context(pki))
    try:
        status, body, _ = call(metrics_port, "GET", "/metrics")  # plain HTTP: Prometheus needs no CA
        assert status == 200 and b"meshfit_gpus_free 64.0" in body
        assert call(served.port, "POST", "/filter", filter_body(), context=client_context(pki))[0] == 401
        scheduler = client_context(pki, "kube-scheduler")
        assert call(served.port, "POST", "/filter", filter_body(), context=scheduler)[0] == 200
        assert call(metrics_port, "POST", "/filter", filter_body())[0] == 405
        with pytest.raises(OSError):  # the main port speaks only TLS
            call(served.port, "GET", "/metrics")
    finally:
        served.stop()


def test_a_taken_metrics_port_is_one_line_before_any_work(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        result = serve("--cluster", str(cluster_file(tmp_path)), "--host", "127.0.0.1", "--port", str(free_port()),
                       "--grpc-port", "0", "--metrics-port", str(busy))
    assert_one_line_error(result, "cannot listen for metrics (--metrics-port)", str(busy))
