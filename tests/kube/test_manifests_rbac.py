"""RBAC in the manifests grants exactly what meshfit's Kubernetes adapters use, and nothing else: split out of
`tests/kube/test_manifests.py`, whose objects and helpers it uses."""

from __future__ import annotations

import re

import yaml

from scheduler.kube.resources import DEFAULT_RESOURCES
from tests.kube.test_manifests import MANIFESTS, find, rules_of, validate

def granted() -> set[tuple[str, str, str]]:
    """(api group, resource, verb) the meshfit ClusterRole grants (never restricted by name)."""
    rules = rules_of("ClusterRole", "meshfit")
    assert all(not names for *_, names in rules)
    return {rule[:3] for rule in rules}


class _Response:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data, self.reason = status, data, "OK" if status < 300 else "Conflict"

    def release_conn(self) -> None:
        pass


class RecordingApiClient:
    """Stands in for the kubernetes ApiClient: records (method, path) and answers like an API server."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def param_serialize(self, method, resource_path, query_params=None, header_params=None, body=None,
                        auth_settings=None):
        return method, resource_path, header_params, body, None

    def call_api(self, method, url, headers, body, post, _request_timeout=None):
        self.calls.append((method, url))
        if method == "POST" and url.endswith("/configmaps"):  # exists already: meshfit replaces it
            return type("R", (), {"response": _Response(409, b'{"code": 409, "reason": "AlreadyExists"}')})()
        return type("R", (), {"response": _Response(200, b'{"metadata": {"resourceVersion": "7"}}')})()


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "GET": "get"}


def rbac_request(method: str, path: str) -> tuple[str, str, str]:
    """(api group, resource[/subresource], verb) RBAC checks for one request to a named object."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = "create" if method == "POST" else _VERBS[method]
    return group, resource, verb


def adapter_requests() -> set[tuple[str, str, str]]:
    """What the real-mode adapters ask the API server for, recorded from their own requests."""
    from scheduler.kube.actions import KubeActions  # noqa: PLC0415
    from scheduler.kube.binder import KubeBinder  # noqa: PLC0415
    from scheduler.kube.configmap import publish_configmap  # noqa: PLC0415
    from scheduler.service.lifecycle.actions import PodRef  # noqa: PLC0415

    client = RecordingApiClient()
    pod = PodRef("ml", "w-0", "uid-0")
    KubeBinder(client).bind("ml", "w-0", "uid-0", "node-1", {"meshfit.io/rank": "0"})
    actions = KubeActions(client)
    actions.requeue(pod, "node-1")
    actions.evict(pod, "gang completion timed out")
    actions.event(pod, "Reserved", "gang reserved")
    publish_configmap(client, {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "meshfit-job-ranks", "namespace": "ml"}, "data": {}})
    from scheduler.kube.api import pod_getter  # noqa: PLC0415

    try:
        pod_getter(client)("ml", "w-1")  # a pod the watch has not shown yet: one GET
    except Exception:  # noqa: BLE001 - the recording client answers nothing decodable; the call is what counts
        pass
    from scheduler.kube.kueue_status import KueueStatusWriter  # noqa: PLC0415

    kueue = KueueStatusWriter(client)  # the Kueue admission check controller's two writes
    kueue.set_active("meshfit-topology", "v1beta2", 1, "active")
    kueue.set_check_state("ml", "job-w-1", "v1beta2", "meshfit-topology", "Ready", "reserved")
    requests = {rbac_request(method, path) for method, path in client.calls}
    # the list+watch cache: collection paths of every watched resource
    return requests | {(r.group, r.plural, verb) for r in DEFAULT_RESOURCES for verb in ("list", "watch")}


def test_rbac_grants_exactly_what_the_adapters_use():
    needed = adapter_requests()
    assert needed >= {("", "pods/binding", "create"), ("", "pods", "patch"), ("", "pods/status", "patch"),
                      ("", "pods", "delete"), ("", "pods", "get"), ("", "events", "create"), ("", "configmaps", "create"),
                      ("", "configmaps", "get"), ("", "configmaps", "update")}
    assert granted() == needed
    binding = find("ClusterRoleBinding", "meshfit")
    account = find("ServiceAccount", "meshfit")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "meshfit", "namespace": account["metadata"]["namespace"]}]
    assert find("Deployment", "meshfit")["spec"]["template"]["spec"]["serviceAccountName"] == "meshfit"


def test_rbac_never_grants_what_meshfit_does_not_need():
    rules = granted()
    for forbidden in [("", "secrets", "get"), ("", "secrets", "list"), ("", "configmaps", "delete"),
                      ("", "configmaps", "list"), ("", "pods", "create"), ("", "pods", "update"),
                      ("", "nodes", "patch"), ("", "nodes", "update"), ("", "pods/eviction", "create")]:
        assert forbidden not in rules


def test_leader_election_role_is_namespaced_to_meshfit():
    account = find("ServiceAccount", "meshfit")
    namespace = account["metadata"]["namespace"]
    try:
        from scheduler.kube.leader import DEFAULT_LEASE_NAME  # noqa: PLC0415
    except ImportError:  # leader election not in this build yet: the name it will use
        DEFAULT_LEASE_NAME = "meshfit"  # noqa: N806

    assert rules_of("Role", "meshfit-leader-election", namespace) == {
        ("coordination.k8s.io", "leases", "create", ()),
        *{("coordination.k8s.io", "leases", verb, (DEFAULT_LEASE_NAME,)) for verb in ("get", "update")}}
    binding = find("RoleBinding", "meshfit-leader-election")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "meshfit-leader-election"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "meshfit", "namespace": namespace}]
    assert not any(group == "coordination.k8s.io" for group, *_ in granted())  # never cluster-wide


def test_commented_per_namespace_role_alternative_is_valid():
    text = (MANIFESTS / "meshfit.yaml").read_text()
    block = text[text.index("# apiVersion: rbac.authorization.k8s.io/v1"):]
    uncommented = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in block.splitlines())
    role, binding = [d for d in yaml.safe_load_all(uncommented) if d]
    assert validate(role) == [] and validate(binding) == []
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]


def test_configmap_admission_policy_matches_meshfit_and_its_name_pattern():
    import inspect  # noqa: PLC0415

    from scheduler.handoff.rank_table import configmap_name, rank_table_configmap  # noqa: PLC0415

    policy = find("ValidatingAdmissionPolicy", "meshfit-rank-table-configmaps")
    account = find("ServiceAccount", "meshfit")["metadata"]
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [f"request.userInfo.username == '{user}'"]
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    prefix = re.search(r"startsWith\('([^']+)'\)", expressions).group(1)
    suffix = re.search(r"endsWith\('([^']+)'\)", expressions).group(1)
    for job in ("llama-70b", "Llama 70B", "x" * 300):
        name = configmap_name(job)
        assert name.startswith(prefix) and name.endswith(suffix), name
    assert '"app.kubernetes.io/managed-by": "meshfit"' in inspect.getsource(rank_table_configmap)
    assert "object.metadata.labels['app.kubernetes.io/managed-by'] == 'meshfit'" in expressions
    binding = find("ValidatingAdmissionPolicyBinding", "meshfit-rank-table-configmaps")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
