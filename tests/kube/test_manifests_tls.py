"""manifests/: mutual TLS between kube-scheduler and meshfit, and /metrics on a port of its own.

meshfit's Deployment serves HTTPS from the Secret it mounts and allows only the client certificate
named kube-scheduler; the probes use HTTPS; the second scheduler (and kube-scheduler-config.yaml)
calls https:// with the client certificate from its Secret; certificates.yaml (cert-manager) makes
exactly those Secrets and docs/deployment.md's openssl commands make files meshfit accepts; the
Service and ServiceMonitor agree on a `metrics` port that is `--metrics-port`; the NetworkPolicy
admits the scheduler on the verb ports and Prometheus on the metrics port alone.  (The real
kube-scheduler calling a TLS meshfit with these settings: tests/realk8s/test_manifests_real.py.)
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scheduler.service.ops.tls import security_from_flags
from tests.kube.test_image_and_dashboard import cli_accepts
from tests.kube.test_manifests import DOCS, REPO, find, meshfit_pod_spec, service_url, validate

TLS_FLAGS = ("--tls-cert-file", "--tls-private-key-file", "--client-ca-file")
CERT_MANAGER = "cert-manager.io/v1"


def arg(args: list[str], flag: str) -> str:
    """The value following `flag` in a container's args."""
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


def secret_of_file(pod: dict, container: dict, path: str) -> str:
    """Name of the Secret whose read-only volume holds `path` in `container` (asserts there is one)."""
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mount.get("readOnly") is True, mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return volume["secret"]["secretName"]


def meshfit_container() -> dict:
    """meshfit's one container."""
    (container,) = meshfit_pod_spec()["containers"]
    return container


def scheduler_pod() -> dict:
    """The meshfit-scheduler Deployment's pod spec."""
    return find("Deployment", "meshfit-scheduler")["spec"]["template"]["spec"]


def test_meshfit_runs_mutual_tls_from_its_secret_allowing_only_kube_scheduler():
    container, pod = meshfit_container(), meshfit_pod_spec()
    args = container["args"]
    cli_accepts(["serve", *args])
    secrets = {secret_of_file(pod, container, arg(args, flag)) for flag in TLS_FLAGS}
    assert secrets == {"meshfit-tls"}
    assert [Path(arg(args, flag)).name for flag in TLS_FLAGS] == ["tls.crt", "tls.key", "ca.crt"]  # kubernetes.io/tls
    assert arg(args, "--allowed-client-names") == "kube-scheduler"
    assert "--verb-token-file" not in args
    assert pod["securityContext"]["fsGroup"] == 65532  # the Secret's files are group-readable only
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["defaultMode"] == 0o440


def test_probes_use_https_on_paths_the_service_answers():
    from starlette.testclient import TestClient  # noqa: PLC0415

    from scheduler.cache.state import ClusterState  # noqa: PLC0415
    from scheduler.service.app import build_scheduler, create_app  # noqa: PLC0415
    from scheduler.service.binding.binder_memory import MemoryBinder  # noqa: PLC0415

    container = meshfit_container()
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "extender", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "extender", "scheme": "HTTPS"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["extender"] == int(arg(container["args"], "--port"))
    scheduler, metrics = build_scheduler(ClusterState(), MemoryBinder(), "first-fit")
    client = TestClient(create_app(scheduler, metrics))
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code in (200, 503)  # served (503 only while not synced / standby)


