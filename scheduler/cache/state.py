"""`ClusterState`: the one in-memory view the service decides on.

It owns the `ClusterTopology` (rebuilt from node labels via `topology.loaders.topology_from_objects`),
the pods by uid with the GPUs they hold, the gang objects (PodGroups, JobSets, Jobs, Workloads...)
by (API group, kind, namespace, name) -- a Volcano and a coscheduling PodGroup of the same name are two
objects -- and the reservation ledger.  The watch loop feeds it through
`replace_all` / `upsert_*` / `delete_*`; the extender, Volcano and gRPC handlers make their
decisions under its single re-entrant `lock`, so place-and-reserve is one critical section.

Holdings in the topology: a bound, unfinished GPU pod holds `pod:<ns>/<name>`; a reserved gang
slot holds `resv:<ns>/<gang>/<index>` (see `scheduler.gangs.ledger`).
"""

from __future__ import annotations

import threading
from collections import Counter
import time
from typing import Any, Callable, Iterable

from scheduler.gangs.membership import gang_from_membership
from scheduler.gangs.health import NodeFailures, mark_failed_unschedulable
from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.rendezvous import GivenRendezvous
from scheduler.gangs.ledger import DEFAULT_TTL_SECONDS, ReservationLedger
from scheduler.cache.member_index import MemberIndexes
from scheduler.cache.node_usage import NodeUsage
from scheduler.cache.pod_reading import PodReading, _meta
from scheduler.cache.request_pods import RequestPods
from scheduler.cache.room_ledger import RoomLedger
from scheduler.cache.state_objects import GangObjectsMixin
from topology.builder import HOST_LABEL, HOST_LEVEL
from topology.config import as_config
from topology.explicit import is_hypernode, is_topology_object
from topology.k8s import FINISHED_PHASES, node_record_from_k8s
from topology.model import ClusterTopology, Level, LinkTier, TopologyError


def pod_holding_key(namespace: str, name: str) -> str:
    """Topology holding key of a bound pod."""
    return f"pod:{namespace}/{name}"


def empty_topology() -> ClusterTopology:
    """A topology with no nodes (before the first list, or when no node has GPUs)."""
    link = LinkTier(1.0, 1.0)
    return ClusterTopology([Level(HOST_LEVEL, HOST_LABEL, link, HOST_LEVEL, (HOST_LABEL,))], [], [], link)


MAX_REQUEST_ONLY_PODS = 20_000
"""Pods known only from request bodies kept at most (a forged-body flood cannot grow memory without end)."""



