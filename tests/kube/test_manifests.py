"""manifests/: every object strictly valid (core kinds via the client's models, others via JSON schemas),
RBAC exactly what the adapters use, and the scheduler configs pointing at routes the service serves."""

from __future__ import annotations

import copy
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from scheduler.kube.resources import DEFAULT_RESOURCES
from scheduler.manifests import load_job
from scheduler.service import volcano
from tests.kube.manifest_schemas import SCHEMAS, VOLCANO_EXTENDER_ARGUMENTS, VOLCANO_SCHEDULER_CONF
from tests.kube.strict_models import check_model, validate_core_object

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CORE_GROUPS = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1")


def load_all() -> list[tuple[str, dict]]:
    """(file name, object) for every document under manifests/."""
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


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
    assert {("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"), ("v1", "ConfigMap"),
            ("kueue.x-k8s.io/v1alpha1", "Topology"), ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"),
            ("kueue.x-k8s.io/v1beta1", "ClusterQueue"), ("kueue.x-k8s.io/v1beta1", "LocalQueue"),
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
]


@pytest.mark.parametrize("target,mutate,message", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_validation_rejects_typos(target, mutate, message):
    obj = copy.deepcopy(find(*target))
    mutate(obj)
    errors = validate(obj)
    assert errors and any(message in e for e in errors), errors


def granted() -> set[tuple[str, str, str]]:
    """(api group, resource, verb) the ClusterRole grants; wildcards are refused outright."""
    out = set()
    for rule in find("ClusterRole", "meshfit")["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, res, verb)
                    out.add((group, res, verb))
    return out


def test_rbac_grants_exactly_what_the_adapters_use():
    needed = {(r.group, r.plural, verb) for r in DEFAULT_RESOURCES for verb in ("get", "list", "watch")}
    needed |= {("", "pods", "patch"), ("", "pods/binding", "create"),
               ("", "configmaps", "get"), ("", "configmaps", "create"), ("", "configmaps", "update")}
    assert granted() == needed
    binding = find("ClusterRoleBinding", "meshfit")
    account = find("ServiceAccount", "meshfit")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "meshfit", "namespace": account["metadata"]["namespace"]}]
    assert find("Deployment", "meshfit")["spec"]["template"]["spec"]["serviceAccountName"] == "meshfit"


def service_url() -> tuple[str, int]:
    """In-cluster host and http port of the meshfit Service."""
    service = find("Service", "meshfit")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc", port


def test_service_and_deployment_agree_on_ports():
    service = find("Service", "meshfit")
    container = find("Deployment", "meshfit")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8888, "grpc": 9090} == ports
    assert container["args"][container["args"].index("--port") + 1] == "8888"
    assert container["args"][container["args"].index("--grpc-port") + 1] == "9090"
    assert find("ServiceMonitor", "meshfit")["spec"]["endpoints"][0]["port"] == "http"


def served_status(path: str) -> int:
    """HTTP status the meshfit app answers for an empty POST to `path` (404/405 = not served)."""
    from starlette.testclient import TestClient  # noqa: PLC0415

    from scheduler.service.app import build_scheduler, create_app  # noqa: PLC0415
    from scheduler.service.binder_memory import MemoryBinder  # noqa: PLC0415
    from scheduler.state import ClusterState  # noqa: PLC0415

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


def test_volcano_configmap_enables_the_extender_with_known_arguments_and_verbs():
    conf = yaml.safe_load(find("ConfigMap", "volcano-scheduler-configmap")["data"]["volcano-scheduler.conf"])
    jsonschema.validate(conf, VOLCANO_SCHEDULER_CONF)
    plugins = [p for tier in conf["tiers"] for p in tier["plugins"] if p["name"] == "extender"]
    assert len(plugins) == 1
    arguments = plugins[0]["arguments"]
    assert set(arguments) <= set(VOLCANO_EXTENDER_ARGUMENTS)
    url = urlsplit(arguments["extender.urlPrefix"])
    assert (url.hostname, url.port, url.path) == (*service_url(), "/volcano")
    verbs = {v for k, v in arguments.items() if k.endswith("Verb")}
    assert {"jobEnqueueable", "predicate", "prioritize"} <= verbs <= set(volcano.HANDLERS)
    assert all(served_status(f"/volcano/{verb}") not in (404, 405) for verb in verbs)


def test_kueue_example_wires_flavor_topology_and_queues():
    topology = find("Topology", "gpu-fabric")
    assert find("ResourceFlavor", "h100")["spec"]["topologyName"] == topology["metadata"]["name"]
    queue = find("ClusterQueue", "training")
    assert find("LocalQueue", "training")["spec"]["clusterQueue"] == queue["metadata"]["name"]
    assert "nvidia.com/gpu" in queue["spec"]["resourceGroups"][0]["coveredResources"]


def test_example_pytorchjob_is_a_valid_gang():
    gang = load_job(MANIFESTS / "example-pytorchjob.yaml")
    assert (gang.key, len(gang.pods), gang.world_size) == ("ml/llama-70b", 16, 128)
    assert gang.constraint.required_level == "spine"  # a role: resolved per scheme (Topograph, GKE, AWS)
