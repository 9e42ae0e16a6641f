"""The real kube-scheduler calls meshfit over HTTPS with a client certificate (extender `enableHTTPS` +
`tlsConfig`), and a gang gets bound; a scheduler presenting a certificate meshfit does not allow binds nothing."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from tests.realk8s.cluster_builders import (
    assert_no_overcommit, assert_no_partial_gangs, create_gang, create_nodes, gang_status, pending_reasons, wait_for,
)
from tests.realk8s.controlplane import MeshfitProcess
from tests.realk8s.scenario import KubeletStandIn
from tests.service.test_service_tls import client_context, make_test_pki

pytestmark = pytest.mark.realk8s


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
