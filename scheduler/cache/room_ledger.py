"""`RoomLedger`: the one count of the room pods and gang slots take on each node, on every resource.

Every pod or gang slot that takes room on a node is one `Claim`, keyed by pod uid (or by gang slot, `slot_key`, for a
member no pod stands for yet).  A pod has at most one claim; its state says who counts it and why:

| state | what it is | meshfit's view | kube-scheduler's view (pod of priority p) |
|---|---|---|---|
| `reserved` | a partly bound gang's slot no pod stands for (a deleted member's room, a member not created yet) | counted | -- |
| `nominated` | an unbound pod whose `status.nominatedNodeName` names the node, not held by meshfit | priority >= p | priority >= p |
| `held` | a member meshfit holds on its reserved node (about to be bound, or nominated first) | counted | its nomination, priority >= p |
| `assumed` | a member kube-scheduler was told at `/filter` (its cache assumes it; its `/bind` follows) | counted | counted |
| `binding` | meshfit's Binding call for the member is in flight | counted | its nomination, priority >= p |
| `bound-unseen` | bound by meshfit's Binding; kube-scheduler's informer may not show it yet | counted | counted |
| `bound` | bound and unfinished, as the watch shows it | counted | counted |

A nomination counts only where the pod could land: a gang member nominated on a node its slot is not on takes no room
there (`slot_node`).  Changing a claim (`_put`) is the only way a count moves, so the per-node totals cannot drift
from the claims; `recount` works them out again from the claims alone (the property test compares the two).

The placement engine's GPUs of bound pods are the same claims: `gpus` projects every `bound` / `bound-unseen` claim's
GPUs into the topology the engine places on (`scheduler.cache.gpu_projection`).  A pod whose node-local needs are not
read (embedded mode) is claimed only while bound, with no requests: it takes no room in a fit check, only its GPUs in
the engine's view.

Fit is one function of this ledger and a view (`scheduler.kube.node_fit.RoomFit`): `meshfit_used` -- everything
meshfit knows takes room -- and `kube_used` -- the node as kube-scheduler sees it for a pod of priority p: bound pods,
the members it assumed, the nominations it honours.  Call everything under the cluster state's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Container, Iterable, Mapping

from scheduler.cache.gpu_projection import GpuProjection
from topology.k8s import FINISHED_PHASES


class ClaimState(str, Enum):
    """Why a claim takes room (see the module docstring's table)."""

    RESERVED = "reserved"
    NOMINATED = "nominated"
    HELD = "held"
    ASSUMED = "assumed"
    BINDING = "binding"
    BOUND_UNSEEN = "bound-unseen"
    BOUND = "bound"


COUNTED_BY_ALL = frozenset({ClaimState.ASSUMED, ClaimState.BOUND_UNSEEN, ClaimState.BOUND})
"""States both views count whatever the priority."""
COUNTED_BY_MESHFIT = frozenset({ClaimState.RESERVED, ClaimState.HELD, ClaimState.BINDING})
"""States only meshfit's view counts (kube-scheduler's cache cannot see them), whatever the priority."""
UNSEEN = frozenset({ClaimState.RESERVED, ClaimState.HELD, ClaimState.ASSUMED, ClaimState.BINDING,
                    ClaimState.BOUND_UNSEEN})
"""States of room kube-scheduler's cache may not count yet: a node with one is checked by `/guard`."""
MESHFIT_HOLDS = frozenset({ClaimState.HELD, ClaimState.ASSUMED, ClaimState.BINDING})
"""States the direct binder sets (the pod's own facts from the watch never override them, except bound)."""
BOUND_STATES = frozenset({ClaimState.BOUND_UNSEEN, ClaimState.BOUND})


def slot_key(gang_key: str, index: int) -> str:
    """The claim key of gang `gang_key`'s slot `index` while no pod stands for it."""
    return f"slot:{gang_key}#{index}"


@dataclass(frozen=True)
class Claim:
    """Room taken on `node` by one pod (key: its uid) or one gang slot (key: `slot_key`)."""

    key: str
    node: str
    requests: Mapping[str, Any]
    state: ClaimState
    priority: int = 0
    nominated: str = ""
    """The node the pod's `status.nominatedNodeName` names ("" none): kube-scheduler counts it there."""
    gang_key: str = ""
    index: int = -1
    record: Any = field(default=None, compare=False, repr=False)
    """The pod's record (None for a slot claim)."""
    since: float = 0.0
    """When it entered its state (a `bound-unseen` claim turns `bound` `unseen_seconds` later)."""


def _add(totals: dict[str, Any], requests: Mapping[str, Any], sign: int) -> None:
    for resource, value in requests.items():
        left = totals.get(resource, 0) + sign * value
        if left:
            totals[resource] = left
        else:
            totals.pop(resource, None)


class RoomLedger:
    """The claims on every node, with per-node totals kept in step; see the module docstring."""

    def __init__(self, slot_node: Callable[[str, int], str | None], clock: Callable[[], float],
                 unseen_seconds: float = 10.0) -> None:
        self.slot_node, self.clock, self.unseen_seconds = slot_node, clock, unseen_seconds
        self._claims: dict[str, Claim] = {}
        self._by_node: dict[str, dict[str, Claim]] = {}
        self._all: dict[str, dict[str, Any]] = {}
        """Node -> summed requests of its claims counted by both views (`COUNTED_BY_ALL`)."""
        self._meshfit: dict[str, dict[str, Any]] = {}
        """Node -> summed requests of its claims only meshfit counts (`COUNTED_BY_MESHFIT`)."""
        self._nominations: dict[str, dict[str, Claim]] = {}
        """Node -> key -> unbound claims whose pod is nominated there (kube-scheduler honours them by priority)."""
        self._unseen: dict[str, int] = {}
        """Node -> how many of its claims kube-scheduler's cache may not count yet (`UNSEEN`)."""
        self._by_state: dict[ClaimState, dict[str, Claim]] = {state: {} for state in ClaimState}
        self.gpus = GpuProjection(lambda claim: claim.state in BOUND_STATES)
        """The engine's view of bound pods' GPUs: projected from the bound claims into the topology (`attach_engine`)."""

    # ----- the one place a count moves ---------------------------------------------------------------------------
    def _put(self, key: str, claim: Claim | None) -> None:
        old = self._claims.pop(key, None)
        if old is not None:
            self._count(old, -1)
        if claim is not None:
            self._claims[key] = claim
            self._count(claim, +1)
        self.gpus.move(old, claim)

    def attach_engine(self, topology: Any) -> None:
        """Project the bound claims' GPUs into `topology` (a freshly built one) and keep it in step from now on."""
        self.gpus.attach(topology, self._claims.values())

    def _count(self, claim: Claim, sign: int) -> None:
        node = claim.node
        in_state = self._by_state[claim.state]
        if sign > 0:
            in_state[claim.key] = claim
        else:
            in_state.pop(claim.key, None)
        on_node = self._by_node.setdefault(node, {})
        if sign > 0:
            on_node[claim.key] = claim
        else:
            on_node.pop(claim.key, None)
            if not on_node:
                del self._by_node[node]
        totals = self._all if claim.state in COUNTED_BY_ALL else self._meshfit \
            if claim.state in COUNTED_BY_MESHFIT else None
        if totals is not None:
            _add(totals.setdefault(node, {}), claim.requests, sign)
            if not totals[node]:
                del totals[node]
        if claim.state in UNSEEN:
            left = self._unseen.get(node, 0) + sign
            if left:
                self._unseen[node] = left
            else:
                del self._unseen[node]
        if claim.nominated and claim.state not in BOUND_STATES and claim.state is not ClaimState.ASSUMED:
            listed = self._nominations.setdefault(claim.nominated, {})
            if sign > 0:
                listed[claim.key] = claim
            else:
                listed.pop(claim.key, None)
                if not listed:
                    del self._nominations[claim.nominated]

    # ----- what the watch says of a pod (ClusterState) -------------------------------------------------------------
    def observe_pod(self, record: Any, present: bool = True) -> None:
        """The pod's own facts changed (`present` False: it is gone): its claim follows them -- bound where the watch
        (or a returned Binding) put it, else meshfit's hold if any, else its nomination, else none."""
        old = self._claims.get(record.uid)
        if not present or (record.needs is None and not record.node):
            if old is not None:
                self._put(record.uid, None)
            return
        if record.needs is None:  # needs not read (embedded mode): bound, it holds its GPUs in the engine's view only
            self._put(record.uid, self._claim_of(record, record.node, ClaimState.BOUND, "", self.clock()))
            return
        nominated = _nominated(record)
        if record.node:
            unseen = old is not None and old.state in (ClaimState.BINDING, ClaimState.BOUND_UNSEEN) \
                and old.node == record.node
            state = ClaimState.BOUND_UNSEEN if unseen else ClaimState.BOUND
            since = old.since if old is not None and old.state is ClaimState.BOUND_UNSEEN else self.clock()
            self._put(record.uid, self._claim_of(record, record.node, state, "", since))
        elif old is not None and old.state in MESHFIT_HOLDS:
            self._put(record.uid, replace(old, requests=record.needs.requests, priority=record.priority,
                                          nominated=nominated, record=record))
        elif nominated:
            self._put(record.uid, self._claim_of(record, nominated, ClaimState.NOMINATED, nominated, self.clock()))
        elif old is not None:
            self._put(record.uid, None)

    def bound_by_meshfit(self, record: Any, node: str) -> None:
        """meshfit's Binding of `record` on `node` returned: bound, and kube-scheduler's informer may not show it yet."""
        state = ClaimState.BOUND_UNSEEN if record.needs is not None else ClaimState.BOUND
        self._put(record.uid, self._claim_of(record, node, state, "", self.clock()))

    # ----- what the direct binder does ---------------------------------------------------------------------------
    def hold(self, record: Any, node: str, state: ClaimState = ClaimState.HELD) -> bool:
        """Count member `record` on `node` in `state` (held, assumed or binding); its slot's claim, if any, gives way.
        False (nothing changes) for a pod whose needs are unknown or that is bound."""
        if record.needs is None or state not in MESHFIT_HOLDS:
            return False
        old = self._claims.get(record.uid)
        if old is not None and old.state in BOUND_STATES:
            return False
        if record.member is not None:
            self.release_slot(record.member.gang_key, record.member.index)
        self._put(record.uid, self._claim_of(record, node, state, _nominated(record), self.clock()))
        return True

    def let_go(self, uid: str, record: Any | None, states: Container[ClaimState] = MESHFIT_HOLDS) -> None:
        """meshfit no longer holds pod `uid` in any of `states` (held, assumed or binding): its claim follows the pod's
        own facts again (`record`: the pod as the state has it now; None: it is gone)."""
        old = self._claims.get(uid)
        if old is None or old.state not in states:
            return
        self._put(uid, None)
        if record is not None:
            self.observe_pod(record)

    def reserve_slot(self, gang_key: str, index: int, node: str, requests: Mapping[str, Any]) -> None:
        """Count a partly bound gang's slot that no pod stands for on `node` (a vacancy)."""
        key = slot_key(gang_key, index)
        self._put(key, Claim(key, node, dict(requests), ClaimState.RESERVED, gang_key=gang_key, index=index,
                             since=self.clock()))

    def release_slot(self, gang_key: str, index: int) -> None:
        """Stop counting the slot's vacancy (a pod stands for it now, or the slot went)."""
        key = slot_key(gang_key, index)
        if key in self._claims:
            self._put(key, None)

    def age_unseen(self) -> None:
        """`bound-unseen` claims older than `unseen_seconds` are plainly `bound`: kube-scheduler's informer has them."""
        since = self.clock() - self.unseen_seconds
        for claim in [c for c in self._by_state[ClaimState.BOUND_UNSEEN].values() if c.since <= since]:
            self._put(claim.key, replace(claim, state=ClaimState.BOUND))

    def keep_pods(self, uids: Container[str]) -> None:
        """Drop the claims of pods not in `uids` (a relist: the pods it found are observed afresh; slots stay)."""
        for claim in [c for c in self._claims.values() if c.record is not None and c.key not in uids]:
            self._put(claim.key, None)

    # ----- reading -----------------------------------------------------------------------------------------------
    def claim(self, key: str) -> Claim | None:
        """The claim of pod uid (or slot key) `key`, or None."""
        return self._claims.get(key)

    def state_of(self, uid: str) -> ClaimState | None:
        """The state of pod `uid`'s claim, or None."""
        claim = self._claims.get(uid)
        return claim.state if claim is not None else None

    def claims(self) -> Iterable[Claim]:
        """Every claim."""
        return self._claims.values()

    def on_node(self, node: str) -> Mapping[str, Claim]:
        """Key -> claim of the claims on `node`."""
        return self._by_node.get(node, {})

    def count(self, *states: ClaimState) -> int:
        """How many claims are in any of `states`."""
        return sum(len(self._by_state[state]) for state in states)

    def in_state(self, *states: ClaimState) -> list[Claim]:
        """The claims in any of `states`."""
        return [claim for state in states for claim in self._by_state[state].values()]

    def unseen_on(self, node: str) -> bool:
        """True when `node` has room kube-scheduler's cache may not count yet (`/guard` checks pods against it)."""
        return node in self._unseen

    def any_unseen(self) -> bool:
        """True when some node has room kube-scheduler's cache may not count yet."""
        return bool(self._unseen)

    def meshfit_used(self, node: str, priority: int, own: Iterable[str] = ()) -> dict[str, Any]:
        """What meshfit counts as taken on `node` when placing a pod of `priority` whose own claims are `own` (its uid
        and slot key: never counted against itself): every claim there but nominations of a lower priority."""
        used = dict(self._all.get(node, {}))
        for resource, value in self._meshfit.get(node, {}).items():
            used[resource] = used.get(resource, 0) + value
        own = tuple(own)
        for key in own:
            claim = self._claims.get(key)
            if claim is not None and claim.node == node and claim.state is not ClaimState.NOMINATED:
                _add(used, claim.requests, -1)
        for claim in self._nominations.get(node, {}).values():
            if claim.state is ClaimState.NOMINATED and claim.key not in own and claim.priority >= priority \
                    and self._may_land(claim, node):
                _add(used, claim.requests, +1)
        return used

    def kube_used(self, node: str, priority: int, skip: Iterable[str] = ()) -> dict[str, Any]:
        """The node as kube-scheduler sees it for a pod of `priority`: bound pods, the members it assumed and the
        nominations it honours (no lower priority) -- never meshfit's holds or Bindings in flight -- without the
        claims `skip`."""
        used = dict(self._all.get(node, {}))
        skip = tuple(skip)
        for key in skip:
            claim = self._claims.get(key)
            if claim is not None and claim.node == node and claim.state in COUNTED_BY_ALL:
                _add(used, claim.requests, -1)
        for claim in self._nominations.get(node, {}).values():
            if claim.key not in skip and claim.priority >= priority and self._may_land(claim, node):
                _add(used, claim.requests, +1)
        return used

    def meshfit_only(self, node: str, own: Iterable[str] = ()) -> dict[str, Any]:
        """What meshfit puts on `node` that kube-scheduler's cache cannot count (held members, Bindings in flight,
        vacancies), without the claims `own`."""
        used = dict(self._meshfit.get(node, {}))
        for key in own:
            claim = self._claims.get(key)
            if claim is not None and claim.node == node and claim.state in COUNTED_BY_MESHFIT:
                _add(used, claim.requests, -1)
        return used

    def _may_land(self, claim: Claim, node: str) -> bool:
        """A nominated gang member takes room only on the node its slot is on (see the module docstring)."""
        return not claim.gang_key or self.slot_node(claim.gang_key, claim.index) == node

    # ----- checks ------------------------------------------------------------------------------------------------
    def recount(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The per-node totals worked out afresh from the claims: {"all": ..., "meshfit": ...} (for checks)."""
        fresh: dict[str, dict[str, dict[str, Any]]] = {"all": {}, "meshfit": {}}
        for claim in self._claims.values():
            kind = "all" if claim.state in COUNTED_BY_ALL else "meshfit" if claim.state in COUNTED_BY_MESHFIT else ""
            if kind:
                _add(fresh[kind].setdefault(claim.node, {}), claim.requests, +1)
        return {kind: {n: t for n, t in totals.items() if t} for kind, totals in fresh.items()}

    def totals(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The per-node totals as kept (compare with `recount`)."""
        return {"all": {n: dict(t) for n, t in self._all.items()},
                "meshfit": {n: dict(t) for n, t in self._meshfit.items()}}

    @staticmethod
    def _claim_of(record: Any, node: str, state: ClaimState, nominated: str, since: float) -> Claim:
        member = record.member
        requests = record.needs.requests if record.needs is not None else {}
        return Claim(record.uid, node, requests, state, record.priority, nominated,
                     member.gang_key if member is not None else "", member.index if member is not None else -1,
                     record, since)


def _nominated(record: Any) -> str:
    """The node kube-scheduler counts `record`'s nomination on ("" none): unbound, unfinished, not terminating."""
    if record.nominated and not record.node and record.phase not in FINISHED_PHASES and not record.terminating:
        return record.nominated
    return ""
