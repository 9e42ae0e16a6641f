"""manifests/ checked by the real API server and the real kube-scheduler binary.

- Every object of every manifest (manifests/*.yaml and manifests/examples/*.yaml) is applied with
  server-side apply, `dryRun=All` and `fieldValidation=Strict` (unknown or duplicate fields are
  errors): the server's own defaulting, validation and admission run, nothing is stored. Kinds the
  server does not serve (CRDs not installed, APIs newer than the control plane) are skipped and
  listed; the core / apps / RBAC / policy / networking objects must all have been checked.
- The meshfit and meshfit-scheduler pod templates are dry-run created as Pods in their namespaces,
  so Pod Security admission (`restricted` on meshfit-system), ServiceAccount and Priority admission
  judge them.
- The RBAC of manifests/meshfit.yaml (and the ha component's Lease Role) is applied for real and meshfit's own adapters (binder,
  requeue, evict, Events, rank-table ConfigMap, list of every watched resource) run impersonating
  its ServiceAccount: everything they do is allowed, and a few things meshfit must not do are denied.
- manifests/kube-scheduler-config.yaml is run by the real kube-scheduler (only its kubeconfig, the
  extender's address and its client-certificate files rewritten; the files are made by
  docs/deployment.md's own openssl commands): /healthz answers and it takes its Lease with the Role
  from manifests/meshfit-scheduler.yaml; a typo in the config makes the binary refuse to start.
  (Its extender calls reaching meshfit over mutual TLS: tests/realk8s/test_tls_real.py.)
"""

from __future__ import annotations

import copy
import json
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.kube.resources import DEFAULT_RESOURCES
from tests.kube.kustomize_render import COMPONENTS, base_files, render
from tests.kube.test_manifests_tls import make_docs_pki
from tests.realk8s.controlplane import http_ok, wait_until
from tests.realk8s.test_tls_real import manifest_scheduler_config, start_kube_scheduler

