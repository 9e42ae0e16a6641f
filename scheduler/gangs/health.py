"""Which nodes count as failed: the configurable unhealthy-node sources, and when each node failed.

A gang member bound to a failed node is replaced (`scheduler.service.lifecycle.replacement`); a failed node is
also unschedulable for new placements.  Sources (`NodeHealthSources`, a strict pydantic model):

- `not_ready`: the `Ready` condition is `False` or `Unknown` (kubelet stopped reporting);
- `cordoned`: `spec.unschedulable` (`kubectl cordon`, or a remediation tool cordoning a bad node);
- `no_execute`: a `NoExecute` taint meshfit's `--toleration`s do not tolerate (the node lifecycle
  controller's `not-ready` / `unreachable` taints, or an operator's own);
- `conditions`: node conditions, `Type` (status `True`) or `Type=Status`.  Defaults: the permanent
  conditions of node-problem-detector's kernel monitor, `KernelDeadlock` and `ReadonlyFilesystem`, and
  NVIDIA NVSentinel's `GpuDcgmConnectivityFailure` (DCGM cannot reach the GPUs);
- `labels`: `key=value` node labels.  Default: the GPU Operator's driver upgrade controller's
  `nvidia.com/gpu-driver-upgrade-state=upgrade-failed`;
- `gpu_allocatable`: allocatable GPUs below capacity.  The NVIDIA device plugin marks a failed GPU
  (XID error, lost device) Unhealthy and the kubelet lowers `status.allocatable`, so this is the
  signal a GPU died under a running pod.

`node_failure` gives the first matching (source, reason) of a Node dict; `NodeFailures` remembers
since when each node has been failed (a deleted node counts from its deletion) so that the service
can ride out flaps (`--unhealthy-grace`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from topology.config import DEFAULT_GPU_RESOURCES
from topology.k8s import Toleration, parse_gpu_quantity
from topology.model import ClusterTopology, TopologyError

SOURCE_NOT_READY = "not-ready"
SOURCE_CORDONED = "cordoned"
SOURCE_NO_EXECUTE = "no-execute"
SOURCE_CONDITION = "condition"
SOURCE_LABEL = "label"
SOURCE_GPU_ALLOCATABLE = "gpu-allocatable"
SOURCE_DELETED = "deleted"
SOURCES = (SOURCE_NOT_READY, SOURCE_CORDONED, SOURCE_NO_EXECUTE, SOURCE_CONDITION, SOURCE_LABEL,
           SOURCE_GPU_ALLOCATABLE, SOURCE_DELETED)
"""Every failure source: the bounded label values of `meshfit_member_replacements_total{source}`."""

DEFAULT_CONDITIONS = ("KernelDeadlock", "ReadonlyFilesystem", "GpuDcgmConnectivityFailure")
DEFAULT_LABELS = ("nvidia.com/gpu-driver-upgrade-state=upgrade-failed",)
CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_ENTRIES = 64


def _check_condition(spec: str) -> str:
    kind, has_status, status = spec.partition("=")
    if not kind or not kind.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum() \
            or len(spec) > 253:
        raise ValueError(f"unhealthy condition {spec!r}: expected Type or Type=Status (letters, digits, -_./)")
    if has_status and status not in CONDITION_STATUSES:
        raise ValueError(f"unhealthy condition {spec!r}: status must be one of {', '.join(CONDITION_STATUSES)}")
    return spec


def _check_label(spec: str) -> str:
    key, has_value, _ = spec.partition("=")
    if not has_value or not key or len(spec) > 317 or any(c.isspace() for c in spec):
        raise ValueError(f"unhealthy label {spec!r}: expected key=value (no spaces)")
    return spec


class NodeHealthSources(BaseModel):
    """What makes a node count as failed (see the module docstring); unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    not_ready: bool = True
    cordoned: bool = True
    no_execute: bool = True
    conditions: tuple[str, ...] = Field(default=DEFAULT_CONDITIONS, max_length=MAX_ENTRIES)
    labels: tuple[str, ...] = Field(default=DEFAULT_LABELS, max_length=MAX_ENTRIES)
    gpu_allocatable: bool = True

    @field_validator("conditions")
    @classmethod
    def _conditions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_condition(v) for v in value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_label(v) for v in value)


def _condition_hit(conditions: Iterable[Mapping[str, Any]], specs: tuple[str, ...]) -> str | None:
    by_type = {str(c.get("type")): str(c.get("status")) for c in conditions if isinstance(c, Mapping)}
    for spec in specs:
        kind, _, wanted = spec.partition("=")
        if kind in by_type and by_type[kind] == (wanted or "True"):
            return f"condition {kind}={by_type[kind]}"
    return None


