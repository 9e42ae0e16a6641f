"""The Helm chart charts/meshfit against a real kube-apiserver of the newest Kubernetes version found.

- Every combination of ha, mtls and monitoring, and the chart-only managedControlPlane switch, rendered by
  `helm template` (tests/kube/helm_chart.py: helm from `$MESHFIT_HELM`, the cache k8sbuild/build_helm.sh fills, or
  the PATH), passes server-side apply with dryRun=All and strict field validation, the Prometheus Operator kinds
  installed first as in test_kustomize_real.py.  Whether a chart renders valid objects does not depend on the
  version, so this runs on the newest version found only (`newest_kube`).
- The managedControlPlane policy has teeth: stored for real, it refuses a GPU pod of the meshfit profile without
  the toleration for the GPU nodes' taint, and admits one with it (both as dry runs), then it is removed.
"""

from __future__ import annotations

import time

import pytest

from scheduler.kube.api import ApiStatusError, request_bytes
from tests.kube.helm_chart import like_kustomize, require_helm, template
from tests.kube.kustomize_render import combination_id, combinations, identity
from tests.realk8s.test_kustomize_real import install_monitoring_crds, newest_kube  # noqa: F401 - a fixture
from tests.realk8s.test_manifests_real import Discovery, apply, ensure_namespace

CASES = [(c, {}) for c in combinations()] + [(("ha", "mtls", "monitoring"), {"managedControlPlane.enabled": "true"})]
IDS = [combination_id(c) + ("+managedControlPlane" if extra else "") for c, extra in CASES]
POLICY = "meshfit-gpu-toleration"


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary (a skip naming k8sbuild/build_helm.sh without one; a failure under CI=true)."""
    return require_helm()


def dry_run_all(api_client, objects: list[dict]) -> list[str]:
    """Server-side dry run of every object (namespaces made for real first); the failures, one line each."""
    discovery = Discovery(api_client)
    for obj in objects:
        found = discovery.lookup(obj["apiVersion"], obj["kind"])
        assert found is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
        if found[1]:
            ensure_namespace(api_client, obj["metadata"]["namespace"])
    failures = []
    for obj in objects:
        try:
            answer = apply(api_client, discovery, obj)
        except ApiStatusError as exc:
            failures.append(f"{identity(obj)}: HTTP {exc.status}: {exc.message}")
            continue
        assert identity(answer) == identity(obj)
    return failures


@pytest.mark.parametrize("components,extra", CASES, ids=IDS)
def test_every_chart_combination_passes_server_side_dry_run(helm, newest_kube, components, extra):
    objects = like_kustomize(helm, components) if not extra else template(
        helm, components, {**extra, "namespace.create": "true"})
    if "monitoring" in components:
        install_monitoring_crds(newest_kube.api_client)
    failures = dry_run_all(newest_kube.api_client, objects)
    assert not failures, "\n".join(failures)


def gpu_pod(namespace: str, tolerations: list[dict]) -> dict:
    """A one-GPU pod of the meshfit profile."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", "namespace": namespace},
            "spec": {"schedulerName": "meshfit", "tolerations": tolerations,
                     "containers": [{"name": "train", "image": "busybox:1.36",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def create_dry_run(api_client, pod: dict) -> None:
    """POST the pod with dryRun=All (admission runs, nothing is stored)."""
    request_bytes(api_client, "POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods",
                  [("dryRun", "All")], body=pod, content_type="application/json", timeout=30)


def delete_policy(api_client) -> None:
    """Remove the policy and its binding (other tests share this control plane)."""
    for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        try:
            request_bytes(api_client, "DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{POLICY}", timeout=30)
        except ApiStatusError as exc:
            if exc.status != 404:
                raise


def test_the_managed_control_plane_policy_refuses_a_gpu_pod_without_the_toleration(helm, newest_kube):
    api_client = newest_kube.api_client
    objects = [o for o in template(helm, (), {"managedControlPlane.enabled": "true"})
               if o["kind"].startswith("ValidatingAdmissionPolicy")]
    discovery = Discovery(api_client)
    without = gpu_pod(newest_kube.namespace, [])
    tolerating = gpu_pod(newest_kube.namespace, [{"key": "meshfit.io/gpu", "operator": "Equal", "value": "true",
                                                  "effect": "NoSchedule"}])
    try:
        for obj in objects:
            apply(api_client, discovery, obj, dry_run=False)
        deadline = time.monotonic() + 30
        while True:  # the policy takes effect once the API server's informer has it
            try:
                create_dry_run(api_client, without)
            except ApiStatusError as exc:
                assert exc.status == 422 and "needs the toleration" in exc.message, exc.message
                break
            assert time.monotonic() < deadline, "the policy never refused a pod without the toleration"
            time.sleep(0.5)
        create_dry_run(api_client, tolerating)
        create_dry_run(api_client, {**without, "spec": {**without["spec"], "schedulerName": "default-scheduler"}})
    finally:
        delete_policy(api_client)
