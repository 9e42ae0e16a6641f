"""manifests/: every object strictly valid (core kinds via the client's models, others via JSON schemas),
RBAC exactly what the adapters use (recorded from the adapters' own requests), the Deployment hardened
(non-root, read-only root, probes on served paths), the Dockerfile's entrypoint and the Deployment's
args accepted by the CLI, the scheduler configs pointing at routes the service serves, and the
Grafana dashboard covering every metric the service exports.  (tests/realk8s/test_manifests_real.py
applies the same objects to a real API server with server-side dry run.)"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from scheduler.kube.resources import DEFAULT_RESOURCES
from scheduler.handoff.manifests import load_job
from scheduler.service import volcano
from tests.kube.kustomize_render import COMPONENTS, base_files, combination_id, render
from tests.kube.manifest_schemas import SCHEMAS, VOLCANO_EXTENDER_ARGUMENTS, VOLCANO_SCHEDULER_CONF
from tests.kube.strict_models import check_model, validate_core_object

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
REPO = MANIFESTS.parent
CORE_GROUPS = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "networking.k8s.io/v1",
               "admissionregistration.k8s.io/v1")


def load_all() -> list[tuple[str, dict]]:
    """(file name, object) for every document of manifests/*.yaml outside the Kustomize base, and every object of
    the base with all its components (`kustomize:base+ha+mtls+monitoring`: what the tests below check field by
    field; each other combination is checked in tests/kube/test_kustomize_components.py)."""
    docs = []
    skip = {"kustomization.yaml", *base_files()}  # kustomize's configuration, and the files rendered below
    for path in sorted(p for p in MANIFESTS.glob("*.yaml") if p.name not in skip):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs + [(f"kustomize:{combination_id(COMPONENTS)}", d) for d in render(COMPONENTS)]


DOCS = load_all()


def find(kind: str, name: str | None = None) -> dict:
    """The one manifest object of `kind` (and name)."""
    found = [d for _, d in DOCS if d["kind"] == kind and (name is None or d.get("metadata", {}).get("name") == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} objects"
    return found[0]


def validate(obj: dict) -> list[str]:
    """Errors of one manifest object (empty when valid)."""
    if obj["apiVersion"] in CORE_GROUPS:
        return validate_core_object(obj)
    schema = SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if schema is None:
        return [f"no schema for {obj['apiVersion']} {obj['kind']}"]
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
    if "metadata" in obj:
        errors += check_model(obj["metadata"], "V1ObjectMeta", ".metadata")
    for role, replica in ((obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        errors += check_model(replica.get("template"), "V1PodTemplateSpec", f".spec.pytorchReplicaSpecs.{role}.template")
    return errors


def test_manifests_cover_every_deliverable():
    kinds = {(d["apiVersion"], d["kind"]) for _, d in DOCS}
    assert {("v1", "Namespace"), ("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ("policy/v1", "PodDisruptionBudget"), ("networking.k8s.io/v1", "NetworkPolicy"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
            ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"), ("v1", "ConfigMap"),
            ("kueue.x-k8s.io/v1beta2", "Topology"), ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
            ("kueue.x-k8s.io/v1beta2", "AdmissionCheck"),
            ("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
            ("monitoring.coreos.com/v1", "ServiceMonitor"), ("kubeflow.org/v1", "PyTorchJob")} <= kinds


@pytest.mark.parametrize("obj", [d for _, d in DOCS], ids=[f"{f}:{d['kind']}/{d.get('metadata', {}).get('name', '')}" for f, d in DOCS])
def test_every_manifest_object_is_strictly_valid(obj):
    assert validate(obj) == []


MUTATIONS = [
    ("deployment-typo", ("Deployment", "meshfit"), lambda d: d["spec"].__setitem__("replica", 1), "unknown field"),
    ("service-port-string", ("Service", "meshfit"), lambda d: d["spec"]["ports"][0].__setitem__("port", "8888"),
     "expected int"),
    ("container-typo", ("Deployment", "meshfit"),
     lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__("arg", []), "unknown field"),
    ("extender-typo", ("KubeSchedulerConfiguration", None),
     lambda d: d["extenders"][0].__setitem__("nodeCacheCapabl", True), "Additional properties"),
    ("extender-timeout-format", ("KubeSchedulerConfiguration", None),
     lambda d: d["extenders"][0].__setitem__("httpTimeout", "5 seconds"), "does not match"),
    ("kueue-level-typo", ("Topology", "gpu-fabric"),
     lambda d: d["spec"]["levels"][0].__setitem__("nodeLabels", "x"), "Additional properties"),
    ("pytorch-template-typo", ("PyTorchJob", "llama-70b"),
     lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].__setitem__("schedulername", "x"),
     "unknown field"),
    ("pdb-typo", ("PodDisruptionBudget", "meshfit"), lambda d: d["spec"].__setitem__("minAvailible", 1),
     "unknown field"),
    ("netpol-port-typo", ("NetworkPolicy", "meshfit"),
     lambda d: d["spec"]["ingress"][0]["ports"][0].__setitem__("prot", "TCP"), "unknown field"),
    ("probe-typo", ("Deployment", "meshfit"),
     lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].__setitem__("httpget", {}),
     "unknown field"),
]


@pytest.mark.parametrize("target,mutate,message", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_validation_rejects_typos(target, mutate, message):
    obj = copy.deepcopy(find(*target))
    mutate(obj)
    errors = validate(obj)
    assert errors and any(message in e for e in errors), errors


def rules_of(kind: str, name: str, namespace: str | None = None) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(api group, resource, verb, resourceNames) a Role/ClusterRole grants; wildcards are refused outright."""
    found = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name
             and d["metadata"].get("namespace") == namespace]
    assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} objects"
    out = set()
    for rule in found[0]["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, res, verb)
                    out.add((group, res, verb, tuple(rule.get("resourceNames", ()))))
    return out


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
    from scheduler.service.actions import PodRef  # noqa: PLC0415

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


def service_url() -> tuple[str, int]:
    """In-cluster host and verb (https) port of the meshfit Service."""
    service = find("Service", "meshfit")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "extender")
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc", port


def served_status(path: str) -> int:
    """HTTP status the meshfit app answers for an empty POST to `path` (404/405 = not served)."""
    from starlette.testclient import TestClient  # noqa: PLC0415

    from scheduler.service.app import build_scheduler, create_app  # noqa: PLC0415
    from scheduler.service.binder_memory import MemoryBinder  # noqa: PLC0415
    from scheduler.cache.state import ClusterState  # noqa: PLC0415

    scheduler, metrics = build_scheduler(ClusterState(), MemoryBinder(), "first-fit")
    return TestClient(create_app(scheduler, metrics)).post(path, content=b"{}").status_code


def test_kube_scheduler_extender_points_at_served_routes():
    config = find("KubeSchedulerConfiguration")
    assert config["profiles"] == [{"schedulerName": "meshfit", "percentageOfNodesToScore": 100}]
    extender = config["extenders"][0]
    url = urlsplit(extender["urlPrefix"])
    assert (url.hostname, url.port) == service_url()
    assert extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    for key in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"):
        assert served_status(f"{url.path}/{extender[key]}") not in (404, 405), key


def test_the_guard_extender_asks_about_every_pod_and_never_stops_one():
    """`/guard` (issue 28): no managedResources (every pod is asked about), ignorable (a meshfit outage never stops a
    pod), filter only, on the served route and the same host as the main extender."""
    config = find("KubeSchedulerConfiguration")
    main, guard = config["extenders"]
    assert guard["filterVerb"] == "guard" and guard["ignorable"] is True and "managedResources" not in guard
    assert not {"prioritizeVerb", "bindVerb", "preemptVerb"} & set(guard)
    assert urlsplit(guard["urlPrefix"])[:3] == urlsplit(main["urlPrefix"])[:3]
    assert guard["nodeCacheCapable"] is True
    assert served_status(f"{urlsplit(guard['urlPrefix']).path}/guard") not in (404, 405)


def test_volcano_configmap_enables_the_extender_with_known_arguments_and_verbs():
    conf = yaml.safe_load(find("ConfigMap", "volcano-scheduler-configmap")["data"]["volcano-scheduler.conf"])
    jsonschema.validate(conf, VOLCANO_SCHEDULER_CONF)
    plugins = [p for tier in conf["tiers"] for p in tier["plugins"] if p["name"] == "extender"]
    assert len(plugins) == 1
    arguments = plugins[0]["arguments"]
    assert set(arguments) <= set(VOLCANO_EXTENDER_ARGUMENTS)
    url = urlsplit(arguments["extender.urlPrefix"])  # a sidecar on the pod's loopback: Volcano has no TLS client
    assert (url.scheme, url.hostname, url.port, url.path) == ("http", "127.0.0.1", service_url()[1], "/volcano")
    verbs = {v for k, v in arguments.items() if k.endswith("Verb")}
    assert {"jobEnqueueable", "predicate", "prioritize"} <= verbs <= set(volcano.HANDLERS)
    assert all(served_status(f"/volcano/{verb}") not in (404, 405) for verb in verbs)


def test_kueue_example_wires_flavor_topology_and_queues():
    topology = find("Topology", "gpu-fabric")
    assert find("ResourceFlavor", "h100")["spec"]["topologyName"] == topology["metadata"]["name"]
    queue = find("ClusterQueue", "training")
    assert find("LocalQueue", "training")["spec"]["clusterQueue"] == queue["metadata"]["name"]
    assert "nvidia.com/gpu" in queue["spec"]["resourceGroups"][0]["coveredResources"]
    check = find("AdmissionCheck", "meshfit-topology")
    assert check["spec"]["controllerName"] == "meshfit.io/topology"
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check["metadata"]["name"]}]


def test_example_pytorchjob_is_a_valid_gang():
    gang = load_job(MANIFESTS / "example-pytorchjob.yaml")
    assert (gang.key, len(gang.pods), gang.world_size) == ("ml/llama-70b", 16, 128)
    assert gang.constraint.required_level == "spine"  # a role: resolved per scheme (Topograph, GKE, AWS)


# ----- Deployment hardening, PDB (TLS, probes, ports, NetworkPolicy: test_manifests_tls.py) -----------
def meshfit_pod_spec() -> dict:
    """The meshfit Deployment's pod spec."""
    return find("Deployment", "meshfit")["spec"]["template"]["spec"]


def test_deployment_is_hardened_and_read_only_root_friendly():
    deployment = find("Deployment", "meshfit")
    assert deployment["spec"]["replicas"] == 2  # leader election: one active, one standby
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # a standby never becomes ready mid-rollout
    pod = meshfit_pod_spec()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security and "hostNetwork" not in pod
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
    # /tmp is the one writable path: an emptyDir (the image points TMPDIR, HOME and MPLCONFIGDIR at it)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if not m.get("readOnly")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert list(mounts) == ["/tmp"] and "emptyDir" in volumes[mounts["/tmp"]]
    namespace = find("Namespace", "meshfit-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_pod_disruption_budget_keeps_one_replica():
    pdb = find("PodDisruptionBudget", "meshfit")
    deployment = find("Deployment", "meshfit")
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert pdb["spec"]["minAvailable"] == 1 < deployment["spec"]["replicas"]
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


# ----- Dockerfile, .dockerignore, LICENSE ---------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, args = line.partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per build stage (the first list holds the global ARGs)."""
    stages: list[list[tuple[str, str]]] = [[]]
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            stages.append([])
        stages[-1].append(instruction)
    return stages


def test_dockerfile_is_multi_stage_slim_non_root_and_without_torch():
    known = {"FROM", "ARG", "ENV", "RUN", "COPY", "WORKDIR", "USER", "LABEL", "EXPOSE", "ENTRYPOINT", "CMD"}
    instructions = dockerfile_instructions()
    assert {i for i, _ in instructions} <= known
    global_args, builder, final = dockerfile_stages()
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in global_args
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder") and final[0] == ("FROM", "${PYTHON_IMAGE}")
    final_args = dict(final)
    assert any(i == "COPY" and a.startswith("--from=builder /opt/meshfit /opt/meshfit") for i, a in final)
    assert not any(i == "RUN" and "pip" in a for i, a in final)  # nothing installed in the final stage
    users = [a for i, a in final if i == "USER"]
    assert users == ["65532:65532"]
    assert [i for i, _ in final].index("USER") > max(n for n, (i, _) in enumerate(final) if i in ("RUN", "COPY"))
    env = " ".join(a for i, a in final if i == "ENV")
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp", "MPLCONFIGDIR=/tmp/"):
        assert setting in env
    assert json.loads(final_args["ENTRYPOINT"]) == ["meshfit", "serve"]
    build = " ".join(a for i, a in builder if i == "RUN")
    assert "compileall" in build  # bytecode at build time: nothing to write on a read-only root
    assert '! /opt/meshfit/bin/python -c "import torch"' in build
    assert "[runtime]" not in (REPO / "Dockerfile").read_text()
    (container,) = meshfit_pod_spec()["containers"]
    ports = {str(port["containerPort"]) for port in container["ports"]}
    assert set(final_args["EXPOSE"].split()) == ports == {"8888", "8889", "9090"}  # extender, metrics, gRPC


def cli_accepts(argv: list[str]) -> None:
    """Parse `meshfit <argv>` with the real CLI (no command is run); raises click's error if rejected."""
    import typer  # noqa: PLC0415

    from scheduler.cli import app  # noqa: PLC0415

    group = typer.main.get_command(app)
    command = group.commands[argv[0]]
    command.make_context(argv[0], list(argv[1:]))


def test_image_entrypoint_and_deployment_args_are_a_valid_command():
    final = dict(dockerfile_stages()[-1])
    entrypoint, default_args = json.loads(final["ENTRYPOINT"]), json.loads(final["CMD"])
    (container,) = meshfit_pod_spec()["containers"]
    assert "command" not in container  # the image's entrypoint is used as is
    for args in (default_args, container["args"]):
        assert "--kubeconfig" not in args and "--cluster" not in args  # in-cluster credentials
        cli_accepts(entrypoint[1:] + args)
    with pytest.raises(Exception, match="unexpected extra argument"):
        cli_accepts(entrypoint[1:] + ["serve", *container["args"]])  # `serve` twice would be rejected


def test_dockerignore_keeps_the_build_context_to_the_packages():
    lines = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert lines[0] == "*"
    copied = {a.split()[0] for i, a in dockerfile_stages()[1] if i == "COPY"} | {"LICENSE"}
    copied = {c for a in copied for c in a.split()} - {"./"}
    for path in copied:
        assert f"!{path.rstrip('/')}/" in lines or f"!{path}" in lines, path
    for package in ("topology", "scheduler", "plugins", "simulations"):
        assert f"!{package}/" in lines and (REPO / package / "__init__.py").exists()


def test_license_is_apache_2():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()


# ----- the second scheduler ------------------------------------------------------------------------------
def test_second_scheduler_runs_exactly_the_kube_scheduler_config():
    config = find("KubeSchedulerConfiguration")
    configmap = find("ConfigMap", "meshfit-scheduler-config")
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == config
    pod = find("Deployment", "meshfit-scheduler")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (config_flag,) = [a for a in container["command"] if a.startswith("--config=")]
    mount = next(m for m in container["volumeMounts"] if config_flag.partition("=")[2].startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert config_flag.rpartition("/")[2] in configmap["data"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == find("ServiceAccount", "meshfit-scheduler")["metadata"]["name"]


def test_second_scheduler_may_renew_its_own_lease():
    election = find("KubeSchedulerConfiguration")["leaderElection"]
    assert election["leaderElect"] is True
    rules = rules_of("Role", "meshfit-scheduler-lease", election["resourceNamespace"])
    assert rules == {("coordination.k8s.io", "leases", verb, (election["resourceName"],)) for verb in ("get", "update")}
    subjects = find("RoleBinding", "meshfit-scheduler-lease")["subjects"]
    assert {"kind": "ServiceAccount", "name": "meshfit-scheduler", "namespace": "kube-system"} in subjects
    assert {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-scheduler"} in subjects
    roles = {find("ClusterRoleBinding", n)["roleRef"]["name"] for n in
             ("meshfit-scheduler-as-kube-scheduler", "meshfit-scheduler-as-volume-scheduler")}
    assert roles == {"system:kube-scheduler", "system:volume-scheduler"}


def test_scheduler_backoff_brings_requeued_members_back_in_seconds():
    config = find("KubeSchedulerConfiguration")
    assert 1 <= config["podInitialBackoffSeconds"] <= config["podMaxBackoffSeconds"] <= 4


# ----- Grafana dashboard ----------------------------------------------------------------------------------
def dashboard() -> dict:
    """The dashboard JSON from its ConfigMap."""
    configmap = find("ConfigMap", "meshfit-grafana-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (key,) = configmap["data"]
    assert key.endswith(".json")
    return json.loads(configmap["data"][key])


def exported_metric_families() -> set[str]:
    """Every metric family the service's app exports (as `meshfit serve` builds it), GC pauses included."""
    from scheduler.service.app import build_scheduler  # noqa: PLC0415
    from scheduler.service.binder_memory import MemoryBinder  # noqa: PLC0415
    from scheduler.service.failures import FailureOptions  # noqa: PLC0415
    from scheduler.cache.state import ClusterState  # noqa: PLC0415

    _, metrics = build_scheduler(ClusterState(), MemoryBinder(), "first-fit", failures=FailureOptions())
    stop = metrics.track_gc_pauses()
    try:
        return {family.name for family in metrics.registry.collect()}
    finally:
        stop()


def test_grafana_dashboard_shows_every_exported_metric():
    board = dashboard()
    assert board["uid"] == "meshfit" and board["panels"]
    expressions = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {m for e in expressions for m in re.findall(r"\b(meshfit_[a-z0-9_]+)", e)}
    families = exported_metric_families()
    assert {"meshfit_request_seconds", "meshfit_gangs", "meshfit_gpus_free", "meshfit_gpus_free_largest_domain",
            "meshfit_reservation_expiries", "meshfit_gang_placements", "meshfit_step_time_ratio",
            "meshfit_rank_table_publish_failures", "meshfit_gc_pause_seconds", "meshfit_scrape_errors"} <= families
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    missing = {f for f in families if not any(f + s in used for s in suffixes)}
    assert not missing, f"metrics with no dashboard panel: {sorted(missing)}"
    unknown = {m for m in used if not any(m == f + s for f in families for s in suffixes)}
    assert not unknown, f"dashboard queries metrics the service does not export: {sorted(unknown)}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "job"}
