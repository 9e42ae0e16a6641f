"""`BindVerb`, the `/bind` verb: a gang member's slot claimed, bound, and the gang's milestone.

kube-scheduler's `/bind` of a member meshfit's own binder (`scheduler.service.binding.gang_binding`) is binding waits
for that Binding's outcome; a member already bound to the node asked for is answered idempotently; a GPU pod outside
any gang is assumed on its node at bind so no concurrent gang placement takes its GPUs.
"""

from __future__ import annotations

import time
from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import SLOT_BOUND, Reservation
from scheduler.gangs.rendezvous import GivenRendezvous, given_from_assignment
from scheduler.gangs.sources import GangMembership
from scheduler.handoff.assignment import PodAssignment
from scheduler.service.binding.binder import Binder, RendezvousMissing, bind_assignment
from scheduler.service.binding.gang_binding import GangBinding
from scheduler.service.lifecycle.gang_lifecycle import GangLifecycle
from scheduler.service.lifecycle.lone_preemption import free_for, release_hold
from scheduler.service.verbs.gang_completion import GangCompletion

GATE_SECONDS = 4.0
"""How long kube-scheduler's `/bind` of a member waits for its unbound gang's other members: under the extender's
`httpTimeout` in the shipped profiles (5 s), so meshfit answers before kube-scheduler gives up on the call (at 8 s,
kube-scheduler 1.26 timed out on 188 `/bind` calls of a 5,000-node burst and cleared those members' nominations)."""
UNKNOWN_NODE_REASON = "node is not in meshfit's cluster state (no GPU resource, or not seen yet)"


