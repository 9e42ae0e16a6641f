"""The `Binder` and `RankTablePublisher` extension points, and what a bound gang hands to its runtime.

The binding extender must create the pod's Binding itself; `KubeBinder` (scheduler.kube.binder)
posts it to the API server, `MemoryBinder` (embedded mode, tests) keeps it in memory.  Both get
the rank assignment as `meshfit.io/*` annotations built by `scheduler.handoff.assignment.assignment.annotations_for_pod`
(the one builder of that format), which `meshfit launch` reads through the downward API.  The
gang's rank-table ConfigMap (`scheduler.handoff.assignment.rank_table`) goes to a `RankTablePublisher`:
`KubeRankTablePublisher` (scheduler.kube.configmap) or `MemoryRankTables` (embedded mode).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from scheduler.placement.engine import build_ranks
from scheduler.handoff.assignment import PodAssignment, assignment_for_pod
from scheduler.placement.jobs import AUTO_RANK_ORDER, DEFAULT_RANK_ORDER, Gang
from scheduler.placement.result import PLACED, Placement, RankInfo
from scheduler.handoff.rank_table import rank_table_configmap
from scheduler.gangs.ledger import SLOT_BOUND, Reservation


class BindConflict(RuntimeError):
    """The pod cannot be bound there (already bound elsewhere, gone, or the node is full)."""


class RendezvousMissing(RuntimeError):
    """No node is held for pod 0: a member must not be bound (its rendezvous address would be empty)."""


class Binder(Protocol):
    """Binds one pod to one node and records its assignment annotations; raises on conflict."""

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        """Create the Binding (and patch the annotations); raise on any failure."""
        ...


class Nominator(Protocol):
    """Writes a pod's `status.nominatedNodeName`: kube-scheduler's filters then count the pod's requests on that node
    for every pod of no higher priority, as they do for its own preemptors; raises on failure."""

    def nominate(self, namespace: str, name: str, uid: str, node: str | None) -> str | None:
        """Nominate `node` for the pod (None: clear the nomination); the pod's `resourceVersion` after the write when
        the API server says (None when it does not)."""
        ...


class RankTablePublisher(Protocol):
    """Publishes a gang's rank-table ConfigMap (create or replace); raises on failure."""

    def publish(self, configmap: dict[str, Any]) -> None:
        """Create or replace the ConfigMap (a plain v1 ConfigMap dict)."""
        ...

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The last ConfigMap this publisher published under `namespace/name`, or None."""
        ...


def reservation_placement(entry: Reservation) -> Placement:
    """The reservation as a full Placement: pods named as seen, nodes as held, ranks under the order the
    bound members were given (else the entry's)."""
    gang = entry.gang
    names = {index: slot.pod for index, slot in entry.slots.items() if slot.pod}
    if any(names.get(pod.index, pod.name) != pod.name for pod in gang.pods):
        gang = replace(gang, pods=tuple(replace(pod, name=names.get(pod.index, pod.name)) for pod in gang.pods))
    nodes = [entry.node_of(i) or "" for i in range(len(gang.pods))]
    given = entry.bound_given()
    order = (given.rank_order if given is not None  # what bound members were told wins
             else entry.placement.rank_order if entry.placement is not None else gang.rank_order)
    if order == AUTO_RANK_ORDER:
        order = DEFAULT_RANK_ORDER
    policy = entry.placement.policy if entry.placement is not None else ""
    return Placement(gang, PLACED, policy, order, None, nodes, _ranks(entry, gang, nodes, order))


def _ranks(entry: Reservation, gang: Gang, nodes: list[str], order: str) -> list[RankInfo]:
    """`build_ranks(gang, nodes, order)`, copied from the entry's placement when that one already has them
    (ranks depend only on the parallelism, GPUs per pod, nodes and order; pod names do not enter)."""
    held = entry.placement
    if (held is not None and held.ranks and held.rank_order == order and list(held.pod_nodes) == nodes
            and held.gang.parallelism == gang.parallelism and held.gang.gpus_per_pod == gang.gpus_per_pod):
        return list(held.ranks)
    return build_ranks(gang, nodes, order)


def master_address(entry: Reservation) -> str:
    """The gang's rendezvous address: the node of pod 0 ("" while none is held)."""
    return entry.node_of(0) or ""


def bind_assignment(entry: Reservation, index: int) -> PodAssignment:
    """Pod `index`'s assignment in a reserved gang, decided once in typed form (its Binding carries it rendered as
    `meshfit.io/*` annotations, `PodAssignment.to_annotations`).

    The rendezvous invariant is enforced here, where the address is decided: RendezvousMissing when no node is
    held for pod 0 (bound, binding or reserved), so no member is ever bound with an empty `master-addr`."""
    master = master_address(entry)
    if not master:
        raise RendezvousMissing(f"gang {entry.gang_key}: no node is held for pod 0, so no member can be told its "
                                f"rendezvous; pod 0 is placed first")
    return assignment_for_pod(reservation_placement(entry), index, master)


def bind_annotations(entry: Reservation, index: int) -> dict[str, str]:
    """`bind_assignment` rendered as the `meshfit.io/*` annotations a Binding carries."""
    return bind_assignment(entry, index).to_annotations()


def reservation_configmap(entry: Reservation) -> dict[str, Any]:
    """The gang's rank-table ConfigMap as of now (pods not yet bound have node null)."""
    bound = {index for index, slot in entry.slots.items() if slot.state == SLOT_BOUND}
    return rank_table_configmap(reservation_placement(entry), master_address(entry), bound_pods=bound,
                                elastic=entry.elastic)
