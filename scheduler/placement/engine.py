"""The placement engine: validate a gang, ask a policy for nodes, build the rank table, price it.

Every caller (CLI, extender service, gRPC, simulator) goes through `place`; `apply` and
`release` turn a placement into GPU holdings on the topology so free capacity stays exact.
"""

from __future__ import annotations

from collections import Counter

from scheduler.placement.capacity import constraint_levels, slice_level
from scheduler.placement.cost import estimate_cost
from scheduler.placement.jobs import (
    ANNOTATION_MAX_COMM_RATIO, AUTO_RANK_ORDER, DEFAULT_RANK_ORDER, Gang, JobSpecError, parse_rank_order,
)
from scheduler.placement.layout import rank_coords_table
from scheduler.placement.result import PLACED, UNSCHEDULABLE, Assignment, CostReport, Placement, RankInfo
from scheduler.placement.policy import PlacementPolicy, get_policy
from topology.model import ClusterTopology, TopologyError

DEFAULT_POLICY = "meshfit"


class PlacementBug(RuntimeError):
    """A policy returned an assignment that breaks all-or-nothing or over-commits a GPU."""


def _resolve(policy: str | PlacementPolicy) -> PlacementPolicy:
    if isinstance(policy, str):
        return get_policy(policy)
    return policy


def check_assignment(gang: Gang, topo: ClusterTopology, pod_nodes: tuple[int, ...]) -> None:
    """Raise PlacementBug unless every pod has a schedulable node with enough free GPUs."""
    if len(pod_nodes) != len(gang.pods):
        raise PlacementBug(f"{gang.key}: {len(pod_nodes)} nodes for {len(gang.pods)} pods")
    for node_index, pods in Counter(pod_nodes).items():
        node = topo.nodes[node_index]
        if pods * gang.gpus_per_pod > node.gpus_free:
            raise PlacementBug(f"{gang.key}: {pods} pods x {gang.gpus_per_pod} GPUs on {node.name} "
                               f"which has {node.gpus_free} free")


