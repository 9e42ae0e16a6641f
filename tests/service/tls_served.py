"""Helpers for tests of `meshfit serve` with TLS: a test PKI made with the openssl CLI, HTTPS calls, and a served
subprocess."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

from tests.service.helpers import gang_pod
from tests.service.test_serve_cli import cluster_file, free_port

MESHFIT = [sys.executable, "-c", "from scheduler.cli import main; main()"]


def openssl(*args: str, cwd: Path) -> None:
    """Run the openssl CLI in `cwd`; a failure raises."""
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(pki: Path, name: str, ca: str, cn: str, extensions: str) -> None:
    """`name`.key / `name`.crt: an EC key and a certificate for CN=`cn` signed by `ca` (.crt/.key)."""
    (pki / f"{name}.ext").write_text(extensions)
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=pki)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)


def make_test_pki(pki: Path, client_names: tuple[str, ...] = ("kube-scheduler", "intruder")) -> Path:
    """ca.crt, server.crt/key (SAN 127.0.0.1, localhost), a client cert per name, other-ca + stranger.crt/key."""
    pki.mkdir(parents=True, exist_ok=True)
    for ca, cn in (("ca", "meshfit-test-ca"), ("other-ca", "someone-else-ca")):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{ca}.key", "-subj", f"/CN={cn}", "-days", "2", "-out", f"{ca}.crt", cwd=pki)
    _leaf(pki, "server", "ca", "meshfit", "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                                          "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
    for name in client_names:
        _leaf(pki, name, "ca", name, client_ext)
    _leaf(pki, "stranger", "other-ca", "kube-scheduler", client_ext)  # the right name, the wrong CA
    _leaf(pki, "dns-named", "ca", "whoever", client_ext + "subjectAltName=DNS:kube-scheduler\n")
    return pki


def client_context(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    """Trusts the test CA; presents `cert` (a name in the PKI) when given."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        context.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return context


def call(port: int, method: str, path: str, body: dict | None = None, context: ssl.SSLContext | None = None,
         headers: dict | None = None) -> tuple[int, bytes, dict]:
    """(status, body, headers) of one request over HTTPS (`context`) or plain HTTP (None)."""
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


def filter_body(name: str = "job") -> dict:
    """A /filter body for pod 0 of a one-pod 8-GPU gang `name`, offered two nodes."""
    return {"Pod": gang_pod(name, 0, 1, gpus=8), "Nodes": None, "NodeNames": ["n-0-0", "n-0-1"]}


class Served:
    """A `meshfit serve --cluster` subprocess with TLS flags."""

    def __init__(self, tmp: Path, *flags: str) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        self.log = open(tmp / f"serve-{self.port}.log", "w+")
        self.process = subprocess.Popen([*MESHFIT, "serve", "--cluster", str(cluster_file(tmp)), "--host",
                                         "127.0.0.1", "--port", str(self.port), "--grpc-port", str(self.grpc_port),
                                         "--policy", "first-fit", *flags],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait(self, context: ssl.SSLContext | None, seconds: float = 60) -> "Served":
        """Until /healthz answers 200 over `context` (the process exiting or `seconds` passing fails)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"meshfit serve exited: {self.output()}")
            try:
                if call(self.port, "GET", "/healthz", context=context)[0] == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"meshfit serve did not become healthy: {self.output()}")

    def output(self) -> str:
        """Everything the process has written so far."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        """Terminate (then kill) the process and close its log."""
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
