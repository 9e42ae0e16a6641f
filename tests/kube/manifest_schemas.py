"""JSON schemas for the non-core manifests, written from the upstream Go types (every object closed).

Sources: kube-scheduler `k8s.io/kube-scheduler/config/v1` (KubeSchedulerConfiguration, Extender),
Kueue v0.19 `apis/kueue/v1beta2` (Topology, ResourceFlavor, AdmissionCheck, ClusterQueue, LocalQueue),
Prometheus Operator `monitoring.coreos.com/v1` ServiceMonitor and PrometheusRule, cert-manager `cert-manager.io/v1`
(Certificate, ClusterIssuer), Kubeflow training-operator
`kubeflow.org/v1` PyTorchJob, Volcano scheduler configuration (`pkg/scheduler/conf`).  Pod
templates and ObjectMeta are left to the strict `kubernetes` model check.
"""

from __future__ import annotations

from typing import Any

STRING: dict[str, Any] = {"type": "string"}
BOOL: dict[str, Any] = {"type": "boolean"}
INT: dict[str, Any] = {"type": "integer"}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
DURATION: dict[str, Any] = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
QUANTITY: dict[str, Any] = {"type": ["integer", "string"]}
PERCENT: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 100}


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema that rejects unknown fields."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def array(items: dict[str, Any], min_items: int = 0) -> dict[str, Any]:
    """A list of `items`."""
    return {"type": "array", "items": items, "minItems": min_items}


def string_map(values: dict[str, Any] = STRING) -> dict[str, Any]:
    """map[string]`values`."""
    return {"type": "object", "additionalProperties": values}


def resource(api_version: str, kind: str, spec: dict[str, Any], spec_required: bool = True) -> dict[str, Any]:
    """A top-level object: apiVersion, kind, metadata (checked separately), spec."""
    return closed({"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": ANY_OBJECT,
                   "spec": spec, "status": ANY_OBJECT}, ("apiVersion", "kind", "metadata") + (("spec",) if spec_required else ()))


LABEL_SELECTOR = closed({"matchLabels": string_map(), "matchExpressions": array(closed(
    {"key": STRING, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]}, "values": array(STRING)},
    ("key", "operator")))})

# ----- kubescheduler.config.k8s.io/v1 --------------------------------------------------------------
PLUGIN_SET = closed({"enabled": array(closed({"name": STRING, "weight": INT}, ("name",))),
                     "disabled": array(closed({"name": STRING, "weight": INT}, ("name",)))})
EXTENSION_POINTS = ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve",
                    "permit", "preBind", "bind", "postBind", "multiPoint", "placementGenerate", "placementScore",
                    "placementFeasible", "podGroupPostFilter")
EXTENDER = closed({
    "urlPrefix": {"type": "string", "pattern": "^https?://"}, "filterVerb": STRING, "preemptVerb": STRING,
    "prioritizeVerb": STRING, "weight": {"type": "integer", "minimum": 1}, "bindVerb": STRING, "enableHTTPS": BOOL,
    "tlsConfig": closed({k: STRING for k in ("serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData")}
                        | {"insecure": BOOL}),
    "httpTimeout": DURATION, "nodeCacheCapable": BOOL, "ignorable": BOOL,
    "managedResources": array(closed({"name": STRING, "ignoredByScheduler": BOOL}, ("name",))),
}, ("urlPrefix",))
KUBE_SCHEDULER_CONFIGURATION = closed({
    "apiVersion": {"const": "kubescheduler.config.k8s.io/v1"}, "kind": {"const": "KubeSchedulerConfiguration"},
    "parallelism": {"type": "integer", "minimum": 1},
    "leaderElection": closed({"leaderElect": BOOL, "leaseDuration": DURATION, "renewDeadline": DURATION,
                              "retryPeriod": DURATION, "resourceLock": STRING, "resourceName": STRING,
                              "resourceNamespace": STRING}),
    "clientConnection": closed({"kubeconfig": STRING, "acceptContentTypes": STRING, "contentType": STRING,
                                "qps": {"type": "number"}, "burst": INT}),
    "enableProfiling": BOOL, "enableContentionProfiling": BOOL,
    "percentageOfNodesToScore": PERCENT, "percentageOfPlacementsToScore": PERCENT,
    "podInitialBackoffSeconds": {"type": "integer", "minimum": 1}, "podMaxBackoffSeconds": {"type": "integer", "minimum": 1},
    "profiles": array(closed({"schedulerName": STRING, "percentageOfNodesToScore": PERCENT,
                              "percentageOfPlacementsToScore": PERCENT,
                              "plugins": closed({p: PLUGIN_SET for p in EXTENSION_POINTS}),
                              "pluginConfig": array(closed({"name": STRING, "args": ANY_OBJECT}, ("name",)))})),
    "extenders": array(EXTENDER),
    "delayCacheUntilActive": BOOL,
}, ("apiVersion", "kind"))

