"""The Kustomize base and its components (manifests/components/{ha,mtls,monitoring}) with the real tools.

- Every combination of components (the base alone up to all three) renders with `kubectl kustomize` from an
  overlay as docs/deployment.md writes one, and gives exactly the objects `tests/kube/kustomize_render.py`
  renders (which the field-by-field tests in tests/kube read).  kubectl: `$MESHFIT_KUBECTL`, else `kubectl`
  on the PATH; skipped with the reason when neither is there.  No API server is needed for this.
- Every combination's kubectl output passes server-side apply with dryRun=All and strict field validation
  against the real kube-apiserver, with the Prometheus Operator kinds (ServiceMonitor, PrometheusRule)
  installed first as CRDs whose spec is `x-kubernetes-preserve-unknown-fields` (the server then checks
  their metadata, namespace and kind; the spec fields are checked by the JSON schemas of tests/kube).
  Whether a combination renders does not depend on the Kubernetes version, and the full combination is
  dry-run on every version by test_manifests_real.py; so this runs on the newest version found only
  (`newest_install`, a local helper: the version matrix itself is conftest's).
- The ha component's meshfit_leader: of two `--leader-elect` replicas on the real Lease, the leader exports 1
  and the standby 0 (what the MeshfitNoLeader / MeshfitMultipleLeaders alerts sum).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from scheduler.kube.api import ApiStatusError, request_bytes
from tests.kube.kustomize_render import COMPONENTS_DIR, MANIFESTS, combination_id, combinations, identity, render
from tests.realk8s.binaries import BUILD_COMMAND, K8sInstall, absent, find_installs
from tests.realk8s.controlplane import wait_until
from tests.realk8s.test_ha_real import get, launch_standby, replica
from tests.realk8s.test_manifests_real import Discovery, apply, ensure_namespace

CRD_KINDS = (("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule"))
"""The Prometheus Operator kinds the monitoring component creates (plural, kind), group monitoring.coreos.com."""


def find_kubectl() -> str | None:
    """`$MESHFIT_KUBECTL` if set, else `kubectl` on the PATH (None when neither)."""
    configured = os.environ.get("MESHFIT_KUBECTL")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("kubectl")


@pytest.fixture(scope="module")
def kubectl() -> str:
    """The kubectl binary, or a skip with the reason."""
    found = find_kubectl()
    if found is None:
        absent(f"no kubectl: set MESHFIT_KUBECTL, put kubectl on the PATH or build it with {BUILD_COMMAND} 1.37")
    return found


def write_overlay(folder: Path, components: tuple[str, ...]) -> Path:
    """An overlay as docs/deployment.md writes one: the base as resource, the chosen components."""
    folder.mkdir(parents=True, exist_ok=True)
    overlay = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
               "resources": [os.path.relpath(MANIFESTS, folder)]}
    if components:
        overlay["components"] = [os.path.relpath(COMPONENTS_DIR / c, folder) for c in components]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return folder


def kustomize(kubectl: str, folder: Path) -> list[dict]:
    """`kubectl kustomize folder`, parsed."""
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


COMBINATIONS = combinations()
IDS = [combination_id(c) for c in COMBINATIONS]


@pytest.mark.parametrize("components", COMBINATIONS, ids=IDS)
def test_every_combination_renders_as_the_python_render(kubectl, tmp_path, components):
    rendered = kustomize(kubectl, write_overlay(tmp_path / "overlay", components))
    expected = render(components)
    assert sorted(map(identity, rendered)) == sorted(map(identity, expected))
    by_id = {identity(o): o for o in expected}
    for obj in rendered:
        assert obj == by_id[identity(obj)], identity(obj)
    deployment = by_id[("Deployment", "meshfit-system", "meshfit")]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deployment["spec"]["replicas"] == (2 if "ha" in components else 1)
    assert ("--leader-elect" in args) == ("ha" in components)
    assert ("--client-ca-file" in args) == ("mtls" in components)
    assert (("PrometheusRule", "meshfit-system", "meshfit") in by_id) == ("monitoring" in components)


def test_kubectl_refuses_a_component_patch_that_misses_its_target(kubectl, tmp_path):
    """The render has teeth: a component whose patch names an object the base lacks is an error."""
    component = tmp_path / "broken"
    component.mkdir()
    (component / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
        "patches": [{"target": {"kind": "Deployment", "name": "meshfit"},
                     "patch": "- op: replace\n  path: /spec/template/spec/containers/3/args\n  value: []\n"}]}))
    overlay = write_overlay(tmp_path / "overlay", ())
    data = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    data["components"] = [os.path.relpath(component, overlay)]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(data))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "containers/3" in result.stderr


# ----- server-side dry run, newest version only -------------------------------------------------------------
def newest_install() -> K8sInstall | None:
    """The newest Kubernetes version found (None when none)."""
    installs, _ = find_installs()
    return max(installs, key=lambda i: i.version, default=None)


@pytest.fixture
def newest_kube(request, k8s_install):
    """`kube` on the newest version only: these checks do not depend on the version (see the module doc)."""
    newest = newest_install()
    if newest is None or k8s_install.version != newest.version:
        pytest.skip(f"version-independent: runs on the newest version found ({newest.minor if newest else '-'}) only")
    return request.getfixturevalue("kube")


def preserve_unknown_crd(plural: str, kind: str) -> dict:
    """A namespaced monitoring.coreos.com/v1 CRD whose spec is kept as sent (schema checks in tests/kube)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {
                             "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def install_monitoring_crds(api_client) -> None:
    """Create the Prometheus Operator CRDs (if missing) and wait until the server serves their kinds."""
    for plural, kind in CRD_KINDS:
        try:
            request_bytes(api_client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          body=preserve_unknown_crd(plural, kind), content_type="application/json", timeout=30)
        except ApiStatusError as exc:
            if exc.status != 409:  # made by an earlier test on this control plane
                raise
    deadline = time.monotonic() + 30
    while not all(Discovery(api_client).lookup("monitoring.coreos.com/v1", k) for _, k in CRD_KINDS):
        assert time.monotonic() < deadline, "the monitoring.coreos.com/v1 CRDs were never served"
        time.sleep(0.2)


@pytest.mark.parametrize("components", COMBINATIONS, ids=IDS)
def test_every_combination_passes_server_side_dry_run(kubectl, newest_kube, tmp_path, components):
    objects = kustomize(kubectl, write_overlay(tmp_path / "overlay", components))
    if "monitoring" in components:
        install_monitoring_crds(newest_kube.api_client)
    discovery = Discovery(newest_kube.api_client)
    for obj in objects:
        found = discovery.lookup(obj["apiVersion"], obj["kind"])
        assert found is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
        if found[1]:
            ensure_namespace(newest_kube.api_client, obj["metadata"]["namespace"])
    failures = []
    for obj in objects:
        try:
            answer = apply(newest_kube.api_client, discovery, obj)
        except ApiStatusError as exc:
            failures.append(f"{identity(obj)}: HTTP {exc.status}: {exc.message}")
            continue
        assert identity(answer) == identity(obj)
    assert not failures, "\n".join(failures)


def test_dry_run_of_a_custom_resource_checks_what_the_crd_can(kubectl, newest_kube, tmp_path):
    """With preserve-unknown-fields CRDs the server still refuses a monitoring object in a namespace that
    does not exist and one without a name: the dry run above is not a no-op for those kinds."""
    install_monitoring_crds(newest_kube.api_client)
    discovery = Discovery(newest_kube.api_client)
    rule = next(o for o in render(("monitoring",)) if o["kind"] == "PrometheusRule")
    rule["metadata"]["namespace"] = "no-such-namespace-for-meshfit"
    with pytest.raises(ApiStatusError) as missing:
        apply(newest_kube.api_client, discovery, rule)
    assert missing.value.status == 404
    rule["metadata"].update(namespace="meshfit-system", name="Not_A_Valid_Name")
    ensure_namespace(newest_kube.api_client, "meshfit-system")
    with pytest.raises(ApiStatusError) as invalid:
        apply(newest_kube.api_client, discovery, rule)
    assert invalid.value.status == 422


# ----- meshfit_leader with the ha component's --leader-elect -------------------------------------------------
def leader_sample(process) -> float:
    """The value of meshfit_leader on one replica's /metrics."""
    status, text = get(f"{process.url}/metrics")
    assert status == 200, text
    (value,) = [line.split()[1] for line in text.splitlines() if line.startswith("meshfit_leader ")]
    return float(value)


def test_only_the_serving_leader_exports_meshfit_leader_1(newest_kube):
    first, second = replica(newest_kube, "a"), replica(newest_kube, "b")
    try:
        first.start()  # ready: it holds the Lease and re-listed
        launch_standby(second)
        assert (leader_sample(first), leader_sample(second)) == (1.0, 0.0)
        first.stop()  # releases the Lease: the standby takes over
        wait_until(lambda: get(f"{second.url}/readyz")[0] == 200, 30, second.process, "the standby took over")
        deadline = time.monotonic() + 10
        while leader_sample(second) != 1.0:
            assert time.monotonic() < deadline, second.tail()
            time.sleep(0.2)
    finally:
        first.stop()
        second.stop()
