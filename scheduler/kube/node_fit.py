"""Would kube-scheduler's own filters accept this pod on this node?  The check behind meshfit binding members itself.

When a gang is reserved, meshfit binds its members directly (docs/architecture.md, "Binding path"); a member
kube-scheduler never evaluated must still be safe on its node.  `pod_needs` reads, once per pod version,
what kube-scheduler's default filter plugins look at; `fit_reason` checks it against a Node object and the
requests already bound there:

- NodeUnschedulable (`spec.unschedulable`, unless tolerated), TaintToleration (NoSchedule / NoExecute taints),
  NodeAffinity (`nodeSelector`, required node affinity terms: `matchExpressions` with In, NotIn, Exists,
  DoesNotExist, Gt, Lt and `matchFields` on `metadata.name`), NodeResourcesFit (every requested resource,
  containers summed, init containers' maximum, pod overhead, and the pod count against `allocatable`).
- What depends on other pods or other objects is not re-implemented: a pod with inter-pod (anti-)affinity,
  topology spread constraints, host ports, PersistentVolumeClaims or ephemeral volumes, resource claims (DRA)
  or scheduling gates is never bound directly (`PodNeeds.direct_bind_blocker`); kube-scheduler binds it.

Quantities are parsed by the official client's `kubernetes.utils.parse_quantity`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable, Mapping

from kubernetes.utils import parse_quantity

from scheduler.cache.room_ledger import slot_key

POD_COUNT = "pods"
NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class PodNeeds:
    """What kube-scheduler's node-local filters check of one pod (see the module docstring)."""

    requests: Mapping[str, Decimal] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple = ()
    """Required node-affinity `nodeSelectorTerms` (ORed), raw dicts."""
    tolerations: tuple = ()
    direct_bind_blocker: str = ""
    """Why meshfit must leave this pod to kube-scheduler ("" when it may bind it itself)."""


def _quantity(value: Any) -> Decimal:
    if isinstance(value, (str, int)):
        return _parsed_quantity(value)
    return _parse_quantity(value)


@lru_cache(maxsize=4096)
def _parsed_quantity(value: str | int) -> Decimal:
    """`_parse_quantity` remembered: a cluster has few distinct quantity strings ("16", "64Gi", "8"), and the fit
    checks parse every node's allocatable for every member and node they look at (thousands per placement)."""
    return _parse_quantity(value)


def _parse_quantity(value: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})  # limits stand in for missing requests, as in Kubernetes
    requests.update(resources.get("requests") or {})
    return {name: _quantity(value) for name, value in requests.items()}


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests: containers summed, each init container's maximum, plus the overhead; `pods`: 1."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or ():
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or ():
        for name, value in _container_requests(container).items():
            if container.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
                total[name] = total.get(name, Decimal(0)) + value
            else:
                total[name] = max(total.get(name, Decimal(0)), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + _quantity(value)
    total[POD_COUNT] = Decimal(1)
    return total


def _blocker(spec: Mapping[str, Any]) -> str:
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
        return "it has inter-pod (anti-)affinity"
    if spec.get("topologySpreadConstraints"):
        return "it has topology spread constraints"
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in spec.get("volumes") or ()):
        return "it mounts persistent volume claims"
    if spec.get("resourceClaims"):
        return "it has resource claims"
    if spec.get("schedulingGates"):
        return "it has scheduling gates"
    if spec.get("workloadRef") or spec.get("schedulingGroup"):
        return "it belongs to a Workload pod group: kube-scheduler's gang plugin binds the group together"
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    if any(port.get("hostPort") for c in containers for port in c.get("ports") or ()):
        return "it uses host ports"
    return ""


def pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """Read `PodNeeds` from a v1 Pod dict."""
    spec = pod.get("spec") or {}
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return PodNeeds(pod_requests(spec), dict(spec.get("nodeSelector") or {}),
                    tuple(required.get("nodeSelectorTerms") or ()), tuple(spec.get("tolerations") or ()),
                    _blocker(spec))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """True when one of `tolerations` tolerates `taint` (v1 semantics: Equal/Exists, empty key = any key)."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if not key and operator != "Exists":
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression_matches(expression: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or ()]
    present = key in values_of
    if operator == "In":
        return present and values_of[key] in values
    if operator == "NotIn":
        return not present or values_of[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    expressions, fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches nothing
    return (all(_expression_matches(e, labels) for e in expressions)
            and all(_expression_matches(f, {"metadata.name": name}) for f in fields))


def _resource_reason(needs: PodNeeds, node: Mapping[str, Any], used: Mapping[str, Decimal]) -> str:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, want in needs.requests.items():
        if want <= 0:
            continue
        have = _quantity(allocatable[resource]) if resource in allocatable else Decimal(0)
        if resource not in allocatable and resource != POD_COUNT:
            return f"node has no {resource}"
        free = have - used.get(resource, Decimal(0))
        if want > free:
            return f"insufficient {resource} ({want} requested, {max(free, Decimal(0))} free)"
    return ""


def fit_reason(needs: PodNeeds, node: Mapping[str, Any], used: Mapping[str, Decimal]) -> str:
    """"" when kube-scheduler's node-local filters would accept the pod on `node`, else the first reason why not."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    name, labels = str(meta.get("name") or ""), meta.get("labels") or {}
    if spec.get("unschedulable") and not tolerates(needs.tolerations, {"key": UNSCHEDULABLE_TAINT,
                                                                         "effect": "NoSchedule"}):
        return "node is cordoned"
    for taint in spec.get("taints") or ():
        if taint.get("effect") in NO_SCHEDULE_EFFECTS and not tolerates(needs.tolerations, taint):
            return f"untolerated taint {taint.get('key')}:{taint.get('effect')}"
    if any(labels.get(k) != v for k, v in needs.node_selector.items()):
        return "node does not match the pod's nodeSelector"
    if needs.affinity_terms and not any(_term_matches(t, labels, name) for t in needs.affinity_terms):
        return "node does not match the pod's required node affinity"
    return _resource_reason(needs, node, used)


