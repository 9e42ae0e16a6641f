"""PKI and kubeconfigs for the loopback control plane: a CA, the apiserver's serving cert, SA keys, static tokens."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


_APISERVER_CNF = """[req]
distinguished_name = dn
req_extensions = v3_req
[dn]
[v3_req]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc
"""


def make_pki(pki: Path) -> None:
    """CA, apiserver serving cert, service-account key pair and static tokens, as up.sh makes them."""
    pki.mkdir(parents=True, exist_ok=True)
    (pki / "apiserver.cnf").write_text(_APISERVER_CNF)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-subj", "/CN=local-k8s-ca",
             "-days", "365", "-out", "ca.crt", cwd=pki)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-subj", "/CN=kube-apiserver",
             "-out", "apiserver.csr", "-config", "apiserver.cnf", cwd=pki)
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "365", "-extensions", "v3_req", "-extfile", "apiserver.cnf", "-out", "apiserver.crt", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    admin, sched, kcm = os.urandom(24).hex(), os.urandom(24).hex(), os.urandom(24).hex()
    (pki / "admin.token").write_text(admin)
    (pki / "scheduler.token").write_text(sched)
    (pki / "controller-manager.token").write_text(kcm)
    (pki / "tokens.csv").write_text(f'{admin},admin,uid-admin,"system:masters"\n'
                                    f"{sched},system:kube-scheduler,uid-kube-scheduler\n"
                                    f"{kcm},system:kube-controller-manager,uid-kube-controller-manager\n")
    for path in pki.iterdir():
        if path.suffix in (".key", ".token", ".csv"):
            path.chmod(0o600)


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str) -> Path:
    """A token kubeconfig (JSON is valid YAML) for `user`."""
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
              "users": [{"name": user, "user": {"token": token}}],
              "contexts": [{"name": "local", "context": {"cluster": "local", "user": user, "namespace": "default"}}],
              "current-context": "local"}
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