def build_ranks(gang: Gang, pod_nodes: list[str], rank_order: str) -> list[RankInfo]:
    """The rank table: rank, pod, node, local rank and coordinates under `rank_order`."""
    coords = rank_coords_table(gang.parallelism, parse_rank_order(rank_order))
    g = gang.gpus_per_pod
    return [RankInfo(rank, rank // g, pod_nodes[rank // g], rank % g, coords[rank]) for rank in range(gang.world_size)]


def unschedulable(gang: Gang, policy_name: str, reason: str) -> Placement:
    """A placement result saying why nothing was placed."""
    order = DEFAULT_RANK_ORDER if gang.rank_order == AUTO_RANK_ORDER else gang.rank_order
    return Placement(gang, UNSCHEDULABLE, policy_name, order, reason)


def placement_from_assignment(gang: Gang, topo: ClusterTopology, policy_name: str, assignment: Assignment,
                              with_ranks: bool = True, comm_limit: bool = True) -> Placement:
    """Check a policy's assignment and turn it into a priced Placement (without the rank table unless `with_ranks`;
    `comm_limit=False` for a layout an admission already fixed, which no limit can improve)."""
    if assignment.pod_nodes is None:
        return unschedulable(gang, policy_name, assignment.reason or "does not fit")
    check_assignment(gang, topo, assignment.pod_nodes)
    order = assignment.rank_order or gang.rank_order
    if order == AUTO_RANK_ORDER:
        order = DEFAULT_RANK_ORDER
    names = [topo.nodes[i].name for i in assignment.pod_nodes]
    cost = estimate_cost(gang, assignment.pod_nodes, topo, order)
    too_slow = comm_limit_exceeded(gang, cost) if comm_limit else None
    if too_slow:
        return unschedulable(gang, policy_name, too_slow)
    ranks = build_ranks(gang, names, order) if with_ranks else []
    return Placement(gang, PLACED, policy_name, order, None, names, ranks, cost)


def comm_limit_exceeded(gang: Gang, cost: CostReport) -> str | None:
    """Why a layout breaks the job's `meshfit.io/max-comm-ratio` (None when it does not, or no limit is set)."""
    limit = gang.constraint.max_comm_ratio
    if limit is None or cost.lower_bound_seconds <= 0:
        return None
    ratio = cost.step_comm_seconds / cost.lower_bound_seconds
    if ratio <= limit * (1 + 1e-9):
        return None
    return (f"the layout found predicts {ratio:.2f}x the ideal step communication "
            f"({cost.step_comm_seconds * 1e3:.3g} ms vs {cost.lower_bound_seconds * 1e3:.3g} ms), above the job's "
            f"{ANNOTATION_MAX_COMM_RATIO} {limit:g}: waiting for a better-aligned layout")


def constraint_level_error(gang: Gang, topo: ClusterTopology) -> str | None:
    """Why the gang's topology levels (required, preferred, Kueue slice) name no level of `topo`, None when they do."""
    try:
        constraint_levels(gang, topo)
        slice_level(gang, topo)
    except TopologyError as exc:
        return f"topology constraint cannot be met: {exc}"
    return None


def place(gang: Gang, topo: ClusterTopology, policy: str | PlacementPolicy = DEFAULT_POLICY,
          with_ranks: bool = True) -> Placement:
    """Place the whole gang or nothing; raises JobSpecError for an invalid job, never mutates `topo`.

    `with_ranks=False` leaves `Placement.ranks` empty (the simulator needs nodes and cost only)."""
    gang.validate()
    chosen = _resolve(policy)
    unknown_level = constraint_level_error(gang, topo)
    if unknown_level:  # every policy, also the ones that ignore constraints: a level typo is never dropped
        return unschedulable(gang, chosen.name, unknown_level)
    if gang.world_size > topo.gpus_free:
        from scheduler.placement.explain import gpus_per_node_reason

        return unschedulable(gang, chosen.name, gpus_per_node_reason(gang, topo) or
                             f"needs {gang.world_size} GPUs; the cluster has {topo.gpus_free} free")
    if gang.constraint.pod_domains:  # every pod pinned to its own domain (Kueue TAS): the layout inside them
        from scheduler.placement.pinned import assign_in_pod_domains

        return placement_from_assignment(gang, topo, chosen.name, assign_in_pod_domains(gang, topo, chosen),
                                         with_ranks, comm_limit=False)
    return placement_from_assignment(gang, topo, chosen.name, chosen.assign(gang, topo), with_ranks)


def warm_caches(topo: ClusterTopology) -> None:
    """Build the per-topology caches placement reads (tree index, cost geometry, free-GPU arrays) now,
    so the first placement after a topology rebuild does not pay for them (call after every rebuild)."""
    from scheduler.placement.cost import geometry
    from scheduler.placement.tree_index import tree_index

    tree_index(topo)
    geometry(topo)
    topo.free_arrays()


def pod_key(gang: Gang, index: int) -> str:
    """Key under which pod `index` of `gang` holds GPUs in the topology."""
    return f"{gang.key}/{index}"


def apply(placement: Placement, topo: ClusterTopology) -> None:
    """Make the placement's pods hold their GPUs in `topo` (idempotent per pod)."""
    if not placement.placed:
        raise JobSpecError(f"cannot apply an unschedulable placement of {placement.gang.key}")
    for pod in placement.gang.pods:
        topo.add_pod(pod_key(placement.gang, pod.index), placement.pod_nodes[pod.index], pod.gpus)


def release(gang: Gang, topo: ClusterTopology) -> int:
    """Free every GPU the gang's pods hold in `topo`; returns how many pods were released."""
    return sum(topo.remove_pod(pod_key(gang, pod.index)) for pod in gang.pods)