def own_claims(record: Any) -> tuple[str, ...]:
    """The room-ledger keys `record` itself may hold: its uid, and its gang slot's (a vacancy kept for it)."""
    member = record.member
    return (record.uid,) if member is None else (record.uid, slot_key(member.gang_key, member.index))


class RoomFit:
    """Fit answered in one place: a pod's `needs` against its Node object and the room ledger
    (`scheduler.cache.room_ledger`), in one of its two views.  Call under the state's lock.

    - `fits`: meshfit's view -- bound pods, everything meshfit holds, binds or keeps for missing members, members
      kube-scheduler assumed, and nominations of no lower priority; the `/filter`, `/guard` and `/bind` answers, the
      CPU-aware placement and the check before each Binding all ask it.
    - `collides`: kube-scheduler's view for a pod it places itself (bound pods, members it assumed, nominations it
      honours at that pod's priority) with a member and what meshfit puts beside it; the nomination fence asks it.
    """

    def __init__(self, state: Any) -> None:
        self.state = state

    def fits(self, record: Any, node_name: str, extra: Mapping[str, Decimal] | None = None) -> str:
        """"" when `record` fits `node_name` in meshfit's view (with `extra` taken there too), else why not."""
        node = self.state.nodes.get(node_name)
        if node is None or record.needs is None:
            return f"node {node_name} is not known" if node is None else "its spec was not read"
        used = self.state.room.meshfit_used(node_name, record.priority, own_claims(record))
        for resource, value in (extra or {}).items():
            used[resource] = used.get(resource, 0) + value
        return fit_reason(record.needs, node, used)

    def beside(self, member: Any, node_name: str) -> dict[str, Decimal]:
        """What meshfit puts on `node_name` with `member` that kube-scheduler's cache cannot count yet."""
        return self.state.room.meshfit_only(node_name, own_claims(member))

    def collides(self, other: Any, member: Any, node_name: str, memo: dict | None = None) -> bool:
        """Could pod `other` land on `node_name` now (kube-scheduler's view for its priority, without `member`) and
        leave no room there for `member` and what meshfit puts beside it (`beside`)?  Four 2.5-CPU members and an
        8-CPU pod each fit a 16-CPU node; together they do not.

        `memo`: a dict the caller keeps for one member and node (one fence pass over many pods): what the node holds
        differs between pods only by their priority (unless a pod has a claim there itself), so it is worked out once
        per priority, with the member's headroom per resource for the cheap test."""
        node = self.state.nodes.get(node_name)
        if node is None or other.needs is None or member.needs is None:
            return False
        memo = {} if memo is None else memo
        wanted_room = memo.get(WANTED_ROOM)
        if wanted_room is None:  # worked out once per fence pass, not per pending pod
            beside = self.beside(member, node_name)
            wanted_room = memo[WANTED_ROOM] = _plus(member.needs.requests, beside) if beside else \
                member.needs.requests
        room = self.state.room
        own = room.claim(other.uid)
        if own is not None and node_name in (own.node, own.nominated):
            used = room.kube_used(node_name, other.priority, (member.uid, other.uid))
            return collides(other.needs, node, used, wanted_room)
        known = memo.get(other.priority)
        if known is None:
            used = room.kube_used(node_name, other.priority, (member.uid,))
            headroom = {r: _allocatable(node, r) - used.get(r, 0) - v for r, v in wanted_room.items() if v > 0}
            known = memo[other.priority] = (used, headroom)
        used, headroom = known
        wanted = other.needs.requests
        if not any(wanted.get(r, 0) > left for r, left in headroom.items()):
            return False  # the cheap test of `collides`: nothing the member asks for is short for both
        return collides(other.needs, node, used, wanted_room)


WANTED_ROOM = "wanted room"
"""The fence memo's key for the member's requests plus what is beside it (its other keys are priorities)."""


def _plus(requests: Mapping[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """`requests` with the positive amounts of `more` added, resource by resource."""
    total = dict(requests)
    for resource, value in more.items():
        if value > 0:
            total[resource] = total.get(resource, 0) + value
    return total


def collides(needs: PodNeeds, node: Mapping[str, Any], used: Mapping[str, Decimal],
             member_requests: Mapping[str, Decimal]) -> bool:
    """True when a pod with `needs` passes kube-scheduler's node-local filters on `node` given `used`, but no longer
    does once `member_requests` are taken there too (the two cannot both land on that node)."""
    if any(value > 0 and used.get(r, 0) + value + needs.requests.get(r, 0) > _allocatable(node, r)
           for r, value in member_requests.items()) is False:
        return False  # cheap test first: no resource the member asks for is short for both
    if fit_reason(needs, node, used):
        return False
    with_member = dict(used)
    for resource, value in member_requests.items():
        with_member[resource] = with_member.get(resource, 0) + value
    return bool(fit_reason(needs, node, with_member))


def _allocatable(node: Mapping[str, Any], resource: str) -> Decimal:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return _quantity(allocatable[resource]) if resource in allocatable else Decimal(0)
