"""The shipped `meshfit` profile (DefaultPreemption off: meshfit preempts for its pods) and the one docs/deployment.md
gives to turn kube-scheduler's own preemption back on, run by the real kube-scheduler of every version with the shipped
configuration around them: a pod of the shipped profile that fits no node gets no preemption attempt, one of the
documented profile gets one (kube-scheduler's FitError carries a `preemption:` part only when a PostFilter plugin
ran)."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
import yaml

from tests.kube.test_manifests_tls import make_docs_pki
from tests.realk8s.cluster_builders import create_nodes, wait_for
from tests.realk8s.controlplane import http_ok, wait_until
from tests.realk8s.test_tls_real import manifest_scheduler_config, start_kube_scheduler

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="the scheduler configuration API and the PostFilter path are per version")]

DEPLOYMENT_DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"


def documented_profile() -> dict:
    """The `meshfit` profile of the YAML block in docs/deployment.md that gives kube-scheduler its preemption back."""
    blocks = re.findall(r"```yaml\n(.*?)```", DEPLOYMENT_DOC.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "DefaultPreemption included" in b]
    (profile,) = yaml.safe_load(block)["profiles"]
    return profile


@pytest.fixture(scope="module")
def docs_pki(tmp_path_factory) -> Path:
    """The documented certificates (the shipped extender entries keep their tlsConfig)."""
    return make_docs_pki(tmp_path_factory.mktemp("docs-pki"))


def unplaceable_message(kube, docs_pki: Path, profile: dict, name: str) -> str:
    """Run kube-scheduler with the shipped configuration whose `meshfit` profile is `profile` (renamed `name`, so no
    other scheduler of the suite takes its pods); the PodScheduled message of a pod asking more CPU than any node has."""
    config = manifest_scheduler_config(kube, docs_pki)
    config["leaderElection"]["leaderElect"] = False
    config["profiles"] = [{**profile, "schedulerName": name}]
    process, port = start_kube_scheduler(kube, config, name)
    try:
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        wait_until(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure), 60, process, "/healthz 200")
        kube.core.create_namespaced_pod(kube.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": name, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                                            "resources": {"requests": {"cpu": "1000"}}}]}})

        def message() -> str:
            conditions = kube.core.read_namespaced_pod(name, kube.namespace).status.conditions or []
            return next((c.message or "" for c in conditions if c.type == "PodScheduled" and c.status == "False"), "")

        text = wait_for(message, 60, message=f"{name} never reported unschedulable")
        assert process.alive(), process.tail()
        return text
    finally:
        process.stop()


def test_the_shipped_profile_skips_kube_schedulers_preemption_and_the_documented_one_brings_it_back(kube, docs_pki):
    create_nodes(kube.core, 2, name_prefix="pp")
    shipped = yaml.safe_load((DEPLOYMENT_DOC.parents[1] / "manifests" / "kube-scheduler-config.yaml").read_text())
    (shipped_profile,) = shipped["profiles"]
    assert shipped_profile["plugins"] == {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}
    profile = documented_profile()
    assert profile == {k: v for k, v in shipped_profile.items() if k != "plugins"}  # only the plugins differ
    without = unplaceable_message(kube, docs_pki, shipped_profile, "probe-shipped")
    with_preemption = unplaceable_message(kube, docs_pki, profile, "probe-documented")
    assert "Insufficient cpu" in with_preemption and "preemption:" in with_preemption, with_preemption
    assert "Insufficient cpu" in without and "preemption" not in without, without
