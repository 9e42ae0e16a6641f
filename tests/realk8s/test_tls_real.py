"""The real kube-scheduler calls meshfit over HTTPS with a client certificate (extender `enableHTTPS` +
`tlsConfig`), and a gang gets bound; a scheduler presenting a certificate meshfit does not allow binds nothing.

The shipped pair too: kube-scheduler runs manifests/kube-scheduler-config.yaml and meshfit the flags of
manifests/meshfit.yaml's Deployment with the mtls component (files from docs/deployment.md's openssl commands, addresses rewritten to
loopback): a plain GPU pod is bound through the extender's filter and bind verbs over mutual TLS, a verb
without the client certificate is refused, and the Deployment's `--metrics-port` serves the counts of the
scheduler's calls over plain HTTP.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.kube.kustomize_render import identity, render
from tests.realk8s.cluster_builders import (
    assert_no_overcommit, assert_no_partial_gangs, create_gang, create_nodes, create_plain_pods, gang_status,
    pending_reasons, wait_for,
)
from tests.kube.test_manifests_tls import make_docs_pki
from tests.realk8s.controlplane import ManagedProcess, MeshfitProcess, free_port
from tests.realk8s.scenario import KubeletStandIn
from tests.service.tls_served import client_context, make_test_pki

pytestmark = pytest.mark.realk8s
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CLIENT_FILES = {"tls.crt": "client.crt", "tls.key": "client.key", "ca.crt": "ca.crt"}
"""The scheduler Secret's file names -> the files docs/deployment.md's openssl commands make."""
SERVER_FILES = {"tls.crt": "tls.crt", "tls.key": "tls.key", "ca.crt": "ca.crt"}
"""meshfit's Secret (meshfit-system/meshfit-tls) file names -> the same files of the documented commands."""


@pytest.fixture
def tls_stack(kube, tmp_path):
    """meshfit serve with HTTPS + mutual TLS (verbs only for CN kube-scheduler); kube-scheduler started by the
    test through `start(cert)`; everything stopped at the end."""
    plane = kube.control_plane
    pki = make_test_pki(tmp_path / "pki")
    meshfit = MeshfitProcess(plane.kubeconfig, plane.logs / f"meshfit-{kube.namespace}.log", [
        "--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file", str(pki / "server.key"),
        "--client-ca-file", str(pki / "ca.crt"), "--allowed-client-names", "kube-scheduler"],
        tls_context=client_context(pki))
    kubelet = KubeletStandIn(kube.core, kube.namespace).start()
    try:
        meshfit.start()
        kube.extra_logs.append(meshfit.process)

        def start(cert: str):
            tls = {"certFile": str(pki / f"{cert}.crt"), "keyFile": str(pki / f"{cert}.key"),
                   "caFile": str(pki / "ca.crt")}
            if plane.scheduler is not None and plane.scheduler.alive():
                return plane.restart_scheduler(extender_url=meshfit.url, extender_tls=tls)
            return plane.start_scheduler(meshfit.url, extender_tls=tls)

        yield meshfit, pki, start
    finally:
        plane.stop_scheduler()
        meshfit.stop()
        kubelet.stop()


def _post(meshfit: MeshfitProcess, path: str, context) -> tuple[int, dict]:
    conn = http.client.HTTPSConnection("127.0.0.1", meshfit.port, timeout=10, context=context)
    try:
        conn.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_kube_scheduler_calls_meshfit_over_mutual_tls(kube, tls_stack):
    meshfit, pki, start = tls_stack
    assert meshfit.url.startswith("https://")
    # the verbs really are guarded: no certificate -> 401, another name from the same CA -> 403
    assert _post(meshfit, "/scheduler/bind", client_context(pki))[0] == 401
    assert _post(meshfit, "/scheduler/bind", client_context(pki, "intruder"))[0] == 403

    create_nodes(kube.core, 4, gpus=8, leaf_size=4)
    start("intruder")  # a scheduler with a certificate meshfit does not allow: the extender refuses it
    create_gang(kube.core, kube.namespace, "job-tls", pods=2, gpus_per_pod=8, parallelism="tp=8,dp=2", seed=3)
    wait_for(lambda: "refused: 403" in meshfit.tail(200), timeout=30, interval=0.5,
             message="meshfit never refused the intruder scheduler", describe=lambda: meshfit.tail(30))
    time.sleep(2)
    assert gang_status(kube.core, kube.namespace) == {"job-tls": (0, 2)}

    start("kube-scheduler")  # the allowed certificate: the gang is placed and bound over HTTPS
    wait_for(lambda: gang_status(kube.core, kube.namespace).get("job-tls") == (2, 2), timeout=60, interval=0.5,
             message=lambda _: f"gang job-tls fully bound, status {gang_status(kube.core, kube.namespace)}",
             describe=lambda: pending_reasons(kube.core, kube.namespace) + "\n" + kube.tail_logs(25))
    assert_no_partial_gangs(kube.core, kube.namespace)
    assert_no_overcommit(kube.core)
    assert len({p.spec.node_name for p in kube.core.list_namespaced_pod(kube.namespace).items}) == 2