def test_service_deployment_and_service_monitor_agree_on_ports():
    service, args = find("Service", "meshfit"), meshfit_container()["args"]
    ports = {p["name"]: p["containerPort"] for p in meshfit_container()["ports"]}
    assert ports == {"extender": 8888, "grpc": 9090, "metrics": 8889}
    assert {p["targetPort"]: p["port"] for p in service["spec"]["ports"]} == ports
    assert {p["name"] for p in service["spec"]["ports"]} == set(ports)
    assert [int(arg(args, f)) for f in ("--port", "--grpc-port", "--metrics-port")] == [8888, 9090, 8889]
    (endpoint,) = find("ServiceMonitor", "meshfit")["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint.get("scheme", "http")) == ("metrics", "/metrics", "http")


def test_scheduler_calls_meshfit_over_https_with_its_client_certificate():
    config = find("KubeSchedulerConfiguration")
    assert len(config["extenders"]) == 2  # the main extender and the guard: both over mutual TLS
    pod = scheduler_pod()
    (container,) = pod["containers"]
    for extender in config["extenders"]:
        url = urlsplit(extender["urlPrefix"])
        assert url.scheme == "https" and (url.hostname, url.port) == service_url()
        assert extender["enableHTTPS"] is True
        tls = extender["tlsConfig"]
        assert set(tls) == {"certFile", "keyFile", "caFile"}  # caFile: without it the scheduler verifies nothing
        assert not tls.get("insecure")
        assert {secret_of_file(pod, container, tls[key]) for key in tls} == {"meshfit-scheduler-client-tls"}
        assert [Path(tls[k]).name for k in ("certFile", "keyFile", "caFile")] == ["tls.crt", "tls.key", "ca.crt"]
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def certificate(secret: str) -> dict:
    """The cert-manager Certificate that writes Secret `secret`."""
    (found,) = [d for _, d in DOCS if d["kind"] == "Certificate" and d["spec"]["secretName"] == secret]
    return found


def test_cert_manager_makes_exactly_the_secrets_the_deployments_mount():
    kinds = {(d["apiVersion"], d["kind"]) for f, d in DOCS if f == "certificates.yaml"}
    assert kinds == {(CERT_MANAGER, "ClusterIssuer"), (CERT_MANAGER, "Certificate")}
    for _, doc in DOCS:
        if doc["apiVersion"] == CERT_MANAGER:
            assert validate(doc) == [], doc["metadata"]["name"]
    server, client = certificate("meshfit-tls"), certificate("meshfit-scheduler-client-tls")
    assert server["metadata"]["namespace"] == find("Deployment", "meshfit")["metadata"]["namespace"]
    assert client["metadata"]["namespace"] == find("Deployment", "meshfit-scheduler")["metadata"]["namespace"]
    host = urlsplit(find("KubeSchedulerConfiguration")["extenders"][0]["urlPrefix"]).hostname
    assert host in server["spec"]["dnsNames"] and "server auth" in server["spec"]["usages"]
    assert client["spec"]["commonName"] == arg(meshfit_container()["args"], "--allowed-client-names")
    assert "client auth" in client["spec"]["usages"] and "dnsNames" not in client["spec"]
    # one CA signs both, so each Secret's ca.crt verifies the other side
    assert server["spec"]["issuerRef"] == client["spec"]["issuerRef"] == {
        "name": "meshfit-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    issuer = find("ClusterIssuer", "meshfit-ca")
    ca = certificate(issuer["spec"]["ca"]["secretName"])
    assert ca["spec"]["isCA"] is True and ca["metadata"]["namespace"] == "cert-manager"  # cluster resource namespace
    assert ca["spec"]["issuerRef"]["name"] == find("ClusterIssuer", "meshfit-selfsigned")["metadata"]["name"]


def docs_openssl_block() -> str:
    """docs/deployment.md's openssl commands that make the CA, meshfit's and kube-scheduler's certificates."""
    from tests.usability.docs_blocks import blocks  # noqa: PLC0415

    (block,) = [b for b in blocks(REPO / "docs" / "deployment.md") if b.runnable and "openssl req -x509" in b.text]
    return block.script()


def make_docs_pki(folder: Path) -> Path:
    """Run the documented openssl commands in `folder`; the folder holding ca.crt, tls.crt/key, client.crt/key."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", "-euo", "pipefail", "-c", docs_openssl_block()], cwd=folder, check=True,
                   capture_output=True, timeout=60)
    return folder / "meshfit-tls"


def cert_names(path: Path) -> tuple[str, set[str]]:
    """(subject CN, DNS subjectAltNames) of a PEM certificate."""
    decoded = ssl._ssl._test_decode_cert(str(path))  # noqa: SLF001 - the stdlib's own PEM decoder
    (cn,) = [v for rdn in decoded["subject"] for k, v in rdn if k == "commonName"]
    return cn, {v for kind, v in decoded.get("subjectAltName", ()) if kind == "DNS"}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed")
def test_documented_openssl_certificates_fit_the_manifests(tmp_path):
    pki = make_docs_pki(tmp_path)
    args = meshfit_container()["args"]
    tls, auth = security_from_flags(pki / "tls.crt", pki / "tls.key", pki / "ca.crt",
                                    arg(args, "--allowed-client-names"), None)
    assert tls.mutual and auth.mode == "client-cert" and auth.allowed_names == {"kube-scheduler"}
    host = urlsplit(find("KubeSchedulerConfiguration")["extenders"][0]["urlPrefix"]).hostname
    assert host in cert_names(pki / "tls.crt")[1]
    assert cert_names(pki / "client.crt")[0] == "kube-scheduler"
    verify = subprocess.run(["openssl", "verify", "-CAfile", "ca.crt", "-purpose", "sslclient", "client.crt"],
                            cwd=pki, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))  # the scheduler's side loads too
    context.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))


def selects(selector: dict, labels: dict) -> bool:
    """matchLabels-only label selector semantics."""
    assert set(selector) == {"matchLabels"}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_network_policy_admits_the_scheduler_on_verbs_and_prometheus_on_metrics_only():
    policy = find("NetworkPolicy", "meshfit")
    deployment = find("Deployment", "meshfit")
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert selects(policy["spec"]["podSelector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in meshfit_container()["ports"]}
    scheduler_rule, monitoring_rule = policy["spec"]["ingress"]
    for rule in (scheduler_rule, monitoring_rule):
        assert len(rule["from"]) == 1 and "ipBlock" not in rule["from"][0]  # never "from anywhere"
        assert all(p["protocol"] == "TCP" for p in rule["ports"])
    assert {p["port"] for p in scheduler_rule["ports"]} == {ports["extender"], ports["grpc"]}
    assert {p["port"] for p in monitoring_rule["ports"]} == {ports["metrics"]}  # never the verb port
    peer = scheduler_rule["from"][0]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert peer["podSelector"] == {"matchLabels": {"component": "kube-scheduler"}}
    scheduler = find("Deployment", "meshfit-scheduler")  # the bundled second scheduler is one of the admitted pods
    assert scheduler["metadata"]["namespace"] == "kube-system"
    assert selects(peer["podSelector"], scheduler["spec"]["template"]["metadata"]["labels"])
    assert monitoring_rule["from"][0] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
