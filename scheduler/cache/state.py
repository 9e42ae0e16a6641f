"""`ClusterState`: the one in-memory view the service decides on.

It owns the `ClusterTopology` (rebuilt from node labels by `scheduler.cache.node_topology`), the pods by uid
with the GPUs they hold, the gang objects (PodGroups, JobSets, Jobs, Workloads...) by (API group, kind, namespace,
name) -- a Volcano and a coscheduling PodGroup of the same name are two objects -- and the reservation ledger.
The watch loop feeds it through `replace_all` / `upsert_*` / `delete_*`; the extender, Volcano and gRPC handlers
make their decisions under its single re-entrant `lock`, so place-and-reserve is one critical section.

Its collaborators are built and wired in `ClusterState.__init__` (each module says what its class keeps).

Holdings in the topology: a bound, unfinished GPU pod holds `pod:<ns>/<name>`; a reserved gang
slot holds `resv:<ns>/<gang>/<index>` (see `scheduler.gangs.ledger`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from scheduler.cache.gang_objects import GangObjects
from scheduler.cache.member_index import MemberIndexes
from scheduler.cache.gpu_projection import pod_holding_key
from scheduler.cache.node_topology import NodeTopology, empty_topology
from scheduler.cache.pending_outside import PendingOutside
from scheduler.cache.pod_reader import PodReader
from scheduler.cache.pod_record import PodRecord
from scheduler.cache.request_pods import RequestPods
from scheduler.cache.room_ledger import RoomLedger
from scheduler.gangs.health import NodeFailures
from scheduler.gangs.ledger import DEFAULT_TTL_SECONDS, ReservationLedger
from scheduler.gangs.membership import gang_from_membership
from scheduler.gangs.rendezvous import GivenRendezvous
from topology.config import as_config
from topology.k8s import FINISHED_PHASES
from topology.model import ClusterTopology

__all__ = ["ClusterState", "empty_topology", "pod_holding_key"]


def delegated(collaborator: str, name: str, doc: str, writable: bool = False) -> Any:
    """A `ClusterState` property kept on one of its collaborators: `state.<collaborator>.<name>`."""
    def read(self: Any) -> Any:
        return getattr(getattr(self, collaborator), name)

    def write(self: Any, value: Any) -> None:
        setattr(getattr(self, collaborator), name, value)

    return property(read, write if writable else None, doc=doc)


class ClusterState:
    """Nodes, pods, gang objects and reservations behind one lock; see the module docstring."""

    nodes = delegated("node_topology", "nodes", "Name -> node object.")
    objects = delegated("gang_objects", "objects", "(API group, kind, namespace, name) -> gang object.")
    objects_epoch = delegated("gang_objects", "epoch", "Bumped on every gang object change.")
    needs_of = delegated("reader", "needs_of", "Reads a pod's `needs` (see `PodReader.needs_of`).", writable=True)
    watch_is_truth = delegated("requests", "watch_is_truth", "Kubernetes mode: a request body only selects a pod.",
                               writable=True)
    pod_lookup = delegated("requests", "pod_lookup", "One direct GET of a pod the watch has not shown (or None).",
                           writable=True)
    max_request_only_pods = delegated("requests", "max_request_only_pods",
                                      "Pods known only from request bodies kept at most.", writable=True)
    pending_outside = delegated("outside", "pending_outside", "Uid -> (record, first, latest event) of the unbound "
                                "pods kube-scheduler binds without meshfit (the nomination fence reads it).")
    pod_events = delegated("outside", "pod_events", "Pod changes indexed so far (the nomination fence's clock).")

    def __init__(self, config: Any = None, tolerations: Iterable[Any] = (),
                 ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.config = as_config(config)
        self.tolerations = tuple(tolerations)
        self.lock = threading.RLock()
        self.topology = empty_topology()
        self.ledger = ReservationLedger(self.topology, ttl_seconds, clock)
        self.pods: dict[str, PodRecord] = {}
        self._uid_by_name: dict[tuple[str, str], str] = {}
        self.gang_index: dict[str, dict[str, PodRecord]] = {}
        """Gang key -> uid -> record of every known member (for consistency checks and preemption)."""
        self.invalid_pods: dict[str, PodRecord] = {}
        """uid -> record of every unfinished pod of meshfit's whose gang cannot be read (`GET /gangs`: invalid)."""
        self.generation = 0
        """Bumped on every topology rebuild."""
        self.policy: str | None = None
        """Placement policy for re-holding the missing members of partly bound gangs at a (re)list."""
        self.cache_failing_since: float | None = None
        """Monotonic time since which some watch of the API server keeps failing (None: all healthy)."""
        self.health = NodeFailures(clock, None, self.tolerations, self.config.gpu_resources)
        """Failed nodes (see `scheduler.gangs.health`): unschedulable here, their members replaced by the service."""
        self.rebuilt: list[Callable[[ClusterTopology], None]] = []
        """Called with each rebuilt topology before reservations are re-held (spare holds are re-added there)."""
        self.superseded: set[str] = set()
        """Uids of evicted members whose slot already moved to a replacement node: their updates leave it alone."""
        self.gang_evicted: Callable[[str, set[str]], None] | None = None
        """Called (under the lock) when every bound member of a gang is terminating (see `_whole_gang_terminating`)."""
        self.member_watched: Callable[[PodRecord], None] | None = None
        """Called (under the lock) when the watch reports a gang member, pending (the direct binder's trigger) or
        bound."""
        self.member_gone: Callable[[PodRecord], None] | None = None
        """Called (under the lock) when a gang member's pod is gone, after its slot was held for a replacement, released
        or its gang unreserved: the direct binder keeps an unfinished member's room counted and recounts vacancies."""
        self.relisted: Callable[[], None] | None = None
        """Called (under the lock) after a relist or a topology rebuild re-held the reservations (vacancies recounted)."""
        self.room = RoomLedger(self._slot_node, clock)
        """Every node's room on every resource: one claim per pod or vacant gang slot (`scheduler.cache.room_ledger`).
        Bound and nominated pods are claimed here from the watch; the direct binder holds, binds and keeps vacancies
        through the same ledger."""
        self.room.attach_engine(self.topology)
        self.node_topology = NodeTopology(self.config, self.tolerations, self.health)
        """The nodes, judged; builds the topology from them, the topology objects and the pods."""
        self.gang_objects = GangObjects(self.lock, self._rebuild_topology)
        """PodGroups, JobSets, Jobs, Workloads... by (API group, kind, namespace, name)."""
        self.reader = PodReader(self.config, self.gang_objects, self.pod_by_uid)
        """Reads pod dicts into records."""
        self.indexes = MemberIndexes(self.pod_by_uid, self._named, lambda key: self.gang_index.get(key, {}),
                                     self.ledger, self.upsert_pod)
        """Stable indexes of index-less gang members, and the members waiting for one."""
        self.requests = RequestPods(self.lock, self.reader.read, self.pod, self.pod_by_uid, self.upsert_pod,
                                    self._forget)
        """Pods named in request bodies: what a body may select."""
        self.outside = PendingOutside()
        """The unbound pods kube-scheduler binds without meshfit (the direct binder's nomination fence)."""

    # ----- collaborators' verbs ----------------------------------------------------------------
    def upsert_object(self, obj: dict) -> None:
        """Add or update a gang object (or a Kueue Topology / Volcano HyperNode, which rebuilds)."""
        self.gang_objects.upsert(obj)

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        """Forget a gang object (`kind` as `group/Kind`; a plain kind forgets it in every group)."""
        self.gang_objects.delete(kind, namespace, name)

    def get_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """The cached gang object, or None (`GangObjects.get`: the `lookup` given to gang sources)."""
        return self.gang_objects.get(kind, namespace, name)

    def observe_pending_pod(self, pod: dict) -> PodRecord:
        """Note a pod seen in a scheduling request (`RequestPods.observe_pending_pod`)."""
        return self.requests.observe_pending_pod(pod)

    def record_from_request(self, pod: dict) -> PodRecord:
        """A record of the pod in a request body, not kept."""
        return self.requests.record_from_request(pod)

    def highest_outside_priority(self) -> int | None:
        """The highest priority of a `pending_outside` pod (None when there is none)."""
        return self.outside.highest_priority()

    # ----- relist ------------------------------------------------------------------------------
    def replace_all(self, nodes: list[dict], pods: list[dict], objects: list[dict]) -> None:
        """Replace everything with a fresh list (start-up or relist after 410); keeps reservations."""
        with self.lock:
            self.node_topology.replace(nodes)
            self.gang_objects.replace(objects)
            self.pods, self._uid_by_name, self.gang_index, self.invalid_pods = {}, {}, {}, {}
            self.outside.clear()
            self.indexes.clear()
            records = [(self.reader.read(pod), pod) for pod in pods]
            for record, _ in records:  # members with an index of their own first: they keep it
                if record.member is None or record.member.own_index:
                    self._index(record)
            for record, pod in records:
                if record.member is not None and not record.member.own_index:
                    self._index(self.indexes.give_index(record, pod))
            self.room.keep_pods(self.pods)  # claims of pods the list no longer has go; the rest were observed afresh
            self._rebuild_topology()
            self._release_vanished_slots()
            self.rebuild_from_bound_pods()
            if self.relisted is not None:
                self.relisted()

    def _slot_node(self, gang_key: str, index: int) -> str | None:
        """The node gang `gang_key`'s slot `index` is reserved or bound on (None: no such slot)."""
        entry = self.ledger.get(gang_key)
        slot = entry.slots.get(index) if entry is not None else None
        return slot.node if slot is not None else None

    def _release_vanished_slots(self) -> None:
        for key, entry in list(self.ledger.entries.items()):
            namespace = key.partition("/")[0]
            for slot in list(entry.slots.values()):
                if slot.state == "bound" and (namespace, slot.pod) not in self._uid_by_name:
                    self.ledger.release_slot(key, slot.index)

    # ----- nodes -------------------------------------------------------------------------------
    def upsert_node(self, node: dict) -> None:
        """Add or update a node: label/GPU changes rebuild the topology, readiness just flips it."""
        with self.lock:
            if self.node_topology.upsert(node, self.topology):
                self._rebuild_topology()

    def refresh_nodes(self) -> None:
        """Judge every node again (the health sources changed) and rebuild the topology."""
        with self.lock:
            self.node_topology.judge_all()
            self._rebuild_topology()

    def delete_node(self, name: str) -> None:
        """Forget a node; reservations on it are dropped (their gangs get placed again)."""
        with self.lock:
            if self.node_topology.delete(name):
                self._rebuild_topology()

    def _rebuild_topology(self) -> None:
        topo = self.node_topology.build(self.gang_objects.topology_objects())
        self.room.attach_engine(topo)  # the bound claims' GPUs, before any hook reads the new topology
        for hook in self.rebuilt:
            hook(topo)
        self.topology = topo
        if self.ledger.attach(topo) and self.relisted is not None:
            self.relisted()  # slots on vanished nodes were released: the direct binder recounts its vacancies
        if topo.nodes:  # build the placement caches now, not inside the first filter call after a rebuild
            from scheduler.placement.engine import warm_caches

            warm_caches(topo)
        self.generation += 1

    # ----- pods --------------------------------------------------------------------------------
    def upsert_pod(self, pod: dict, from_watch: bool = True) -> PodRecord:
        """Add or update a pod: bound pods hold GPUs, finished ones release, gang slots follow."""
        record = self.reader.read(pod)
        record.from_watch = from_watch
        with self.lock:
            record = self.indexes.give_index(record, pod)
            old_uid = self._uid_by_name.get((record.namespace, record.name))
            if old_uid is not None and old_uid != record.uid:
                self._forget(self.pods[old_uid])
            self._index(record)
            self._follow_gang(record)
            self.requests.track(record)
            if self.member_watched is not None and record.member is not None and from_watch:
                self.member_watched(record)
            if record.member is not None and record.phase in FINISHED_PHASES:
                self.indexes.retry_awaiting(record.member.gang_key)
        return record

    def _index(self, record: PodRecord) -> None:
        old = self.pods.get(record.uid)
        if old is not None and old is not record:
            self.outside.track(old, False)
        self.room.observe_pod(record)
        self.outside.track(record, True)
        if old is not None and (old.namespace, old.name) != (record.namespace, record.name):
            self._forget(old)  # the uid now names another pod: the old one is gone, with its name, GPUs and slot
            old = None
        if old is not None and old.member is not None:
            members = self.gang_index.get(old.member.gang_key, {})
            members.pop(old.uid, None)
            if not members:
                self.gang_index.pop(old.member.gang_key, None)
        self.pods[record.uid] = record
        self._uid_by_name[(record.namespace, record.name)] = record.uid
        self.invalid_pods.pop(record.uid, None)
        if record.invalid_gang and record.phase not in FINISHED_PHASES:
            self.invalid_pods[record.uid] = record
        if record.member is not None and record.phase not in FINISHED_PHASES:  # a Failed or Succeeded pod is
            self.gang_index.setdefault(record.member.gang_key, {})[record.uid] = record  # no member any more

    def _unindex(self, record: PodRecord) -> None:
        self.room.observe_pod(record, present=False)
        self.outside.track(record, False)
        self.pods.pop(record.uid, None)
        self.invalid_pods.pop(record.uid, None)
        if self._uid_by_name.get((record.namespace, record.name)) == record.uid:
            del self._uid_by_name[(record.namespace, record.name)]
        if record.member is not None:
            members = self.gang_index.get(record.member.gang_key, {})
            members.pop(record.uid, None)
            if not members:
                self.gang_index.pop(record.member.gang_key, None)

    def _follow_gang(self, record: PodRecord) -> None:
        member = record.member
        if member is None or record.uid in self.superseded:
            return
        if record.phase in FINISHED_PHASES:
            self.ledger.release_slot(member.gang_key, member.index)
        elif record.node:
            if record.terminating and self._whole_gang_terminating(member.gang_key):
                return
            entry = self.ledger.get(member.gang_key)
            slot = entry.slots.get(member.index) if entry is not None else None
            if record.terminating and (slot is None or slot.pod != record.name):
                return  # an evicted / deleted member on its way out never founds (or joins) a gang generation
            if not self.ledger.mark_bound(member.gang_key, member.index, record.name, record.node):
                self.ledger.record_bound(gang_from_membership(member), member.index, record.name, record.node)
            self.ledger.note_given(member.gang_key, record.given)
        else:
            entry = self.ledger.get(member.gang_key)
            slot = entry.slots.get(member.index) if entry is not None else None
            if slot is not None and slot.pod not in (None, record.name) and not self._live_member(slot.pod,
                                                                                                record.namespace):
                slot.pod = None  # the slot still names a pod that is gone or finished: it is this pod's now
            self.ledger.note_pod(member.gang_key, member.index, record.name)

    def _forget(self, record: PodRecord) -> None:
        self._unindex(record)
        if record.uid in self.superseded:  # an evicted member gone: its slot is its replacement's already
            self.superseded.discard(record.uid)
            entry = self.ledger.get(record.member.gang_key) if record.member is not None else None
            if entry is not None:
                entry.pinned_by.discard(record.uid)  # it no longer holds pod 0 on the rendezvous
        elif record.member is not None:
            key = record.member.gang_key
            entry = self.ledger.get(key)
            slot = entry.slots.get(record.member.index) if entry else None
            if slot is not None and slot.pod in (None, record.name):
                if record.phase in FINISHED_PHASES:
                    self.ledger.release_slot(key, record.member.index)
                else:  # deleted (evicted, node lost...): the slot waits for the replacement pod
                    self.ledger.hold_for_replacement(key, record.member.index)
            if entry is not None and key not in self.gang_index and self.ledger.get(key) is entry \
                    and not entry.has_bound():
                self.ledger.unreserve(key)  # the whole gang is gone (job deleted): free what it held
            self.indexes.retry_awaiting(key)
            if self.member_gone is not None:  # its slot held for a replacement, released, or its gang unreserved
                self.member_gone(record)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Forget a pod: its GPUs are released, and so is its gang slot."""
        with self.lock:
            uid = self._uid_by_name.get((namespace, name))
            if uid is not None:
                self._forget(self.pods[uid])

    def record_binding(self, namespace: str, name: str, node: str, given: GivenRendezvous | None = None) -> None:
        """A bind succeeded: the pod now holds its GPUs on `node` (before the watch reports it), and was
        given the rendezvous `given` (what its Binding's annotations state)."""
        with self.lock:
            uid = self._uid_by_name.get((namespace, name))
            if uid is None:
                return
            record = self.pods[uid]
            record.node = node
            self.room.bound_by_meshfit(record, node)
            self.outside.track(record, True)
            if record.member is not None and given is not None:
                record.given = given
            self._follow_gang(record)

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The record of one pod by name, or None."""
        with self.lock:
            return self._named(namespace, name)

    def _named(self, namespace: str, name: str) -> PodRecord | None:
        uid = self._uid_by_name.get((namespace, name))
        return self.pods.get(uid) if uid is not None else None

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        """The record of one pod by uid, or None."""
        return self.pods.get(uid)

    def gang_members(self, gang_key: str) -> list[PodRecord]:
        """Every known pod of one gang."""
        with self.lock:
            return list(self.gang_index.get(gang_key, {}).values())

    def unassume(self, namespace: str, name: str) -> None:
        """Undo `record_binding` after a failed bind: the pod holds nothing again."""
        with self.lock:
            record = self.pod(namespace, name)
            if record is not None:
                record.node = None
                self.room.observe_pod(record)
                self.outside.track(record, True)

    def note_nomination(self, namespace: str, name: str, uid: str, node: str | None) -> None:
        """A nomination was written for pod `namespace/name` (embedded mode: no watch reports it back)."""
        with self.lock:
            record = self._named(namespace, name)
            if record is not None and (not uid or record.uid == uid):
                record.nominated = node or ""
                self.room.observe_pod(record)
                self.outside.track(record, True)

    def _live_member(self, name: str, namespace: str) -> bool:
        """True while pod `namespace/name` exists, is not finished and is not being deleted."""
        record = self._named(namespace, name)
        return record is not None and record.phase not in FINISHED_PHASES and not record.terminating

    def _whole_gang_terminating(self, gang_key: str) -> bool:
        """True (and `gang_evicted` told) when every bound member of the gang is terminating: the whole gang is being
        evicted by someone else, so none of its slots may be kept for replacements."""
        bound = [r for r in self.gang_index.get(gang_key, {}).values() if r.node and r.uid not in self.superseded]
        if not bound or not all(r.terminating for r in bound):
            return False
        if self.gang_evicted is not None:
            self.gang_evicted(gang_key, {r.uid for r in bound})
        return True

    # ----- restart ----------------------------------------------------------------------------
    def rebuild_from_bound_pods(self, policy: str | None = None) -> list[str]:
        """Record gangs found (partly) bound so a restart never double-books; see `scheduler.gangs.restart`."""
        from scheduler.gangs.restart import rebuild_gangs

        with self.lock:
            return rebuild_gangs(self, policy if policy is not None else self.policy)
