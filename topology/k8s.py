"""Read plain Kubernetes Node and Pod dicts: GPU quantities, readiness, taints and tolerations, pod GPU use.

Works on the dicts `json`/`yaml`/`msgspec` decode (never the `kubernetes` model classes, which are
far too slow for a 10,000-GPU cluster).  A node is schedulable unless it carries a `NoSchedule` or
`NoExecute` taint no supplied toleration matches; cordoning and NotReady count as the taints
kube-controller-manager adds for them (`node.kubernetes.io/unschedulable`, `.../not-ready`,
`.../unreachable`), so `--toleration node.kubernetes.io/unschedulable` admits cordoned nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from topology.builder import NodeRecord
from topology.config import DEFAULT_GPU_RESOURCES
from topology.model import TopologyError

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
FINISHED_PHASES = ("Succeeded", "Failed")

_QUANTITY_RE = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*$")


@dataclass(frozen=True)
class Toleration:
    """A pod-style toleration: empty key with operator Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """Kubernetes matching rules: effect (empty = any), key (empty + Exists = any), value for Equal."""
        if self.effect and self.effect != taint.get("effect", ""):
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.get("key", ""):
            return False
        return self.operator == "Exists" or self.value == (taint.get("value") or "")


def parse_toleration(spec: str | Mapping[str, Any] | Toleration) -> Toleration:
    """A toleration from a pod-spec dict or a `key[=value][:Effect]` string (`*` tolerates everything)."""
    if isinstance(spec, Toleration):
        return spec
    if isinstance(spec, Mapping):
        key = str(spec.get("key") or "")
        operator = str(spec.get("operator") or ("Exists" if not key else "Equal"))
        if operator not in ("Equal", "Exists"):
            raise TopologyError(f"toleration operator must be Equal or Exists, got {operator!r}")
        return Toleration(key, operator, str(spec.get("value") or ""), str(spec.get("effect") or ""))
    text = str(spec).strip()
    if text in ("*", ""):
        return Toleration(operator="Exists")
    body, _, effect = text.partition(":")
    if effect and effect not in (*BLOCKING_EFFECTS, "PreferNoSchedule"):
        raise TopologyError(f"toleration {text!r}: effect must be NoSchedule, NoExecute or PreferNoSchedule")
    key, has_value, value = body.partition("=")
    return Toleration(key, "Equal" if has_value else "Exists", value, effect)


MAX_GPU_QUANTITY = 1_000_000
"""Largest GPU quantity read from a node or pod; anything above it is refused as malformed."""


def parse_gpu_quantity(raw: Any, where: str) -> int:
    """A whole, non-negative GPU count from a Kubernetes quantity (`8`, `"8"`, `"8.0"`); else TopologyError."""
    if isinstance(raw, str) and raw.isdigit() and raw.isascii() and len(raw) <= 6:
        return int(raw)
    if isinstance(raw, bool):
        raise TopologyError(f"{where}: GPU quantity must be a number, got {raw!r}")
    if isinstance(raw, int):
        value = Decimal(raw)
    else:
        match = _QUANTITY_RE.match(str(raw)) if isinstance(raw, (str, float)) else None
        try:
            value = Decimal(match.group(1)) if match else None
        except InvalidOperation:
            value = None
        if value is None or not value.is_finite():
            raise TopologyError(f"{where}: GPU quantity {raw!r} is not a number")
    if value < 0:
        raise TopologyError(f"{where}: negative GPU quantity {raw!r}")
    if value > MAX_GPU_QUANTITY:  # before int(): "1e999999999" would take minutes to expand
        raise TopologyError(f"{where}: GPU quantity {str(raw)[:40]!r} is above {MAX_GPU_QUANTITY}")
    if value != value.to_integral_value():
        raise TopologyError(f"{where}: GPU quantity {raw!r} is not a whole number")
    return int(value)


def node_gpu_count(node: Mapping[str, Any], gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES) -> int | None:
    """Allocatable GPUs (capacity if allocatable is absent); None when the node has no GPU resource at all."""
    status = node.get("status") or {}
    name = (node.get("metadata") or {}).get("name", "?")
    for field in ("allocatable", "capacity"):
        resources = status.get(field) or {}
        for resource in gpu_resources:
            if resource in resources:
                return parse_gpu_quantity(resources[resource], f"node {name} {field}[{resource}]")
    return None


