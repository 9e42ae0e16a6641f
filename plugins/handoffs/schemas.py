"""Strict schemas for rendered jobs: CRD wrappers as pydantic models (extra="forbid") written from the
upstream Go types, and core Kubernetes parts checked field by field against the `kubernetes` client models.

Sources: kubeflow training-operator v1 `PyTorchJobSpec`/`ReplicaSpec`/`RunPolicy`, JobSet
v1alpha2 `JobSetSpec`/`ReplicatedJob`/`Network`, Trainer v1alpha1 `TrainJobSpec`/`Trainer`/
`PodSpecOverride`/`ContainerOverride`.  Only for validation (tests, `meshfit render --check`):
never on a hot path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict

_LIST = re.compile(r"^[lL]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(([^,]+), (.+)\)|Dict\[([^,]+), (.+)\])$")
_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "quantity": (str, int, float)}
_QUANTITY_MAPS = ("limits", "requests")
"""resource.Quantity maps: the API server accepts numbers there, the client models say str."""


class SchemaError(ValueError):
    """A rendered object that does not follow its API schema."""


def check_k8s(value: Any, type_name: str, where: str = "") -> None:
    """Raise SchemaError unless `value` fits the kubernetes client model `type_name` (unknown keys rejected)."""
    from kubernetes import client

    if type_name in ("object", "Object", "datetime", "date") or not hasattr(client, type_name) and type_name not in _SCALARS \
            and not _LIST.match(type_name) and not _DICT.match(type_name):
        return
    if type_name in _SCALARS:
        scalar = _SCALARS[type_name]
        if not isinstance(value, scalar) or (type_name != "bool" and isinstance(value, bool)):
            raise SchemaError(f"{where}: expected {type_name}, got {type(value).__name__}")
        return
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            raise SchemaError(f"{where}: expected a list")
        for i, item in enumerate(value):
            check_k8s(item, match.group(1), f"{where}[{i}]")
        return
    if match := _DICT.match(type_name):
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected a map")
        item_type = match.group(2) or match.group(4)
        if item_type == "str" and where.rsplit(".", 1)[-1] in _QUANTITY_MAPS:
            item_type = "quantity"
        for key, item in value.items():
            check_k8s(item, item_type, f"{where}.{key}")
        return
    model = getattr(client, type_name)
    if not isinstance(value, dict):
        raise SchemaError(f"{where}: expected an object ({type_name})")
    json_to_attr = {json_key: attr for attr, json_key in model.attribute_map.items()}
    for key, item in value.items():
        if key not in json_to_attr:
            raise SchemaError(f"{where}.{key}: unknown field of {type_name}")
        check_k8s(item, model.openapi_types[json_to_attr[key]], f"{where}.{key}")
    _check_required(value, type_name, where)


def _check_required(value: dict, type_name: str, where: str) -> None:
    """SchemaError if a field the client model marks required is absent."""
    from kubernetes import client

    model = getattr(client, type_name)
    fields = getattr(model, "model_fields", None)
    if fields is not None:  # pydantic-based client models
        required = [attr for attr, info in fields.items() if info.is_required()]
    else:  # classic client models: the constructor's setters reject None for required fields
        try:
            model(**{attr: None for attr in ()})
            required = []
        except ValueError as exc:
            required = [str(exc).split("`")[1]] if "`" in str(exc) else []
    for attr in required:
        if model.attribute_map.get(attr, attr) not in value:
            raise SchemaError(f"{where}: required field {model.attribute_map.get(attr, attr)!r} is missing")


def _k8s(type_name: str) -> AfterValidator:
    def check(value: Any) -> Any:
        check_k8s(value, type_name, type_name)
        return value
    return AfterValidator(check)


ObjectMeta = Annotated[dict, _k8s("V1ObjectMeta")]
PodTemplateSpec = Annotated[dict, _k8s("V1PodTemplateSpec")]
JobTemplateSpec = Annotated[dict, _k8s("V1JobTemplateSpec")]
EnvVars = Annotated[list, _k8s("list[V1EnvVar]")]
VolumeMounts = Annotated[list, _k8s("list[V1VolumeMount]")]
Volumes = Annotated[list, _k8s("list[V1Volume]")]
Tolerations = Annotated[list, _k8s("list[V1Toleration]")]
ResourceRequirements = Annotated[dict, _k8s("V1ResourceRequirements")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObjectMetaOnly(_Strict):
    """Holder that validates `metadata` as a V1ObjectMeta."""

    metadata: ObjectMeta


class ReplicaSpec(_Strict):
    """training-operator v1 ReplicaSpec."""

    replicas: Optional[int] = None
    template: PodTemplateSpec
    restartPolicy: Optional[Literal["Always", "OnFailure", "Never", "ExitCode"]] = None


class PyTorchJobSpec(_Strict):
    """training-operator v1 PyTorchJobSpec (runPolicy / elasticPolicy kept as objects)."""

    runPolicy: Optional[dict] = None
    elasticPolicy: Optional[dict] = None
    nprocPerNode: Optional[str] = None
    pytorchReplicaSpecs: dict[Literal["Master", "Worker"], ReplicaSpec]


class PyTorchJob(ObjectMetaOnly):
    """kubeflow.org/v1 PyTorchJob."""

    apiVersion: Literal["kubeflow.org/v1"]
    kind: Literal["PyTorchJob"]
    spec: PyTorchJobSpec


class JobSetNetwork(_Strict):
    """JobSet v1alpha2 Network."""

    enableDNSHostnames: Optional[bool] = None
    subdomain: Optional[str] = None
    publishNotReadyAddresses: Optional[bool] = None


class ReplicatedJob(_Strict):
    """JobSet v1alpha2 ReplicatedJob."""

    name: str
    groupName: Optional[str] = None
    template: JobTemplateSpec
    replicas: Optional[int] = None
    dependsOn: Optional[list[dict]] = None


class JobSetSpec(_Strict):
    """JobSet v1alpha2 JobSetSpec."""

    replicatedJobs: list[ReplicatedJob]
    network: Optional[JobSetNetwork] = None
    successPolicy: Optional[dict] = None
    failurePolicy: Optional[dict] = None
    startupPolicy: Optional[dict] = None
    suspend: Optional[bool] = None
    coordinator: Optional[dict] = None
    managedBy: Optional[str] = None
    ttlSecondsAfterFinished: Optional[int] = None


class JobSet(ObjectMetaOnly):
    """jobset.x-k8s.io/v1alpha2 JobSet."""

    apiVersion: Literal["jobset.x-k8s.io/v1alpha2"]
    kind: Literal["JobSet"]
    spec: JobSetSpec


class ContainerOverride(_Strict):
    """Trainer v1alpha1 ContainerOverride."""

    name: str
    command: Optional[list[str]] = None
    args: Optional[list[str]] = None
    env: Optional[EnvVars] = None
    envFrom: Optional[list[dict]] = None
    volumeMounts: Optional[VolumeMounts] = None


class PodSpecOverride(_Strict):
    """Trainer v1alpha1 PodSpecOverride."""

    targetJobs: list[dict[Literal["name"], str]]
    containers: Optional[list[ContainerOverride]] = None
    initContainers: Optional[list[ContainerOverride]] = None
    volumes: Optional[Volumes] = None
    nodeSelector: Optional[dict[str, str]] = None
    serviceAccountName: Optional[str] = None
    tolerations: Optional[Tolerations] = None


class Trainer(_Strict):
    """Trainer v1alpha1 Trainer."""

    image: Optional[str] = None
    command: Optional[list[str]] = None
    args: Optional[list[str]] = None
    env: Optional[EnvVars] = None
    numNodes: Optional[int] = None
    resourcesPerNode: Optional[ResourceRequirements] = None
    numProcPerNode: Optional[str | int] = None


class TrainJobSpec(_Strict):
    """Trainer v1alpha1 TrainJobSpec."""

    runtimeRef: dict
    initializer: Optional[dict] = None
    datasetConfig: Optional[dict] = None
    modelConfig: Optional[dict] = None
    trainer: Optional[Trainer] = None
    labels: Optional[dict[str, str]] = None
    annotations: Optional[dict[str, str]] = None
    podSpecOverrides: Optional[list[PodSpecOverride]] = None
    suspend: Optional[bool] = None
    managedBy: Optional[str] = None


class TrainJob(ObjectMetaOnly):
    """trainer.kubeflow.org/v1alpha1 TrainJob."""

    apiVersion: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainJob"]
    spec: TrainJobSpec


SCHEMAS = {"PyTorchJob": PyTorchJob, "JobSet": JobSet, "TrainJob": TrainJob}


def validate_rendered(obj: dict[str, Any]) -> None:
    """Raise SchemaError (one line) unless `obj` follows its kind's schema."""
    from pydantic import ValidationError

    schema = SCHEMAS.get(obj.get("kind"))
    if schema is None:
        raise SchemaError(f"no schema for kind {obj.get('kind')!r}")
    try:
        schema.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SchemaError(f"{obj['kind']} {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