class ClusterState(GangObjectsMixin, RequestPods, NodeUsage, MemberIndexes, PodReading):
    """Nodes, pods, gang objects and reservations behind one lock; see the module docstring."""

    def __init__(self, config: Any = None, tolerations: Iterable[Any] = (),
                 ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.config = as_config(config)
        self.tolerations = tuple(tolerations)
        self.lock = threading.RLock()
        self.topology = empty_topology()
        self.ledger = ReservationLedger(self.topology, ttl_seconds, clock)
        self.nodes: dict[str, dict] = {}
        self._node_signatures: dict[str, tuple] = {}
        self.pods: dict[str, PodRecord] = {}
        self._uid_by_name: dict[tuple[str, str], str] = {}
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        """(API group, kind, namespace, name) -> object."""
        self._groups_by_kind: dict[str, set[str]] = {}
        self._objects_epoch = 0
        self.gang_index: dict[str, dict[str, PodRecord]] = {}
        """Gang key -> uid -> record of every known member (for consistency checks and preemption)."""
        self._awaiting_index: dict[str, dict[str, tuple[dict, bool]]] = {}  # see `MemberIndexes`
        self.invalid_pods: dict[str, PodRecord] = {}
        """uid -> record of every unfinished pod of meshfit's whose gang cannot be read (`GET /gangs`: invalid)."""
        self.generation = 0
        """Bumped on every topology rebuild."""
        self.policy: str | None = None
        """Placement policy for re-holding the missing members of partly bound gangs at a (re)list."""
        self.max_request_only_pods = MAX_REQUEST_ONLY_PODS
        self._request_only: dict[str, None] = {}
        """Uids of pods known only from request bodies, oldest first (insertion order)."""
        self.cache_failing_since: float | None = None
        """Monotonic time since which some watch of the API server keeps failing (None: all healthy)."""
        self.watch_is_truth = False
        """Kubernetes mode: pods come from the watch; a request body may select a pod, never overwrite it."""
        self.health = NodeFailures(clock, None, self.tolerations, self.config.gpu_resources)
        """Failed nodes (see `scheduler.gangs.health`): unschedulable here, their members replaced by the service."""
        self.rebuilt: list[Callable[[ClusterTopology], None]] = []
        """Called with each rebuilt topology before reservations are re-held (spare holds are re-added there)."""
        self.superseded: set[str] = set()
        """Uids of evicted members whose slot already moved to a replacement node: their updates leave it alone."""
        self.needs_of: Callable[[dict], Any] | None = None
        """Reads a pod's `needs` (kube-scheduler's node-local filter inputs; `scheduler.kube.node_fit.pod_needs` in
        Kubernetes mode); None: not read, and meshfit never binds members on its own."""
        self.pod_lookup: Callable[[str, str], dict | None] | None = None
        """Kubernetes mode: one direct GET of a pod the watch has not shown yet (None: no lookup, such pods are
        refused)."""
        self._missing: dict[tuple[str, str, str], float] = {}
        self.gang_evicted: Callable[[str, set[str]], None] | None = None
        """Called (under the lock) when every bound member of a gang is terminating (see `_whole_gang_terminating`)."""
        self.member_watched: Callable[[PodRecord], None] | None = None
        """Called (under the lock) when the watch reports a gang member, pending (the direct binder's trigger) or
        bound."""
        self.member_gone: Callable[[PodRecord], None] | None = None
        """Called (under the lock) when an unfinished gang member's pod is gone, after its slot was held for the pod
        its controller recreates (the direct binder keeps the member's room counted there)."""
        self.relisted: Callable[[], None] | None = None
        """Called (under the lock) after a relist re-held the reservations (the direct binder recounts vacancies)."""
        self.room = RoomLedger(self._slot_node, clock)
        """Every node's room on every resource: one claim per pod or vacant gang slot (`scheduler.cache.room_ledger`).
        Bound and nominated pods are claimed here from the watch; the direct binder holds, binds and keeps vacancies
        through the same ledger."""
        self.pending_outside: dict[str, tuple[PodRecord, int, int]] = {}
        """Uid -> (record, first event, latest event) of unbound pods kube-scheduler binds without meshfit."""
        self.outside_since: dict[str, tuple[int, int, tuple]] = {}
        """Uid -> (first, latest event count, fingerprint) of a `pending_outside` pod (kept across its updates)."""
        self.outside_priorities: Counter[int] = Counter()
        """Priority -> how many `pending_outside` pods have it (`highest_outside_priority`)."""
        self.pod_events = 0
        """Pod changes indexed so far, in the order the watch delivered them (the nomination fence's clock)."""

    # ----- relist ------------------------------------------------------------------------------
    def replace_all(self, nodes: list[dict], pods: list[dict], objects: list[dict]) -> None:
        """Replace everything with a fresh list (start-up or relist after 410); keeps reservations."""
        with self.lock:
            self.nodes = {_meta(n)[1]: n for n in nodes}
            self.health.reset(self.nodes)
            self._node_signatures = {name: self._signature(n) for name, n in self.nodes.items()}
            self.objects, self._groups_by_kind = {}, {}
            self._objects_epoch += 1
            for obj in objects:
                self._store_object(obj)
            self.pods, self._uid_by_name, self.gang_index, self.invalid_pods = {}, {}, {}, {}
            self.pending_outside, self._awaiting_index = {}, {}
            self.outside_priorities = Counter()
            records = [(self._record(pod), pod) for pod in pods]
            for record, _ in records:  # members with an index of their own first: they keep it
                if record.member is None or record.member.own_index:
                    self._index(record)
            for record, pod in records:
                if record.member is not None and not record.member.own_index:
                    self._index(self.give_index(record, pod))
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
    def _signature(self, node: dict) -> tuple:
        try:
            record = node_record_from_k8s(node, self.tolerations, self.config.gpu_resources)
        except TopologyError as exc:
            return ("invalid", str(exc))
        failure = self.health.observe(_meta(node)[1], node)
        return (record.gpus_total, tuple(sorted(record.labels.items())), record.schedulable and failure is None,
                record.unschedulable_reason or (failure and f"failed: {failure.reason}"))

    def upsert_node(self, node: dict) -> None:
        """Add or update a node: label/GPU changes rebuild the topology, readiness just flips it."""
        name = _meta(node)[1]
        with self.lock:
            old = self._node_signatures.get(name)
            new = self._signature(node)
            self.nodes[name] = node
            self._node_signatures[name] = new
            if old == new:
                return
            topo_node = self.topology.node_by_name.get(name)
            if old is not None and topo_node is not None and old[:2] == new[:2] and new[0] != "invalid":
                self.topology.set_schedulable(name, new[2], new[3])
                return
            self._rebuild_topology()

    def refresh_nodes(self) -> None:
        """Judge every node again (the health sources changed) and rebuild the topology."""
        with self.lock:
            self._node_signatures = {name: self._signature(n) for name, n in self.nodes.items()}
            self._rebuild_topology()

    def delete_node(self, name: str) -> None:
        """Forget a node; reservations on it are dropped (their gangs get placed again)."""
        with self.lock:
            if self.nodes.pop(name, None) is not None:
                self.health.observe(name, None)
                self._node_signatures.pop(name, None)
                self._rebuild_topology()

    def _rebuild_topology(self) -> None:
        objects: list[dict] = [{**n, "kind": "Node", "apiVersion": "v1"} for n in self.nodes.values()]
        objects += [o for o in self.objects.values() if is_topology_object(o) or is_hypernode(o)]
        try:
            topo = topology_from_objects(objects, self.config, self.tolerations) if self.nodes else empty_topology()
        except TopologyError as exc:
            topo = empty_topology()
            topo.warnings.append(str(exc))
        for record in self.pods.values():
            self._hold(topo, record)
        mark_failed_unschedulable(topo, self.health)
        for hook in self.rebuilt:
            hook(topo)
        self.topology = topo
        self.ledger.attach(topo)
        if topo.nodes:  # build the placement caches now, not inside the first filter call after a rebuild
            from scheduler.placement.engine import warm_caches

            warm_caches(topo)
        self.generation += 1

    # ----- pods --------------------------------------------------------------------------------
    def _hold(self, topo: ClusterTopology, record: PodRecord) -> None:
        key = pod_holding_key(record.namespace, record.name)
        topo.remove_pod(key)
        if record.node and record.gpus > 0 and record.node in topo.node_by_name:
            topo.add_pod(key, record.node, record.gpus)

    def upsert_pod(self, pod: dict, from_watch: bool = True) -> PodRecord:
        """Add or update a pod: bound pods hold GPUs, finished ones release, gang slots follow."""
        record = self._record(pod)
        record.from_watch = from_watch
        with self.lock:
            record = self.give_index(record, pod)
            old_uid = self._uid_by_name.get((record.namespace, record.name))
            if old_uid is not None and old_uid != record.uid:
                self._forget(self.pods[old_uid])
            self._index(record)
            self._hold(self.topology, record)
            self._follow_gang(record)
            self._track_request_only(record)
            if self.member_watched is not None and record.member is not None and from_watch:
                self.member_watched(record)
            if record.member is not None and record.phase in FINISHED_PHASES:
                self.retry_awaiting(record.member.gang_key)
        return record

    def _index(self, record: PodRecord) -> None:
        old = self.pods.get(record.uid)
        if old is not None and old is not record:
            self._track_outside(old, False)
        self.room.observe_pod(record)
        self._track_outside(record, True)
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
        self._track_outside(record, False)
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
        self.topology.remove_pod(pod_holding_key(record.namespace, record.name))
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
                    if self.member_gone is not None:
                        self.member_gone(record)
            if entry is not None and key not in self.gang_index and self.ledger.get(key) is entry \
                    and not entry.has_bound():
                self.ledger.unreserve(key)  # the whole gang is gone (job deleted): free what it held
            self.retry_awaiting(key)

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
            self._track_outside(record, True)
            if record.member is not None and given is not None:
                record.given = given
            self._hold(self.topology, record)
            self._follow_gang(record)

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The record of one pod by name, or None."""
        with self.lock:
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
                self._track_outside(record, True)
                self._hold(self.topology, record)

    # ----- restart ----------------------------------------------------------------------------
    def rebuild_from_bound_pods(self, policy: str | None = None) -> list[str]:
        """Record gangs found (partly) bound so a restart never double-books; see `scheduler.gangs.restart`."""
        from scheduler.gangs.restart import rebuild_gangs

        with self.lock:
            return rebuild_gangs(self, policy if policy is not None else self.policy)


def topology_from_objects(objects: list[dict], config: Any, tolerations: Iterable[Any]) -> ClusterTopology:
    """Indirection to `topology.loaders.topology_from_objects` (imported on first use)."""
    from topology.loaders import topology_from_objects as build

    return build(objects, config, tolerations)