def _gpus_lost(status: Mapping[str, Any], resources: Iterable[str]) -> str | None:
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    for resource in resources:
        if resource in capacity and resource in allocatable:
            try:
                have = parse_gpu_quantity(allocatable[resource], resource)
                total = parse_gpu_quantity(capacity[resource], resource)
            except TopologyError:
                return None
            if have < total:
                return f"{total - have} of {total} {resource} unhealthy (allocatable {have} < capacity {total})"
    return None


def node_failure(node: Mapping[str, Any], sources: NodeHealthSources, tolerations: Iterable[Toleration] = (),
                 gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES) -> tuple[str, str] | None:
    """(source, reason) of the first configured source the Node dict matches, or None when it is healthy."""
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
    if sources.not_ready:
        ready = next((str(c.get("status")) for c in conditions if c.get("type") == "Ready"), "True")
        if ready != "True":
            return SOURCE_NOT_READY, f"NotReady (Ready={ready})"
    if sources.cordoned and spec.get("unschedulable"):
        return SOURCE_CORDONED, "cordoned"
    if sources.no_execute:
        tolerations = tuple(tolerations)
        for taint in spec.get("taints") or ():
            if isinstance(taint, Mapping) and taint.get("effect") == "NoExecute" \
                    and not any(t.tolerates(taint) for t in tolerations):
                value = f"={taint.get('value')}" if taint.get("value") else ""
                return SOURCE_NO_EXECUTE, f"taint {taint.get('key')}{value}:NoExecute"
    hit = _condition_hit(conditions, sources.conditions)
    if hit:
        return SOURCE_CONDITION, hit
    for label in sources.labels:
        key, _, value = label.partition("=")
        if str(labels.get(key, "\0")) == value:
            return SOURCE_LABEL, f"label {label}"
    if sources.gpu_allocatable:
        lost = _gpus_lost(status, gpu_resources)
        if lost:
            return SOURCE_GPU_ALLOCATABLE, lost
    return None


@dataclass(frozen=True)
class NodeFailure:
    """A node that is failed: why (source and reason) and since when (the service clock)."""

    node: str
    source: str
    reason: str
    since: float


class NodeFailures:
    """Node name -> `NodeFailure`, kept from the node watch (call under `ClusterState.lock`)."""

    def __init__(self, clock: Callable[[], float], sources: NodeHealthSources | None = None,
                 tolerations: Iterable[Toleration] = (), gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES) -> None:
        self.clock = clock
        self.sources = sources or NodeHealthSources()
        self.tolerations = tuple(tolerations)
        self.gpu_resources = tuple(gpu_resources)
        self.failed: dict[str, NodeFailure] = {}

    def observe(self, name: str, node: Mapping[str, Any] | None) -> NodeFailure | None:
        """Note a node's current dict (None: deleted); returns its failure, or None when healthy."""
        if node is None:
            hit: tuple[str, str] | None = (SOURCE_DELETED, "deleted from the cluster")
        else:
            hit = node_failure(node, self.sources, self.tolerations, self.gpu_resources)
        if hit is None:
            self.failed.pop(name, None)
            return None
        old = self.failed.get(name)
        if old is None or (old.source, old.reason) != hit:
            since = old.since if old is not None else self.clock()
            self.failed[name] = NodeFailure(name, hit[0], hit[1], since)
        return self.failed[name]

    def reset(self, nodes: Mapping[str, Mapping[str, Any]]) -> None:
        """A fresh list: keep the failure times of nodes still failed; listed-away nodes count as deleted."""
        for name in list(self.failed):
            if name not in nodes and self.failed[name].source != SOURCE_DELETED:
                self.observe(name, None)
        for name, node in nodes.items():
            self.observe(name, node)

    def forget(self, name: str) -> None:
        """Stop tracking a node (a deleted node nothing is bound to any more)."""
        self.failed.pop(name, None)

    def failed_for(self, now: float, grace: float) -> list[NodeFailure]:
        """Nodes failed for at least `grace` seconds, by name."""
        return [f for name, f in sorted(self.failed.items()) if now - f.since >= grace]


def mark_failed_unschedulable(topo: ClusterTopology, failures: NodeFailures) -> None:
    """Make every failed node of a (re)built topology unschedulable, with its failure as the reason."""
    for name, failure in failures.failed.items():
        node = topo.node_by_name.get(name)
        if node is not None and node.schedulable:
            topo.set_schedulable(name, False, f"failed: {failure.reason}")
