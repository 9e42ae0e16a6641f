"""`meshfit serve` with TLS: HTTPS, mutual TLS guarding the verbs (client certificate names), the bearer-token
alternative, gRPC over TLS, and one-line errors for bad TLS flags.

Certificates are made with the openssl CLI (EC P-256, fast): a CA, a server certificate for 127.0.0.1, client
certificates `kube-scheduler` (allowed) and `intruder` (same CA, not allowed), and one from another CA.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import subprocess
import time
import warnings
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2_grpc as pb_grpc
from scheduler.service.ops.tls import PEER_STATE_KEY, PeerIdentity, VerbAuth, identity_of, security_from_flags
from tests.service.test_serve_cli import assert_one_line_error, cluster_file
from tests.service.tls_served import MESHFIT, Served, call, client_context, filter_body, make_test_pki, openssl

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed to make certificates")

TOKEN = "s3cret-token-0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls(pki, tmp_path_factory):
    """mutual TLS, verbs only for a certificate named kube-scheduler."""
    served = Served(tmp_path_factory.mktemp("mtls"), "--tls-cert-file", str(pki / "server.crt"),
                    "--tls-private-key-file", str(pki / "server.key"), "--client-ca-file", str(pki / "ca.crt"),
                    "--allowed-client-names", "kube-scheduler,other-scheduler")
    try:
        yield served.wait(client_context(pki))
    finally:
        served.stop()


@pytest.fixture(scope="module")
def token_server(pki, tmp_path_factory):
    """HTTPS (no client CA), verbs behind a bearer token."""
    tmp = tmp_path_factory.mktemp("token")
    (tmp / "token").write_text(TOKEN + "\n")
    served = Served(tmp, "--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file", str(pki / "server.key"),
                    "--verb-token-file", str(tmp / "token"))
    try:
        yield served.wait(client_context(pki))
    finally:
        served.stop()


# --- HTTPS and mutual TLS --------------------------------------------------------------------------------------


def test_https_serves_and_plain_http_is_refused(mtls, pki):
    assert call(mtls.port, "GET", "/healthz", context=client_context(pki))[:2] == (200, b"ok")
    with pytest.raises((OSError, http.client.HTTPException)):  # the TLS handshake fails on a plain request
        call(mtls.port, "GET", "/healthz")


def test_tls_below_1_2_is_refused(mtls, pki):
    context = client_context(pki)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, OSError)):
        call(mtls.port, "GET", "/healthz", context=context)
    tls12 = client_context(pki)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert call(mtls.port, "GET", "/healthz", context=tls12)[0] == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/gangs", "/reservations"])
def test_read_only_endpoints_need_no_client_certificate(mtls, pki, path):
    assert call(mtls.port, "GET", path, context=client_context(pki))[0] == 200


@pytest.mark.parametrize("path", ["/filter", "/scheduler/filter", "/bind", "/scheduler/bind", "/preempt",
                                  "/prioritize", "/volcano/predicate", "/volcano/jobEnqueueable"])
def test_verbs_without_a_client_certificate_are_401(mtls, pki, path):
    status, body, _ = call(mtls.port, "POST", path, filter_body(), context=client_context(pki))
    assert status == 401
    reason = json.loads(body)["error"]
    assert "client certificate" in reason and "\n" not in reason


def test_a_client_certificate_with_another_name_is_403(mtls, pki):
    for path in ("/filter", "/bind", "/preempt"):
        status, body, _ = call(mtls.port, "POST", path, filter_body(), context=client_context(pki, "intruder"))
        assert status == 403, body
        assert "CN=intruder" in json.loads(body)["error"] and "--allowed-client-names" in json.loads(body)["error"]
    # ...while its read-only requests are fine
    assert call(mtls.port, "GET", "/gangs", context=client_context(pki, "intruder"))[0] == 200


def test_a_certificate_from_another_ca_fails_the_handshake(mtls, pki):
    with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
        call(mtls.port, "POST", "/filter", filter_body(), context=client_context(pki, "stranger"))


def test_the_allowed_client_calls_the_verbs(mtls, pki):
    context = client_context(pki, "kube-scheduler")
    status, body, _ = call(mtls.port, "POST", "/filter", filter_body("allowed"), context=context)
    assert status == 200, body
    reply = json.loads(body)
    assert reply["NodeNames"] and not reply.get("Error")
    node = reply["NodeNames"][0]
    pod = filter_body("allowed")["Pod"]["metadata"]
    status, body, _ = call(mtls.port, "POST", "/bind", {"PodName": pod["name"], "PodNamespace": pod["namespace"],
                                                        "PodUID": pod["uid"], "Node": node}, context=context)
    assert status == 200 and not json.loads(body).get("Error"), body
    gangs = json.loads(call(mtls.port, "GET", "/gangs", context=client_context(pki))[1])["gangs"]
    assert any(g.get("gang", g.get("key", "")).endswith("allowed") for g in gangs), gangs


def test_a_dns_subject_alt_name_is_matched(mtls, pki):
    status, body, _ = call(mtls.port, "POST", "/prioritize", filter_body("dns"), context=client_context(pki, "dns-named"))
    assert status == 200, body


def test_refusals_are_logged_one_line(mtls, pki):
    call(mtls.port, "POST", "/bind", filter_body(), context=client_context(pki, "intruder"))
    deadline = time.monotonic() + 10  # the log line is written after the answer: wait for it, not a fixed time

    def refused() -> bool:
        return any("refused: 403" in line and "/bind" in line for line in mtls.output().splitlines())

    while not refused() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert refused(), mtls.output()[-2000:]


# --- gRPC over TLS ---------------------------------------------------------------------------------------------


def _channel(port: int, pki: Path, cert: str | None) -> grpc.Channel:
    key = (pki / f"{cert}.key").read_bytes() if cert else None
    chain = (pki / f"{cert}.crt").read_bytes() if cert else None
    credentials = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes(), key, chain)
    return grpc.secure_channel(f"127.0.0.1:{port}", credentials)


def test_grpc_over_tls_answers_health_with_a_client_certificate(mtls, pki):
    with _channel(mtls.grpc_port, pki, "kube-scheduler") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        spec = pb.GangSpec(namespace="ml", name="grpc-gang", pods=1, gpus_per_pod=8)
        placed = pb_grpc.PlacementStub(channel).Place(pb.PlaceRequest(gang=spec, reserve=True), timeout=10)
        assert placed.reserved


def test_grpc_refuses_no_certificate_and_a_wrong_name(mtls, pki):
    with _channel(mtls.grpc_port, pki, None) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with _channel(mtls.grpc_port, pki, "intruder") as channel:
        stub = pb_grpc.PlacementStub(channel)
        spec = pb.GangSpec(namespace="ml", name="intruder-gang", pods=1, gpus_per_pod=8)
        assert stub.Place(pb.PlaceRequest(gang=spec, reserve=False), timeout=10).status  # a dry run is fine
        with pytest.raises(grpc.RpcError) as denied:
            stub.Place(pb.PlaceRequest(gang=spec, reserve=True), timeout=10)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


# --- bearer token ----------------------------------------------------------------------------------------------


def test_token_mode(token_server, pki):
    context = client_context(pki)
    status, body, headers = call(token_server.port, "POST", "/bind", filter_body(), context=context)
    assert status == 401 and "Bearer" in json.loads(body)["error"] and headers.get("www-authenticate", "").startswith("Bearer")
    status, body, _ = call(token_server.port, "POST", "/filter", filter_body(), context=context,
                           headers={"Authorization": "Bearer not-the-token"})
    assert status == 403 and json.loads(body) == {"error": "wrong bearer token for /filter"}
    status, body, _ = call(token_server.port, "POST", "/filter", filter_body("tok"), context=context,
                           headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and json.loads(body)["NodeNames"], body
    assert call(token_server.port, "GET", "/healthz", context=context)[0] == 200
    assert call(token_server.port, "GET", "/metrics", context=context)[0] == 200


def test_token_mode_grpc_reserve_needs_the_token(token_server, pki):
    credentials = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{token_server.grpc_port}", credentials) as channel:
        stub = pb_grpc.PlacementStub(channel)
        spec = pb.GangSpec(namespace="ml", name="tok-gang", pods=1, gpus_per_pod=8)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Place(pb.PlaceRequest(gang=spec, reserve=True), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = stub.Place(pb.PlaceRequest(gang=spec, reserve=True), timeout=10,
                           metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert reply.reserved


# --- the checks themselves, and flag errors --------------------------------------------------------------------


def test_identity_and_any_name_when_none_are_listed():
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "sched"),)),
            "subjectAltName": (("DNS", "a.example"), ("IP Address", "10.0.0.1"))}
    peer = identity_of(cert)
    assert peer == PeerIdentity(("sched",), ("a.example",)) and identity_of({}) is None and identity_of(None) is None
    scope = {"path": "/bind", "state": {PEER_STATE_KEY: peer}}
    assert VerbAuth("client-cert").check_scope(scope) is None
    assert VerbAuth("client-cert", frozenset({"a.example"})).check_scope(scope) is None
    assert VerbAuth("client-cert", frozenset({"b"})).check_scope(scope)[0] == 403
    assert VerbAuth("client-cert").check_scope({"path": "/bind", "state": {}})[0] == 401
    assert VerbAuth("client-cert").check_scope({"path": "/bind"})[0] == 401  # no state at all: fails closed


@pytest.mark.parametrize("case, fragment", [
    ("missing-cert", "--tls-cert-file"),
    ("missing-key", "--tls-private-key-file"),
    ("cert-only", "give both"),
    ("mismatch", "does not match"),
    ("garbage-ca", "--client-ca-file"),
    ("ca-without-cert", "--client-ca-file"),
    ("names-without-ca", "--allowed-client-names"),
    ("token-and-ca", "alternatives"),
    ("short-token", "--verb-token-file"),
    ("encrypted-key", "encrypted"),
])
def test_bad_tls_flags_are_one_line(pki, tmp_path, case, fragment):
    cert, key, ca = str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt")
    (tmp_path / "garbage").write_text("not a certificate\n")
    (tmp_path / "short").write_text("abc\n")
    openssl("pkey", "-in", str(pki / "server.key"), "-aes256", "-passout", "pass:x", "-out", "enc.key", cwd=tmp_path)
    flags = {
        "missing-cert": ["--tls-cert-file", str(tmp_path / "absent.crt"), "--tls-private-key-file", key],
        "missing-key": ["--tls-cert-file", cert, "--tls-private-key-file", str(tmp_path / "absent.key")],
        "cert-only": ["--tls-cert-file", cert],
        "mismatch": ["--tls-cert-file", cert, "--tls-private-key-file", str(pki / "intruder.key")],
        "garbage-ca": ["--tls-cert-file", cert, "--tls-private-key-file", key, "--client-ca-file",
                       str(tmp_path / "garbage")],
        "ca-without-cert": ["--client-ca-file", ca],
        "names-without-ca": ["--tls-cert-file", cert, "--tls-private-key-file", key, "--allowed-client-names", "x"],
        "token-and-ca": ["--tls-cert-file", cert, "--tls-private-key-file", key, "--client-ca-file", ca,
                         "--verb-token-file", str(tmp_path / "short")],
        "short-token": ["--verb-token-file", str(tmp_path / "short")],
        "encrypted-key": ["--tls-cert-file", cert, "--tls-private-key-file", str(tmp_path / "enc.key")],
    }[case]
    if case in ("missing-cert", "mismatch"):  # two through the CLI (one line, exit 2), the rest in-process
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        result = subprocess.run([*MESHFIT, "serve", "--cluster", str(cluster_file(tmp_path)), "--port", "0",
                                 "--grpc-port", "0", *flags], capture_output=True, text=True, timeout=60, env=env)
        assert_one_line_error(result, fragment)
        return
    options = dict(zip(flags[::2], flags[1::2]))
    with pytest.raises(ValueError) as error:
        security_from_flags(*(Path(options[f]) if f in options else None
                              for f in ("--tls-cert-file", "--tls-private-key-file", "--client-ca-file")),
                            options.get("--allowed-client-names"),
                            Path(options["--verb-token-file"]) if "--verb-token-file" in options else None)
    assert fragment in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("impl", ["h11", "httptools"])
def test_both_uvicorn_protocols_carry_the_peer_into_scope_state(pki, impl):
    """The peer certificate reaches `scope["state"]` with either of uvicorn's HTTP implementations."""
    import threading

    import uvicorn

    from scheduler.service.ops.server import bind_http_socket
    from scheduler.service.ops.tls import ServerTLS, peer_protocol_class

    if impl == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    else:
        base = pytest.importorskip("uvicorn.protocols.http.httptools_impl").HttpToolsProtocol

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        peer = (scope.get("state") or {}).get(PEER_STATE_KEY)
        body = json.dumps(list(peer.names) if peer else None).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    tls = ServerTLS.load(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    sock = bind_http_socket("127.0.0.1", 0)
    config = uvicorn.Config(app, log_config=None, lifespan="off", http=peer_protocol_class(base),
                            ssl_context_factory=lambda _c, _d: tls.context)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        port = sock.getsockname()[1]
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(call(port, "GET", "/", context=client_context(pki, "dns-named"))[1]) == ["whoever",
                                                                                                  "kube-scheduler"]
        assert json.loads(call(port, "GET", "/", context=client_context(pki))[1]) is None
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