pytestmark = pytest.mark.k8s_versions(
    every=True, why="the manifests must pass each version's API and kube-scheduler configuration")

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
FIELD_MANAGER = "meshfit-manifest-test"
MESHFIT_USER = "system:serviceaccount:meshfit-system:meshfit"
MUST_CHECK = {("v1", "Namespace"), ("v1", "ServiceAccount"), ("v1", "Service"), ("v1", "ConfigMap"),
              ("apps/v1", "Deployment"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
              ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
              ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("policy/v1", "PodDisruptionBudget"),
              ("networking.k8s.io/v1", "NetworkPolicy"), ("batch/v1", "Job")}
"""Kinds every Kubernetes API server serves: these must be checked, never skipped."""


def manifest_objects() -> list[tuple[str, dict]]:
    """(file, object) for every Kubernetes object of manifests/*.yaml outside the Kustomize base,
    manifests/examples/*.yaml, and the base with every component (file `kustomize`; each combination of
    components is dry-run in tests/realk8s/test_kustomize_real.py)."""
    out = []
    skip = {"kustomization.yaml", *base_files()}
    for path in sorted(MANIFESTS.glob("*.yaml")) + sorted((MANIFESTS / "examples").glob("*.yaml")):
        if path.name in skip:
            continue
        out += [(str(path.relative_to(MANIFESTS)), d) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return out + [("kustomize", d) for d in render(COMPONENTS)]


def apiserver_feature_enabled(kube, gate: str) -> bool:
    """Whether the API server runs with feature `gate` on (its `kubernetes_feature_enabled` metric; off if absent)."""
    text = request_bytes(kube.api_client, "GET", "/metrics", timeout=30).decode()
    for line in text.splitlines():
        if line.startswith("kubernetes_feature_enabled{") and f'name="{gate}"' in line:
            return float(line.rsplit(" ", 1)[1]) == 1.0
    return False


def load(file: str, kind: str, name: str) -> dict:
    """One object of one manifest file."""
    (found,) = [d for f, d in manifest_objects()
                if f == file and d["kind"] == kind and d.get("metadata", {}).get("name") == name]
    return copy.deepcopy(found)


class Discovery:
    """(apiVersion, kind) -> (plural, namespaced) from the server's discovery documents."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self.cache: dict[str, dict[str, tuple[str, bool]] | None] = {}

    def lookup(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """Plural and scope of `kind`, or None when the server does not serve it."""
        if api_version not in self.cache:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            try:
                listing = json.loads(request_bytes(self.api_client, "GET", path, timeout=10))
            except ApiStatusError as exc:
                if exc.status != 404:
                    raise
                self.cache[api_version] = None
            else:
                self.cache[api_version] = {r["kind"]: (r["name"], r["namespaced"])
                                           for r in listing["resources"] if "/" not in r["name"]}
        kinds = self.cache[api_version]
        return None if kinds is None else kinds.get(kind)


def object_path(api_version: str, plural: str, namespaced: bool, namespace: str | None, name: str) -> str:
    """REST path of one object."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}/{name}" if namespaced else f"{base}/{plural}/{name}"


def apply(api_client: Any, discovery: Discovery, obj: dict, dry_run: bool = True) -> dict:
    """Server-side apply of `obj` (strict field validation; dry run unless told); the server's answer."""
    plural, namespaced = discovery.lookup(obj["apiVersion"], obj["kind"])
    meta = obj["metadata"]
    query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict"), ("force", "true")]
    if dry_run:
        query.append(("dryRun", "All"))
    path = object_path(obj["apiVersion"], plural, namespaced, meta.get("namespace") or "default", meta["name"])
    return json.loads(request_bytes(api_client, "PATCH", path, query, body=json.dumps(obj),
                                    content_type="application/apply-patch+yaml", timeout=30))


def ensure_namespace(api_client: Any, name: str, labels: dict | None = None) -> None:
    """Create namespace `name` for real when missing (dry runs of namespaced objects need it)."""
    try:
        request_bytes(api_client, "GET", f"/api/v1/namespaces/{name}", timeout=10)
    except ApiStatusError as exc:
        if exc.status != 404:
            raise
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        request_bytes(api_client, "POST", "/api/v1/namespaces", body=body, content_type="application/json", timeout=10)


def apply_for_real(api_client: Any, objects: list[dict]) -> None:
    """Server-side apply `objects` (stored), namespaces first."""
    discovery = Discovery(api_client)
    for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
        if obj["kind"] != "Namespace" and obj["metadata"].get("namespace"):
            ensure_namespace(api_client, obj["metadata"]["namespace"])
        apply(api_client, discovery, obj, dry_run=False)


# ----- every manifest object, server-side dry run ----------------------------------------------------------
def test_every_manifest_object_passes_server_side_dry_run(kube):
    discovery = Discovery(kube.api_client)
    checked, skipped, failures = [], [], []
    served = []
    for file, obj in manifest_objects():
        if obj["apiVersion"].startswith("kubescheduler.config.k8s.io/"):
            skipped.append(f"{file}: {obj['kind']} (a component config file, not an API object: run by the "
                           f"real kube-scheduler in test_real_kube_scheduler_runs_the_manifest_config...)")
            continue
        label = f"{file}: {obj['apiVersion']} {obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        found = discovery.lookup(obj["apiVersion"], obj["kind"])
        if found is None:
            skipped.append(f"{label} (not served by this API server: CRD not installed or API too new)")
            continue
        served.append((label, obj, found[1]))
    for label, obj, namespaced in served:  # namespaces must exist for a namespaced dry run
        if namespaced:
            ensure_namespace(kube.api_client, obj["metadata"].get("namespace") or "default")
    for label, obj, _ in served:
        try:
            answer = apply(kube.api_client, discovery, obj)
        except ApiStatusError as exc:
            failures.append(f"{label}: HTTP {exc.status} {exc.reason}: {exc.message}")
            continue
        assert (answer["apiVersion"], answer["kind"], answer["metadata"]["name"]) == (
            obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        checked.append((obj["apiVersion"], obj["kind"]))
    print(f"\nserver-side dry run: {len(checked)} objects accepted, {len(skipped)} skipped:")
    for line in skipped:
        print(f"  skipped {line}")
    assert not failures, "rejected by the API server:\n" + "\n".join(failures)
    assert MUST_CHECK <= set(checked), f"never checked: {sorted(MUST_CHECK - set(checked))}"
    assert len(checked) + len(skipped) == len(manifest_objects())


def test_dry_run_rejects_what_the_server_would_reject(kube):
    """The check above has teeth: strict validation refuses an unknown field and a bad value."""
    discovery = Discovery(kube.api_client)
    ensure_namespace(kube.api_client, "meshfit-system")
    typo = load("kustomize", "Deployment", "meshfit")
    typo["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpget"] = {"path": "/readyz"}
    with pytest.raises(ApiStatusError) as unknown:
        apply(kube.api_client, discovery, typo)
    # 1.26 answers server-side apply's "field not declared in schema" with 500, newer servers with 4xx
    assert unknown.value.status >= 400 and "httpget" in unknown.value.message
    bad = load("kustomize", "PodDisruptionBudget", "meshfit")
    bad["spec"]["maxUnavailable"] = 1  # minAvailable and maxUnavailable together are invalid
    with pytest.raises(ApiStatusError) as invalid:
        apply(kube.api_client, discovery, bad)
    assert invalid.value.status == 422


def pod_from_template(deployment: dict) -> dict:
    """A Pod made from a Deployment's template (what the ReplicaSet would create)."""
    template = copy.deepcopy(deployment["spec"]["template"])
    meta = {**template.get("metadata", {}), "name": f"{deployment['metadata']['name']}-dry-run",
            "namespace": deployment["metadata"]["namespace"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


@pytest.mark.parametrize("file,name", [("kustomize", "meshfit"), ("kustomize", "meshfit-scheduler")])
def test_pod_templates_pass_admission(kube, file, name):
    """Pod Security (restricted on meshfit-system), ServiceAccount and Priority admission accept the pods."""
    account = load(file, "ServiceAccount", name)
    objects = [account]
    if name == "meshfit":
        objects.insert(0, load(file, "Namespace", "meshfit-system"))
    apply_for_real(kube.api_client, objects)  # ServiceAccount admission needs the account to exist
    pod = pod_from_template(load(file, "Deployment", name))
    path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
    answer = json.loads(request_bytes(kube.api_client, "POST", path, [("dryRun", "All"), ("fieldValidation", "Strict")],
                                      body=pod, content_type="application/json", timeout=30))
    assert answer["spec"]["serviceAccountName"] == name
    assert answer["spec"]["priority"] > 1_000_000_000  # system-cluster-critical resolved
    if name == "meshfit":
        namespace = json.loads(request_bytes(kube.api_client, "GET", "/api/v1/namespaces/meshfit-system"))
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        privileged = copy.deepcopy(pod)
        privileged["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        with pytest.raises(ApiStatusError) as refused:  # the namespace label is enforced
            request_bytes(kube.api_client, "POST", path, [("dryRun", "All")], body=privileged,
                          content_type="application/json", timeout=30)
        assert refused.value.status == 403 and "restricted" in refused.value.message


# ----- RBAC: meshfit's own adapters, impersonating its ServiceAccount --------------------------------------
def impersonating(kube, user: str) -> Any:
    """An ApiClient for the admin kubeconfig that acts as `user` (admins may impersonate)."""
    from kubernetes import config
    client = config.new_client_from_config(config_file=str(kube.control_plane.kubeconfig))
    client.set_default_header("Impersonate-User", user)
    return client


def test_meshfit_rbac_allows_every_call_meshfit_makes_and_no_more(kube):
    from scheduler.kube.actions import KubeActions
    from scheduler.kube.binder import KubeBinder
    from scheduler.kube.configmap import publish_configmap
    from scheduler.service.lifecycle.actions import PodRef

    rbac = [d for f, d in manifest_objects() if f == "kustomize" and d["metadata"]["labels"]["app.kubernetes.io/name"] == "meshfit"
            and d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    apply_for_real(kube.api_client, rbac)
    ns = kube.namespace
    pod_body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gang-w0", "namespace": ns},
                "spec": {"schedulerName": "meshfit", "automountServiceAccountToken": False,
                         "containers": [{"name": "c", "image": "busybox"}]}}
    pod = kube.core.create_namespaced_pod(ns, pod_body)
    ref = PodRef(ns, "gang-w0", pod.metadata.uid)
    sa = impersonating(kube, MESHFIT_USER)
    try:
        time.sleep(0.5)  # RBAC authorizer's informer sees the new bindings
        for resource in DEFAULT_RESOURCES:  # the cache's list (+ watch) of everything, CRDs missing or not
            try:
                request_bytes(sa, "GET", resource.path, [("limit", "1")], timeout=10)
                request_bytes(sa, "GET", resource.path, [("watch", "true"), ("timeoutSeconds", "1")], timeout=10)
            except ApiStatusError as exc:
                assert exc.status == 404, f"{resource.name}: {exc}"  # not installed here, never 403
        actions = KubeActions(sa)
        actions.requeue(ref, "node-a")  # pods/status patch + pods patch
        actions.event(ref, "GangReserved", "reserved on node-a")
        KubeBinder(sa).bind(ns, "gang-w0", ref.uid, "node-a", {"meshfit.io/rank": "0"})
        configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "meshfit-gang-ranks", "namespace": ns,
                                  "labels": {"app.kubernetes.io/managed-by": "meshfit"}}, "data": {"ranks.json": "{}"}}
        publish_configmap(sa, configmap)  # create
        publish_configmap(sa, {**configmap, "data": {"ranks.json": "[]"}})  # get + replace
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "meshfit", "namespace": "meshfit-system"}, "spec": {"holderIdentity": "a"}}
        leases = "/apis/coordination.k8s.io/v1/namespaces/meshfit-system/leases"
        try:
            request_bytes(sa, "POST", leases, body=lease, content_type="application/json", timeout=10)
        except ApiStatusError as exc:
            assert exc.status == 409  # left from an earlier run: create was allowed then
        current = json.loads(request_bytes(sa, "GET", f"{leases}/meshfit", timeout=10))
        current["spec"]["holderIdentity"] = "b"
        request_bytes(sa, "PUT", f"{leases}/meshfit", body=current, content_type="application/json", timeout=10)
        actions.evict(ref, "rolled back")  # pods delete
        bound = kube.core.read_namespaced_pod("gang-w0", ns)
        assert bound.spec.node_name == "node-a" and bound.metadata.annotations["meshfit.io/rank"] == "0"
        # the nomination the requeue wrote stays after the bind, unless this apiserver clears it on binding
        # (ClearingNominatedNodeNameAfterBinding: beta and on by default from 1.35, alpha/off before)
        clears = apiserver_feature_enabled(kube, "ClearingNominatedNodeNameAfterBinding")
        assert bound.status.nominated_node_name == (None if clears else "node-a"), (clears, bound.status)
        assert bound.metadata.deletion_timestamp is not None or bound.metadata.deletion_grace_period_seconds is not None

        denied = [("GET", f"/api/v1/namespaces/{ns}/secrets", None), ("GET", f"/api/v1/namespaces/{ns}/configmaps", None),
                  ("DELETE", f"/api/v1/namespaces/{ns}/configmaps/meshfit-gang-ranks", None),
                  ("POST", f"/api/v1/namespaces/{ns}/pods", pod_body),
                  ("POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                   {**lease, "metadata": {"name": "meshfit", "namespace": ns}}),
                  ("PATCH", "/api/v1/nodes/node-a", {"metadata": {"labels": {"x": "y"}}}),
                  ("GET", "/api/v1/nodes/node-a", None),
                  ("GET", "/apis/coordination.k8s.io/v1/namespaces/meshfit-system/leases/kube-scheduler", None)]
        for method, path, body in denied:
            with pytest.raises(ApiStatusError) as refused:
                request_bytes(sa, method, path, body=body, timeout=10,
                              content_type=("application/merge-patch+json" if method == "PATCH" else
                                            "application/json" if body else None))
            assert refused.value.status == 403, f"{method} {path}: {refused.value}"
    finally:
        sa.close()


# ----- the real kube-scheduler runs the manifest's configuration --------------------------------------------
@pytest.fixture(scope="module")
def docs_pki(tmp_path_factory) -> Path:
    """The CA, meshfit's and kube-scheduler's certificates, made by the documented openssl commands."""
    return make_docs_pki(tmp_path_factory.mktemp("docs-pki"))


def test_real_kube_scheduler_runs_the_manifest_config_and_takes_its_lease(kube, docs_pki):
    config = manifest_scheduler_config(kube, docs_pki)
    election = config["leaderElection"]
    ensure_namespace(kube.api_client, election["resourceNamespace"])
    apply_for_real(kube.api_client, [load("kustomize", "Role", "meshfit-scheduler-lease"),
                                     load("kustomize", "RoleBinding", "meshfit-scheduler-lease")])
    lease_path = (f"/apis/coordination.k8s.io/v1/namespaces/{election['resourceNamespace']}/leases/"
                  f"{election['resourceName']}")
    try:
        request_bytes(kube.api_client, "DELETE", lease_path, timeout=10)  # a holder from an earlier run
    except ApiStatusError as exc:
        assert exc.status == 404
    process, port = start_kube_scheduler(kube, config, "kube-scheduler-manifest")
    try:
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        wait_until(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure), 60, process, "/healthz 200")

        def holder() -> str:
            return json.loads(request_bytes(kube.api_client, "GET", lease_path, timeout=5))["spec"].get("holderIdentity", "")

        wait_until(lambda: bool(holder()), 60, process, f"Lease {election['resourceName']} acquired")
        time.sleep(3)  # renewals (get + update of the named Lease) keep working
        assert process.alive() and http_ok(f"https://127.0.0.1:{port}/healthz", insecure)
        log = process.log_path.read_text(errors="replace")
        assert "forbidden" not in log.lower() or "leases" not in log.lower(), process.tail()
    finally:
        process.stop()


def test_real_kube_scheduler_refuses_a_config_typo(kube, docs_pki):
    """The acceptance above means something: the binary decodes its config strictly."""
    config = manifest_scheduler_config(kube, docs_pki)
    config["leaderElection"]["leaderElect"] = False
    config["extenders"][0]["nodeCacheCapabl"] = True
    process, _ = start_kube_scheduler(kube, config, "kube-scheduler-typo")
    try:
        deadline = time.monotonic() + 30
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not process.alive(), "kube-scheduler started with an unknown config field"
        assert process.proc.returncode != 0
        assert "nodeCacheCapabl" in process.log_path.read_text(errors="replace")
    finally:
        process.stop()