def _condition_taints(status: Mapping[str, Any]) -> list[dict[str, str]]:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            ready = condition.get("status")
            if ready == "True":
                return []
            key = UNREACHABLE_TAINT if ready == "Unknown" else NOT_READY_TAINT
            return [{"key": key, "effect": "NoExecute"}]
    return []


def blocking_taints(node: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every NoSchedule/NoExecute taint on the node, including those implied by cordon and NotReady."""
    spec = node.get("spec") or {}
    taints = [dict(t) for t in spec.get("taints") or () if t.get("effect") in BLOCKING_EFFECTS]
    implied = _condition_taints(node.get("status") or {})
    if spec.get("unschedulable"):
        implied.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    present = {t.get("key") for t in taints}
    return taints + [t for t in implied if t["key"] not in present]


def _taint_reason(taint: Mapping[str, Any]) -> str:
    key = taint.get("key", "")
    if key == UNSCHEDULABLE_TAINT:
        return "cordoned"
    if key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        return "NotReady" if key == NOT_READY_TAINT else "NotReady (unreachable)"
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"taint {key}{value}:{taint.get('effect')}"


def unschedulable_reason(node: Mapping[str, Any], tolerations: Iterable[Toleration] = ()) -> str | None:
    """Why new pods cannot land on the node (untolerated blocking taints), or None if they can."""
    tolerations = tuple(tolerations)
    reasons = [_taint_reason(t) for t in blocking_taints(node)
               if not any(tol.tolerates(t) for tol in tolerations)]
    return "; ".join(dict.fromkeys(reasons)) or None


def node_record_from_k8s(
    node: Mapping[str, Any],
    tolerations: Iterable[str | Mapping[str, Any] | Toleration] = (),
    gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
) -> NodeRecord:
    """A builder `NodeRecord` from one Kubernetes Node dict (GPUs, labels, schedulability with reason)."""
    if not isinstance(node, Mapping):
        raise TopologyError("a Node item is not a mapping")
    metadata = node.get("metadata") or {}
    name = metadata.get("name")
    if not name or not isinstance(name, str):
        raise TopologyError("a Node has no metadata.name")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise TopologyError(f"node {name}: metadata.labels is not a mapping")
    gpus = node_gpu_count(node, gpu_resources) or 0
    reason = unschedulable_reason(node, [parse_toleration(t) for t in tolerations])
    return NodeRecord(name, gpus, {str(k): str(v) for k, v in labels.items()}, reason is None, reason)


def _container_gpus(container: Mapping[str, Any], gpu_resources: tuple[str, ...], where: str) -> int:
    resources = container.get("resources") or {}
    for field in ("requests", "limits"):
        values = resources.get(field) or {}
        for resource in gpu_resources:
            if resource in values:
                return parse_gpu_quantity(values[resource], f"{where} {field}[{resource}]")
    return 0


def pod_gpu_request(pod: Mapping[str, Any], gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES) -> int:
    """GPUs the pod holds, computed as kube does: max(app containers + sidecars, each init step)."""
    spec = pod.get("spec") or {}
    resources = tuple(gpu_resources)
    where = f"pod {pod_key(pod)}"
    sidecars, init_peak = 0, 0
    for init in spec.get("initContainers") or ():
        gpus = _container_gpus(init, resources, where)
        if init.get("restartPolicy") == "Always":
            sidecars += gpus
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + gpus)
    apps = sum(_container_gpus(c, resources, where) for c in spec.get("containers") or ())
    return max(apps + sidecars, init_peak)


def pod_key(pod: Mapping[str, Any]) -> str:
    """`namespace/name` of a pod (namespace `default` when absent)."""
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '?'}"


def pod_holds_node(pod: Mapping[str, Any]) -> str | None:
    """The node a bound, unfinished pod occupies, or None (unbound, Succeeded or Failed)."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node_name or phase in FINISHED_PHASES:
        return None
    return str(node_name)