# ----- the shipped manifests: kube-scheduler-config.yaml against meshfit.yaml's flags ----------------------
def start_kube_scheduler(kube, config: dict, name: str) -> tuple[ManagedProcess, int]:
    """kube-scheduler with `config` (rewritten copy of the manifest) on a free secure port."""
    plane = kube.control_plane
    path = plane.run_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    process = ManagedProcess(name, [str(plane.bin_dir / "kube-scheduler"), f"--config={path}",
                                    "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=2"],
                             plane.logs / f"{name}.log").start()
    kube.extra_logs.append(process)
    return process, port


def manifest_scheduler_config(kube, pki: Path, meshfit_port: int | None = None) -> dict:
    """manifests/kube-scheduler-config.yaml pointed at this control plane (kubeconfig) and at meshfit on
    127.0.0.1:`meshfit_port` (default: a free port), its tlsConfig files replaced by `pki`'s; the server name
    stays the manifest's host (tlsConfig.serverName), so meshfit's certificate is checked for it."""
    config = yaml.safe_load((MANIFESTS / "kube-scheduler-config.yaml").read_text())
    assert "clientConnection" not in config  # in-cluster by default
    config["clientConnection"] = {"kubeconfig": str(kube.control_plane.scheduler_kubeconfig)}
    for extender in config["extenders"]:
        url = urlsplit(extender["urlPrefix"])
        assert url.scheme == "https" and extender["enableHTTPS"] is True
        extender["urlPrefix"] = f"https://127.0.0.1:{meshfit_port or free_port()}{url.path}"
        tls = extender["tlsConfig"]
        assert "serverName" not in tls
        tls.update({key: str(pki / CLIENT_FILES[Path(path).name]) for key, path in tls.items()},
                   serverName=url.hostname)
    return config


def manifest_meshfit_args(pki: Path, metrics_port: int) -> list[str]:
    """The meshfit Deployment's args (the Kustomize base with the mtls component) for a loopback run: TLS files from `pki`, `--metrics-port` on a free port;
    --host / --port / --grpc-port are MeshfitProcess's, and no --leader-elect (one replica; tested elsewhere)."""
    (deployment,) = [d for d in render(("mtls",)) if identity(d) == ("Deployment", "meshfit-system", "meshfit")]
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    out, skip = [], {"--host": 1, "--port": 1, "--grpc-port": 1, "--leader-elect": 0}
    while args:
        flag = args.pop(0)
        if flag in skip:
            del args[:skip[flag]]
        elif flag in ("--tls-cert-file", "--tls-private-key-file", "--client-ca-file"):
            out += [flag, str(pki / SERVER_FILES[Path(args.pop(0)).name])]
        elif flag == "--metrics-port":
            out += [flag, str(metrics_port)]
            args.pop(0)
        else:
            out.append(flag)
    assert "--allowed-client-names" in out and "--client-ca-file" in out, out
    return out


def test_manifest_scheduler_config_calls_meshfit_with_the_manifest_flags_over_mutual_tls(kube, tmp_path):
    plane = kube.control_plane
    pki = make_docs_pki(tmp_path / "pki")
    trust = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    trust.check_hostname = False  # the certificate names meshfit.meshfit-system.svc; this meshfit is 127.0.0.1
    metrics_port = free_port()
    meshfit = MeshfitProcess(plane.kubeconfig, plane.logs / f"meshfit-{kube.namespace}.log",
                             manifest_meshfit_args(pki, metrics_port), tls_context=trust)
    scheduler = None
    try:
        meshfit.start()
        kube.extra_logs.append(meshfit.process)
        assert _post(meshfit, "/scheduler/filter", trust)[0] == 401  # no client certificate: refused
        with pytest.raises(OSError):  # and no plain HTTP on the verb port
            urllib.request.urlopen(f"http://127.0.0.1:{meshfit.port}/healthz", timeout=5)
        config = manifest_scheduler_config(kube, pki, meshfit.port)
        config["leaderElection"]["leaderElect"] = False  # its Lease: test_manifests_real.py
        scheduler, _ = start_kube_scheduler(kube, config, "kube-scheduler-manifest-tls")
        create_nodes(kube.core, 2, gpus=8, leaf_size=2)
        # a plain GPU pod: only kube-scheduler, through the extender's filter and bind verbs, can bind it
        # (meshfit binds gangs on its own from the watch, so a bound gang would prove nothing here)
        (pod,) = create_plain_pods(kube.core, kube.namespace, "plain", 1, gpus=1)
        wait_for(lambda: kube.core.read_namespaced_pod(pod, kube.namespace).spec.node_name, timeout=60, interval=0.5,
                 message=f"pod {pod} bound through meshfit's extender verbs",
                 describe=lambda: pending_reasons(kube.core, kube.namespace) + "\n" + scheduler.tail(30)
                 + "\n" + meshfit.tail(30))
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()  # the metrics port: plain HTTP, the scheduler's calls counted
        counts = {line.split('verb="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("meshfit_request_seconds_count{")}
        assert counts.get("filter", 0) >= 1 and counts.get("bind", 0) >= 1, counts
        log = meshfit.tail(400)
        assert "metrics: plain HTTP" in log and "verbs need a client certificate named kube-scheduler" in log
        assert log.count("refused: ") == 1, log  # only the test's own call: the scheduler's all carried the cert
    finally:
        if scheduler is not None:
            scheduler.stop()
        meshfit.stop()
