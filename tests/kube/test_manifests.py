"""manifests/: every object strictly valid (core kinds via the client's models, others via JSON schemas),
RBAC exactly what the adapters use (recorded from the adapters' own requests), the Deployment hardened
(non-root, read-only root, probes on served paths), the Dockerfile's entrypoint and the Deployment's
args accepted by the CLI, the scheduler configs pointing at routes the service serves, and the
Grafana dashboard covering every metric the service exports.  (tests/realk8s/test_manifests_real.py
applies the same objects to a real API server with server-side dry run.)"""

from __future__ import annotations

import copy
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from scheduler.handoff.manifests import load_job
from scheduler.service.verbs import volcano
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


def service_url() -> tuple[str, int]:
    """In-cluster host and verb (https) port of the meshfit Service."""
    service = find("Service", "meshfit")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "extender")
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc", port


def served_status(path: str) -> int:
    """HTTP status the meshfit app answers for an empty POST to `path` (404/405 = not served)."""
    from starlette.testclient import TestClient  # noqa: PLC0415

    from scheduler.service.app import build_scheduler, create_app  # noqa: PLC0415
    from scheduler.service.binding.binder_memory import MemoryBinder  # noqa: PLC0415
    from scheduler.cache.state import ClusterState  # noqa: PLC0415

    scheduler, metrics = build_scheduler(ClusterState(), MemoryBinder(), "first-fit")
    return TestClient(create_app(scheduler, metrics)).post(path, content=b"{}").status_code


def test_kube_scheduler_extender_points_at_served_routes():
    config = find("KubeSchedulerConfiguration")
    assert config["profiles"] == [{"schedulerName": "meshfit", "percentageOfNodesToScore": 100, "plugins": {
        "postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}}]  # meshfit preempts for its profile's pods
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
