"""`FilterVerb`, the `/filter` verb: which of the nodes kube-scheduler offers a pod may use.

Gang members: the first member to arrive places its whole gang, on the nodes kube-scheduler offered
it, and reserves it -- unless meshfit's queue says it must wait (`scheduler.service.lifecycle.gang_lifecycle`).
Every member is then steered to its reserved node; a member whose reserved node kube-scheduler does
not offer it is requeued with that node nominated (sampling) or, when it was already nominated and
still not offered (the node fails kube-scheduler's own filters for it), moved to an offered node
near its peers (`move_to_offered`; `re_place_member` does the same for meshfit's direct binder).

Pods that are not in a gang: without GPUs they pass through untouched; a GPU pod gets every
offered node that still has room once gang reservations are subtracted (room meshfit preempted for
the pod counts as its own, `scheduler.service.lifecycle.lone_preemption`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import (
    SLOT_BINDING, SLOT_BOUND, SLOT_RELEASED, SLOT_RESERVED, Reservation, reservation_key,
)
from scheduler.gangs.membership import describe_signature
from scheduler.gangs.reserve_ops import reserve_remaining
from scheduler.placement.jobs import JobSpecError
from scheduler.placement.offered import offered_only
from scheduler.placement.result import Placement
from scheduler.service.binding.gang_binding import GangBinding
from scheduler.service.binding.ranktables import RankTableTracker
from scheduler.service.lifecycle.elastic import ElasticGangs
from scheduler.service.lifecycle.gang_lifecycle import GangLifecycle
from scheduler.service.lifecycle.lone_preemption import held_for
from scheduler.service.verbs.bind_verb import UNKNOWN_NODE_REASON
from topology.model import TopologyError


@dataclass
class FilterDecision:
    """Nodes that pass, nodes that fail with a reason, or an error for the whole call."""

    nodes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    error: str = ""


def node_label(nodes: dict[str, dict], name: str, key: str) -> str | None:
    """Label `key` of the node `name` (None when the node or the label is unknown)."""
    labels = ((nodes.get(name) or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(key)
    return None if value is None else str(value)


def sampled_out_reason(gang_key: str, index: int, node: str, offered: int) -> str:
    """Reason given when a gang member's reserved node is missing from the offered list."""
    return (f"pod {index} of gang {gang_key} is reserved on node {node}, which is not among the "
            f"{offered} node(s) offered; kube-scheduler samples nodes on large clusters: set "
            f"percentageOfNodesToScore: 100 in the profile (or nominate the node), or the node "
            f"failed another filter")