class BindVerb:
    """`bind` over one `ClusterState` and `Binder`: claims the member's slot, posts the Binding, reports the outcome to
    the lifecycle and `GangCompletion` (the caller sweeps expired reservations first)."""

    def __init__(self, state: ClusterState, binder: Binder, lifecycle: GangLifecycle, direct: GangBinding | None,
                 completion: GangCompletion, observe: Callable[[float, bool], None],
                 run_direct_binds: Callable[[], None]) -> None:
        self.state, self.binder, self.lifecycle, self.direct = state, binder, lifecycle, direct
        self.completion = completion
        self.observe = observe
        """Called with (seconds, succeeded) after each Binding posted for kube-scheduler's `/bind`."""
        self.run_direct_binds = run_direct_binds
        """Posts the Bindings the direct binder queued (synchronous mode, tests; a no-op otherwise)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind through the binder with the rank annotations; returns an error text ("" on success)."""
        blocked = self._wait_for_gang_gate(namespace, name)
        if blocked:
            return blocked
        annotations, assumed, member, given = {}, False, None, None
        with self.state.lock:
            record = self.state.pod(namespace, name)
            if record is None:
                return (f"pod {namespace}/{name} is unknown to meshfit (never filtered by it); not binding it")
            if uid and record.uid != uid:
                return f"pod {namespace}/{name} has uid {record.uid}, not {uid}; not binding it"
            if record.member is not None:
                member = record.member
                entry = self.state.ledger.get(member.gang_key)
                settled = self._already_bound(record, entry, node)
                if settled is not None:
                    return settled
                if self.direct is not None and record.uid in self.direct.in_flight:
                    in_flight = True
                else:
                    in_flight = False
                    reserved_here = (self.direct is not None and entry is not None
                                     and entry.node_of(member.index) == node)
                    crowded = self.direct.crowded_out(record, node) if reserved_here else ""
                    if crowded:  # checked right before the Binding, against what kube-scheduler cannot see yet
                        self.direct.kube_let_go(record)
                        return f"pod {namespace}/{name} does not fit node {node} now: {crowded}; not binding it"
                    error, assignment = self._claim_slot(record, entry, node)
                    if error:
                        return error
                    annotations = assignment.to_annotations()
                    given = given_from_assignment(assignment, name)
            elif record.gpus > 0 and not record.node:
                error = self._assume_single(record, node)
                if error:
                    return error
                assumed = True
        if member is not None and in_flight:  # meshfit's own Binding of this member is in flight: its outcome
            return self.direct.wait_for(record.uid, 30.0) or ""
        try:
            return self._post_binding(namespace, name, uid, node, record, member, annotations, assumed, given)
        finally:
            if member is not None and self.direct is not None:
                with self.state.lock:
                    self.direct.kube_let_go(record)

    def _post_binding(self, namespace: str, name: str, uid: str, node: str, record: PodRecord,
                      member: GangMembership | None, annotations: dict, assumed: bool,
                      given: GivenRendezvous | None) -> str:
        """Post kube-scheduler's Binding with the member's annotations; "" or the error."""
        started = time.perf_counter()
        try:
            self.binder.bind(namespace, name, uid or record.uid, node, annotations)
        except Exception as exc:  # noqa: BLE001 - any binder failure is reported to kube-scheduler
            self.observe(time.perf_counter() - started, False)
            error = f"binding {namespace}/{name} to {node} failed: {exc}"
            with self.state.lock:
                if member is not None:
                    self.state.ledger.unmark_binding(member.gang_key, member.index)
                    self.lifecycle.bind_failed(record, error)
                if assumed:
                    self.state.unassume(namespace, name)
            return error
        self.observe(time.perf_counter() - started, True)
        with self.state.lock:
            self.state.record_binding(namespace, name, node, given)
            if member is not None:  # the lifecycle sees the gang binding or bound now, not at its next pass
                self.lifecycle.observe(member.gang_key)
        if member is not None:
            self.completion.publish_if_bound(member.gang_key)
        return ""

    def _wait_for_gang_gate(self, namespace: str, name: str) -> str:
        """kube-scheduler binds a member while none of its gang is bound: wait (up to `GATE_SECONDS`) until its peers
        that meshfit binds are ready too, so the gang's first Binding is never a lone one; "" to go on, else why not."""
        if self.direct is None:
            return ""
        deadline = time.monotonic() + GATE_SECONDS
        while True:
            with self.state.lock:
                record = self.state.pod(namespace, name)
                if record is None or record.member is None or self.direct.gate_open(record):
                    return ""
            if time.monotonic() >= deadline:
                with self.state.lock:  # kube-scheduler gives the member up: meshfit binds it with its peers itself
                    record = self.state.pod(namespace, name)
                    if record is not None and record.member is not None:
                        self.direct.kube_let_go(record)
                        self.direct.kick(record.member.gang_key)
                self.run_direct_binds()
                return (f"pod {namespace}/{name}: its gang's other members are not ready to bind yet (being "
                        f"nominated or moved off nodes whose room was taken); not binding one member alone, "
                        f"meshfit binds it with them")
            time.sleep(0.05)

    def _already_bound(self, record: PodRecord, entry: Reservation | None, node: str) -> str | None:
        """"" when this member is already bound to `node` (idempotent `/bind`), an error when bound elsewhere,
        None when it is not bound yet."""
        slot = entry.slots.get(record.member.index) if entry is not None else None
        bound_to = record.node or (slot.node if slot is not None and slot.state == SLOT_BOUND
                                   and slot.pod == record.name else None)
        if bound_to is None:
            return None
        return "" if bound_to == node else f"pod {record.key} is already bound to node {bound_to}, not {node}"

    def _claim_slot(self, record: PodRecord, entry: Reservation | None, node: str
                    ) -> tuple[str, PodAssignment | None]:
        """Mark the member's slot binding for kube-scheduler's `/bind`: ("", its `PodAssignment`), or (why it cannot
        be bound to `node`, None)."""
        member, name = record.member, record.name
        held = entry.node_of(member.index) if entry is not None else None
        if held is None:
            return (f"pod {record.key} of gang {member.gang_key} has no reservation "
                    f"(expired or released); it will be filtered again"), None
        if held != node:
            return f"pod {record.key} of gang {member.gang_key} is reserved on {held}, not {node}", None
        if not entry.node_of(0):
            return str(RendezvousMissing(f"gang {member.gang_key}: no node is held for pod 0; not binding pod "
                                         f"{record.key} until pod 0 is placed")), None
        assignment = bind_assignment(entry, member.index)
        if not self.state.ledger.mark_binding(member.gang_key, member.index, name,
                                              given_from_assignment(assignment, name)):
            return (f"pod {record.key} of gang {member.gang_key}: its slot is "
                    f"{entry.slots[member.index].state} (by {entry.slots[member.index].pod}), not reserved"), None
        self.lifecycle.arrived(record)
        return "", assignment

    def _assume_single(self, record: PodRecord, node_name: str) -> str:
        node = self.state.topology.node_by_name.get(node_name)
        if node is None:
            return f"node {node_name}: {UNKNOWN_NODE_REASON}"
        free = free_for(self.state.topology, record, node_name)  # room meshfit preempted for it counts as its own
        if free < record.gpus:
            return (f"node {node_name} no longer has {record.gpus} free GPUs "
                    f"({free} free once gang reservations are held)")
        crowded = self.direct.lone_crowded_out(record, node_name) if self.direct is not None else ""
        if crowded:  # a member held or bound there since its /filter answer, which kube-scheduler cannot count yet
            return f"pod {record.key} does not fit node {node_name} now: {crowded}; not binding it"
        release_hold(self.state.topology, record)
        self.state.record_binding(record.namespace, record.name, node_name)
        return ""