# ----- Kueue -----------------------------------------------------------------------------------------
KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_TOPOLOGY = resource(KUEUE, "Topology", closed(
    {"levels": array(closed({"nodeLabel": STRING}, ("nodeLabel",)), 1) | {"maxItems": 16}}, ("levels",)))
TAINT = closed({"key": STRING, "value": STRING, "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                "timeAdded": STRING}, ("key", "effect"))
TOLERATION = closed({"key": STRING, "operator": {"enum": ["Exists", "Equal"]}, "value": STRING, "effect": STRING,
                     "tolerationSeconds": INT})
RESOURCE_FLAVOR = resource(KUEUE, "ResourceFlavor", closed(
    {"nodeLabels": string_map(), "nodeTaints": array(TAINT), "tolerations": array(TOLERATION), "topologyName": STRING}),
    spec_required=False)
ADMISSION_CHECK = resource(KUEUE, "AdmissionCheck", closed(
    {"controllerName": {"type": "string", "minLength": 1, "maxLength": 253},
     "parameters": closed({"apiGroup": STRING, "kind": STRING, "name": STRING}, ("apiGroup", "kind", "name"))},
    ("controllerName",)))
RESOURCE_QUOTA = closed({"name": STRING, "nominalQuota": QUANTITY, "borrowingLimit": QUANTITY, "lendingLimit": QUANTITY},
                        ("name", "nominalQuota"))
ADMISSION_CHECKS_STRATEGY = closed({"admissionChecks": array(closed(
    {"name": STRING, "onFlavors": array(STRING)}, ("name",)))})
CLUSTER_QUEUE = resource(KUEUE, "ClusterQueue", closed({
    "resourceGroups": array(closed({"coveredResources": array(STRING, 1),
                                    "flavors": array(closed({"name": STRING, "resources": array(RESOURCE_QUOTA, 1)},
                                                            ("name", "resources")), 1)},
                                   ("coveredResources", "flavors"))),
    "cohortName": STRING, "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
    "namespaceSelector": LABEL_SELECTOR, "flavorFungibility": ANY_OBJECT, "preemption": ANY_OBJECT,
    "admissionChecksStrategy": ADMISSION_CHECKS_STRATEGY, "concurrentAdmissionPolicy": ANY_OBJECT,
    "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]}, "fairSharing": ANY_OBJECT, "admissionScope": ANY_OBJECT}))
"""v1beta2 has no `cohort` (now `cohortName`) and no flat `admissionChecks` list (only the strategy)."""
LOCAL_QUEUE = resource(KUEUE, "LocalQueue", closed(
    {"clusterQueue": STRING, "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]}, "fairSharing": ANY_OBJECT}))

# ----- Prometheus Operator ---------------------------------------------------------------------------
SERVICE_MONITOR = resource("monitoring.coreos.com/v1", "ServiceMonitor", closed({
    "selector": LABEL_SELECTOR, "jobLabel": STRING, "targetLabels": array(STRING), "podTargetLabels": array(STRING),
    "namespaceSelector": closed({"any": BOOL, "matchNames": array(STRING)}), "sampleLimit": INT,
    "endpoints": array(closed({
        "port": STRING, "targetPort": QUANTITY, "path": STRING, "scheme": {"enum": ["http", "https"]},
        "params": ANY_OBJECT, "interval": DURATION, "scrapeTimeout": DURATION, "honorLabels": BOOL,
        "honorTimestamps": BOOL, "relabelings": array(ANY_OBJECT), "metricRelabelings": array(ANY_OBJECT),
        "tlsConfig": ANY_OBJECT, "bearerTokenSecret": ANY_OBJECT, "authorization": ANY_OBJECT,
        "followRedirects": BOOL, "enableHttp2": BOOL, "proxyUrl": STRING})),
}, ("selector",)))

# monitoring.coreos.com/v1 PrometheusRuleSpec / RuleGroup / Rule: a rule is an alert or a recording rule
PROMETHEUS_RULE = resource("monitoring.coreos.com/v1", "PrometheusRule", closed({
    "groups": array(closed({
        "name": STRING, "interval": DURATION, "query_offset": DURATION, "limit": INT, "labels": string_map(),
        "partial_response_strategy": STRING,
        "rules": array({"oneOf": [
            closed({"alert": STRING, "expr": QUANTITY, "for": DURATION, "keep_firing_for": DURATION,
                    "labels": string_map(), "annotations": string_map()}, ("alert", "expr")),
            closed({"record": STRING, "expr": QUANTITY, "labels": string_map()}, ("record", "expr"))]}),
    }, ("name", "rules")), 1),
}, ("groups",)))

# ----- cert-manager (cert-manager.io/v1: CertificateSpec, IssuerSpec) ---------------------------------
KEY_USAGES = ("signing", "digital signature", "content commitment", "key encipherment", "key agreement",
              "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
              "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
              "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc")
ISSUER_REF = closed({"name": STRING, "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "group": STRING}, ("name",))
CERTIFICATE = resource("cert-manager.io/v1", "Certificate", closed({
    "secretName": STRING, "issuerRef": ISSUER_REF, "commonName": STRING, "literalSubject": STRING,
    "subject": ANY_OBJECT, "duration": DURATION, "renewBefore": DURATION, "renewBeforePercentage": INT,
    "dnsNames": array(STRING), "ipAddresses": array(STRING), "uris": array(STRING), "emailAddresses": array(STRING),
    "otherNames": array(ANY_OBJECT), "secretTemplate": ANY_OBJECT, "keystores": ANY_OBJECT, "isCA": BOOL,
    "usages": array({"enum": list(KEY_USAGES)}), "encodeUsagesInRequest": BOOL, "revisionHistoryLimit": INT,
    "additionalOutputFormats": array(ANY_OBJECT), "nameConstraints": ANY_OBJECT,
    "privateKey": closed({"rotationPolicy": {"enum": ["Never", "Always"]}, "encoding": {"enum": ["PKCS1", "PKCS8"]},
                          "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": INT}),
}, ("secretName", "issuerRef")))
CLUSTER_ISSUER = resource("cert-manager.io/v1", "ClusterIssuer", {
    **closed({"selfSigned": closed({"crlDistributionPoints": array(STRING)}),
              "ca": closed({"secretName": STRING, "crlDistributionPoints": array(STRING),
                            "issuingCertificateURLs": array(STRING), "ocspServers": array(STRING)}, ("secretName",)),
              "acme": ANY_OBJECT, "vault": ANY_OBJECT, "venafi": ANY_OBJECT}),
    "minProperties": 1, "maxProperties": 1})

# ----- Kubeflow training operator --------------------------------------------------------------------
REPLICA_SPEC = closed({"replicas": {"type": "integer", "minimum": 0}, "template": ANY_OBJECT,
                       "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]}}, ("template",))
PYTORCH_JOB = resource("kubeflow.org/v1", "PyTorchJob", closed({
    "runPolicy": ANY_OBJECT, "elasticPolicy": ANY_OBJECT, "nprocPerNode": STRING,
    "pytorchReplicaSpecs": {"type": "object", "properties": {"Master": REPLICA_SPEC, "Worker": REPLICA_SPEC},
                            "additionalProperties": False, "minProperties": 1},
}, ("pytorchReplicaSpecs",)))

# ----- Volcano scheduler configuration ---------------------------------------------------------------
VOLCANO_PLUGIN_FLAGS = ("enabledJobOrder", "enabledNamespaceOrder", "enabledHierarchy", "enabledJobReady",
                        "enabledJobPipelined", "enabledTaskOrder", "enabledPreemptable", "enabledReclaimable",
                        "enablePreemptive", "enabledQueueOrder", "enabledClusterOrder", "enabledPredicate",
                        "enabledBestNode", "enabledNodeOrder", "enabledTargetJob", "enabledReservedNodes",
                        "enabledJobEnqueued", "enabledVictim", "enabledJobStarving", "enabledOverused",
                        "enabledAllocatable")
VOLCANO_SCHEDULER_CONF = closed({
    "actions": {"type": "string", "pattern": r"^\s*[a-z]+(\s*,\s*[a-z]+)*\s*$"},
    "tiers": array(closed({"plugins": array(closed({"name": STRING, "arguments": string_map({"type": ["string", "number", "boolean"]})}
                                                   | {flag: BOOL for flag in VOLCANO_PLUGIN_FLAGS}, ("name",)), 1)},
                          ("plugins",)), 1),
    "configurations": array(closed({"name": STRING, "arguments": ANY_OBJECT}, ("name",))),
    "metrics": ANY_OBJECT,
}, ("actions", "tiers"))

VOLCANO_EXTENDER_ARGUMENTS = ("extender.urlPrefix", "extender.httpTimeout", "extender.onSessionOpenVerb",
                              "extender.onSessionCloseVerb", "extender.predicateVerb", "extender.prioritizeVerb",
                              "extender.preemptableVerb", "extender.reclaimableVerb", "extender.queueOverusedVerb",
                              "extender.jobEnqueueableVerb", "extender.jobReadyVerb", "extender.ignorable")
"""Argument keys Volcano's extender plugin reads (pkg/scheduler/plugins/extender/extender.go)."""

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"): KUBE_SCHEDULER_CONFIGURATION,
    (KUEUE, "Topology"): KUEUE_TOPOLOGY,
    (KUEUE, "ResourceFlavor"): RESOURCE_FLAVOR,
    (KUEUE, "AdmissionCheck"): ADMISSION_CHECK,
    (KUEUE, "ClusterQueue"): CLUSTER_QUEUE,
    (KUEUE, "LocalQueue"): LOCAL_QUEUE,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("cert-manager.io/v1", "Certificate"): CERTIFICATE,
    ("cert-manager.io/v1", "ClusterIssuer"): CLUSTER_ISSUER,
    ("kubeflow.org/v1", "PyTorchJob"): PYTORCH_JOB,
}
"""(apiVersion, kind) -> schema of the whole object."""