class FilterVerb:
    """`filter` over one `ClusterState`: reserves a member's gang (through the lifecycle's queue), steers each member
    to its reserved node or moves it to an offered one, and answers lone GPU pods (see the module docstring)."""

    def __init__(self, state: ClusterState, policy: str, lifecycle: GangLifecycle, rank_tables: RankTableTracker,
                 elastic: ElasticGangs, direct: GangBinding | None,
                 on_placed: Callable[[Placement], None] | None, run_direct_binds: Callable[[], None]) -> None:
        self.state, self.policy, self.lifecycle, self.rank_tables = state, policy, lifecycle, rank_tables
        self.elastic, self.direct, self.on_placed = elastic, direct, on_placed
        self.run_direct_binds = run_direct_binds
        """Posts the Bindings the direct binder queued (synchronous mode, tests; a no-op otherwise)."""

    def filter(self, pod: dict, node_names: list[str], offered_is_complete: bool = True) -> FilterDecision:
        """Which offered nodes the pod may use; a gang member gets only its reserved node.

        `offered_is_complete`: `node_names` is every node kube-scheduler's own filters passed (its
        extender protocol); False for Volcano's predicate, asked one node at a time.  The caller sweeps expired
        reservations first."""
        record = self.state.observe_pending_pod(pod)
        if record.member_error:
            self.lifecycle.invalid(record)
            return FilterDecision(error=record.member_error)
        if record.member is None:
            if record.gpus == 0:
                return FilterDecision(nodes=list(node_names))
            return self._filter_single(record, node_names)
        return self._filter_gang(record, node_names, offered_is_complete)

    def _filter_single(self, record: PodRecord, node_names: list[str]) -> FilterDecision:
        decision = FilterDecision()
        with self.state.lock:
            by_name = self.state.topology.node_by_name
            held_node, held_gpus = held_for(self.state.topology, record) or ("", 0)  # room meshfit preempted for it
            for name in node_names:
                node = by_name.get(name)
                if node is None:
                    decision.failed[name] = UNKNOWN_NODE_REASON
                elif node.gpus_free + (held_gpus if name == held_node else 0) >= record.gpus:
                    decision.nodes.append(name)
                else:
                    decision.failed[name] = (f"pod {record.key} needs {record.gpus} GPUs; node has "
                                             f"{node.gpus_free} free once gang reservations are held")
            if self.direct is not None:
                self.direct.answer_lone(record, decision.nodes, decision.failed)
        return decision

    def _check_consistent(self, record: PodRecord, entry: Reservation | None) -> str:
        mine = record.signature()
        if entry is not None and entry.signature is not None and entry.signature != mine:
            return (f"gang {record.member.gang_key}: pod {record.key} declares {describe_signature(mine)} "
                    f"but the gang was reserved as {describe_signature(entry.signature)}")
        for other in self.state.gang_members(record.member.gang_key):
            if other.node or other.given is not None:  # bound: its bind annotations state the resolved order
                continue
            theirs = other.signature()
            if other.uid != record.uid and theirs != mine:
                return (f"gang {record.member.gang_key}: pods disagree: {record.key} declares "
                        f"{describe_signature(mine)}, {other.key} declares {describe_signature(theirs)}")
        return ""

    def _reserve_for(self, record: PodRecord, offered: frozenset[str] | None) -> tuple[Reservation | None, str]:
        """The gang's reservation holding this pod's slot (placing the gang if the queue lets it), or a reason."""
        member = record.member
        ledger, topo = self.state.ledger, self.state.topology
        if self.lifecycle.is_rolling_back(member.gang_key):
            return None, (f"gang {member.gang_key} is being rolled back; it is placed afresh once its evicted "
                          f"members are gone")
        entry = ledger.get(member.gang_key)
        if entry is None:
            entry, reason = self.lifecycle.try_reserve(record, offered)
            if entry is None:
                return None, reason
            entry.signature = record.signature()
            self.rank_tables.forget(member.gang_key)
            if self.on_placed is not None and entry.placement is not None:
                self.on_placed(entry.placement)
        elif entry.node_of(member.index) is None and not self.elastic.beyond_size(member, entry):
            with offered_only(topo, offered):
                placement, reason = reserve_remaining(ledger, entry, topo, self.policy)
            if placement is None:
                return None, reason
            self.rank_tables.mark_due(member.gang_key)
        if self.elastic.beyond_size(member, entry):  # an elastic gang's pod past its current size waits
            return None, self.elastic.beyond_size(member, entry)
        slot = entry.slots[member.index]
        if slot.state in (SLOT_BOUND, SLOT_BINDING) and slot.pod not in (None, record.name):
            return None, f"slot {member.index} of gang {member.gang_key} is already bound to pod {slot.pod}"
        ledger.note_pod(member.gang_key, member.index, record.name)
        return entry, ""

    def move_to_offered(self, record: PodRecord, entry: Reservation, offered: frozenset[str], why: str = "") -> str:
        """Move a reserved (unbound) slot to an offered node near its peers; "" when moved, else why not."""
        index, key, topo = record.member.index, record.member.gang_key, self.state.topology
        slot = entry.slots[index]
        old = slot.node
        given = entry.bound_given()
        if index == 0 and given is not None and given.master_addr == old and old not in offered:
            return (f"pod 0 must run on node {old}, the master-addr its bound peers were given, which kube-scheduler's "
                    f"filters reject now (room taken); held there until it frees or the gang is rolled back whole")
        topo.remove_pod(reservation_key(key, index))
        slot.state = SLOT_RELEASED
        with offered_only(topo, offered):
            placement, reason = reserve_remaining(self.state.ledger, entry, topo, self.policy)
        if placement is None:
            topo.add_pod(reservation_key(key, index), old, slot.gpus)
            slot.state = SLOT_RESERVED
            return reason or "no offered node has room next to the gang"
        self.rank_tables.mark_due(key)
        self.lifecycle.log_moved(entry, record, old, why)
        return ""

    def _filter_gang(self, record: PodRecord, node_names: list[str], complete: bool) -> FilterDecision:
        offered: frozenset[str] | None = None
        if record.node:  # already bound (by meshfit's own Binding): kube-scheduler's queue is behind the watch
            if record.node in node_names:
                return FilterDecision(nodes=[record.node])
            return FilterDecision(failed={n: f"pod {record.key} is already bound to node {record.node}"
                                          for n in node_names})
        with self.state.lock:
            self.lifecycle.arrived(record)
            entry = self.state.ledger.get(record.member.gang_key)
            error = self._check_consistent(record, entry)
            if error:
                return FilterDecision(error=error)
            held_before = entry.node_of(record.member.index) if entry is not None else None
            pinned = bool(record.member.constraint.pod_domains)  # Kueue pinned each member: its offer is its own
            if complete and not self._offer_covers(record, held_before, node_names):
                complete = False  # one candidate placement of kube-scheduler's group cycle, not its filters' verdict
            if complete and not pinned and (held_before is None or held_before not in node_names):
                offered = frozenset(node_names)
            if self.direct is not None:  # kube-scheduler is working on this member: its own /bind follows
                self.direct.note_kube_handling(record)
            try:
                entry, reason = self._reserve_for(record, offered)
            except (JobSpecError, TopologyError, ValueError) as exc:
                return FilterDecision(error=f"gang {record.member.gang_key}: {exc}")
            node = entry.node_of(record.member.index) if entry is not None else None
            if node is not None and node not in node_names:
                node, reason = self._unoffered(record, entry, node, offered, len(node_names), complete)
            elif node is not None and self.direct is not None and (crowded := self.direct.crowded_out(record, node)):
                node, reason = None, f"pod {record.member.index} of gang {record.member.gang_key}: {crowded}"
            if node is None:
                self.lifecycle.turned_away_now(record, reason)
                if self.direct is not None:
                    self.direct.kube_let_go(record)
            else:
                self.state.ledger.touch(record.member.gang_key)
                if self.direct is not None:  # kube-scheduler assumes it there now: its room is counted
                    self.direct.kube_assumes(record, node)
        self.run_direct_binds()
        if node is None:
            wire = self.lifecycle.wire_reason(record, reason)
            return FilterDecision(failed={name: wire for name in node_names})
        return FilterDecision(nodes=[node])

    def _offer_covers(self, record: PodRecord, node: str | None, node_names: list[str]) -> bool:
        """False when kube-scheduler's group cycle offers this member one domain of its `placement_key` (one
        candidate placement) and the reserved `node` is in another one or not chosen yet: then the offer says
        nothing about kube-scheduler's filters, and meshfit's reservation is not narrowed to it."""
        key = record.member.placement_key
        if not key:
            return True
        if node is None:
            return False
        domain = node_label(self.state.nodes, node, key)
        return domain is not None and any(node_label(self.state.nodes, name, key) == domain for name in node_names)

    def _unoffered(self, record: PodRecord, entry: Reservation, node: str, offered: frozenset[str] | None,
                   count: int, complete: bool) -> tuple[str | None, str]:
        """The member's reserved node was not offered: (node to use, "") or (None, why it must retry)."""
        slot = entry.slots[record.member.index]
        if not complete:  # Volcano asks node by node: this is just not the reserved one
            return None, f"pod {record.member.index} of gang {record.member.gang_key} is reserved on node {node}"
        if self.direct is not None and slot.state == SLOT_RESERVED and not self.direct.leaves_to_kube(record):
            self.direct.kick(record.member.gang_key)  # meshfit binds it itself: no nomination, no requeue
            return None, (f"pod {record.member.index} of gang {record.member.gang_key} is reserved on node {node} "
                          f"(not offered); meshfit binds it there itself")
        if slot.state != SLOT_RESERVED or record.nominated != node or not offered:
            # not nominated there yet: most likely sampled out (percentageOfNodesToScore < 100); the requeue
            # nominates the node, which kube-scheduler then tries first and alone
            self.lifecycle.turned_away[record.uid] = self.lifecycle.clock()
            return None, sampled_out_reason(record.member.gang_key, record.member.index, node, count)
        reason = self.move_to_offered(record, entry, offered)
        if reason:
            return None, (f"pod {record.member.index} of gang {record.member.gang_key} is reserved on node {node}, "
                          f"which kube-scheduler's own filters reject for it, and cannot move: {reason}")
        return entry.node_of(record.member.index), ""

    def re_place_member(self, record: PodRecord, reason: str) -> bool:
        """A member no longer fits its reserved node (under the lock): move its slot to a node where it fits, near its
        peers; if none has room and nothing of the gang is bound, release the gang whole (it is placed afresh on
        nodes where its members fit).  True when either was done."""
        entry = self.state.ledger.get(record.member.gang_key)
        if entry is None or self.direct is None:
            return False
        slot = entry.slots.get(record.member.index)
        if slot is None or slot.state != SLOT_RESERVED:
            return False
        allowed = frozenset(self.direct.member_nodes(record) or ())
        if allowed and not self.move_to_offered(record, entry, allowed, why=reason):
            return True
        if entry.has_bound():
            return False  # bound peers: it waits next to them (kube-scheduler's filters and the repairs decide)
        self.lifecycle.release(entry.gang_key, f"gang {entry.gang_key}: pod {record.name} no longer fits node "
                                               f"{slot.node} ({reason}) and no node near its peers has room; released "
                                               f"before any member was bound, placed afresh")
        return True
