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
from typing import Any, Callable, Container, Iterable, Mapping

from kubernetes.utils import parse_quantity

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


def state_fit_check(state: Any) -> Callable[..., str]:
    """The direct binder's check over a `ClusterState`: the record's `needs` on the Node object the watch reported,
    against what bound pods (`state.requested`), Bindings in flight there (`in_flight`) and unbound pods of no
    lower priority nominated there (`state.nominated_to`: meshfit's own reserved members and preemptors waiting
    for their victims, as kube-scheduler's filters count them) already take.  Nominated pods whose uid is in
    `busy` (their Binding is in flight, so already in `in_flight`) are not counted twice.  Call it under the
    state's lock."""

    def fits(record: Any, node_name: str, in_flight: Mapping[str, Decimal], busy: Container[str] = ()) -> str:
        node = state.nodes.get(node_name)
        if node is None or record.needs is None:
            return f"node {node_name} is not known" if node is None else "its spec was not read"
        return fit_reason(record.needs, node, node_usage(state, node_name, in_flight, record, busy))

    return fits


def node_usage(state: Any, node_name: str, in_flight: Mapping[str, Decimal], record: Any,
               busy: Container[str] = (), skip: str = "") -> dict[str, Decimal]:
    """What kube-scheduler's filters count as taken on `node_name` when placing `record`: bound pods, `in_flight`,
    and nominated pods of no lower priority other than `record`, those in `busy` and the pod `skip`."""
    used = dict(state.requested.get(node_name, {}))
    for resource, value in in_flight.items():
        used[resource] = used.get(resource, 0) + value
    for other in state.nominated_to.get(node_name, {}).values():
        if other.uid not in (record.uid, skip) and other.uid not in busy and other.priority >= record.priority \
                and not _reserved_elsewhere(state, other, node_name):
            for resource, value in other.needs.requests.items():
                used[resource] = used.get(resource, 0) + value
    return used


def _reserved_elsewhere(state: Any, pod: Any, node_name: str) -> bool:
    """True for a gang member nominated on `node_name` whose reservation is not there (moved or released before its
    nomination was cleared): it can only be placed where meshfit's ledger holds it, so it takes no room here.  At
    5,000 nodes such left-over nominations made 1,003 members "no longer fit" rooms their own gang held."""
    member = pod.member
    if member is None:
        return False
    entry = state.ledger.get(member.gang_key)
    slot = entry.slots.get(member.index) if entry is not None else None
    return slot is None or slot.node != node_name


WANTED_ROOM = "wanted room"
"""The fence memo's key for the member's requests plus what is beside it (its other keys are priorities)."""


def state_collision_check(state: Any) -> Callable[..., bool]:
    """The nomination fence's test over a `ClusterState`: could pod `other` land on `node_name` now (kube-scheduler's
    view: bound pods, `in_flight`, nominated pods other than `member`) and leave no room there for `member`?

    `memo`: a dict the caller keeps for one member, node, `in_flight` and `busy` (one fence pass over many pods):
    what the node holds then differs between pods only by their priority (unless a pod is nominated there itself),
    so it is worked out once per priority, with the member's headroom per resource for the cheap test.

    `beside`: what else meshfit will put on the node with the member that kube-scheduler cannot count yet (its other
    held members, Bindings in flight, rooms kept for missing members): `other` collides when it fits in
    kube-scheduler's view but not beside the member and all of that together (four 2.5-CPU members and an 8-CPU pod
    each fit a 16-CPU node; together they do not)."""

    def racing(other: Any, member: Any, node_name: str, in_flight: Mapping[str, Decimal],
               busy: Container[str] = (), memo: dict | None = None, beside: Mapping[str, Decimal] | None = None) -> bool:
        node = state.nodes.get(node_name)
        if node is None or other.needs is None or member.needs is None:
            return False
        wanted_room = memo.get(WANTED_ROOM) if memo is not None else None
        if wanted_room is None:  # worked out once per fence pass, not per pending pod
            wanted_room = _plus(member.needs.requests, beside) if beside else member.needs.requests
            if memo is not None:
                memo[WANTED_ROOM] = wanted_room
        if memo is None or other.uid in state.nominated_to.get(node_name, {}):
            used = node_usage(state, node_name, in_flight, other, busy, skip=member.uid)
            return collides(other.needs, node, used, wanted_room)
        known = memo.get(other.priority)
        if known is None:
            used = node_usage(state, node_name, in_flight, other, busy, skip=member.uid)
            headroom = {r: _allocatable(node, r) - used.get(r, 0) - v for r, v in wanted_room.items() if v > 0}
            known = memo[other.priority] = (used, headroom)
        used, headroom = known
        wanted = other.needs.requests
        if not any(wanted.get(r, 0) > room for r, room in headroom.items()):
            return False  # the cheap test of `collides`: nothing the member asks for is short for both
        return collides(other.needs, node, used, wanted_room)

    return racing


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
