"""Why the chosen layout beat the runner-up: the same policy asked again without the chosen domain.

The runner-up is the policy's best layout once the smallest domain holding the chosen layout is taken
away (held on a what-if copy of the free counts, restored afterwards).  When nothing else fits, the
chosen nodes alone are taken away instead, so the comparison shows what the next-best nodes would
cost.  The comparison lists, per parallelism axis, the predicted seconds per step and link tier of
both layouts and the difference (`tie` where equal); equal totals mean the policy's tie-breakers decided,
and the `why` line names both layouts.
"""

from __future__ import annotations

from typing import Any

from scheduler.placement.explain import chosen_domain
from scheduler.placement.jobs import AXES, Gang
from topology.model import ClusterTopology

WHAT_IF_KEY = "explain-what-if:"
"""Holding-key prefix of the GPUs taken away while the runner-up is placed."""
RELATIVE_TIE = 1e-9
"""Predicted costs closer than this (relative) count as equal."""


def _placement_without(gang: Gang, topo: ClusterTopology, policy: Any, node_indices: list[int]):
    """The policy's placement with every free GPU on `node_indices` held; `topo` is restored after."""
    from scheduler.placement.engine import place

    snapshot = topo.snapshot_usage()
    try:
        for index in node_indices:
            node = topo.nodes[index]
            if node.gpus_free > 0:
                topo.add_pod(f"{WHAT_IF_KEY}{node.name}", node.name, node.gpus_free)
        return place(gang, topo, policy, with_ranks=False)
    finally:
        topo.restore_usage(snapshot)


def runner_up(gang: Gang, topo: ClusterTopology, policy: Any, chosen: Any) -> tuple[Any | None, str]:
    """(runner-up placement or None, what was excluded to find it) for a placed `chosen`."""
    level, name = chosen_domain(topo, list(chosen.pod_nodes))
    used = sorted({topo.node_by_name[n].index for n in chosen.pod_nodes})
    if level >= 0:
        domain = topo.domain_of(used[0], level)
        other = _placement_without(gang, topo, policy, list(domain.nodes))
        if other.placed:
            return other, f"outside {topo.levels[level].name} domain {name}"
    other = _placement_without(gang, topo, policy, used)
    if other.placed:
        return other, "on other nodes than the chosen ones"
    return None, "no other layout fits"


def _side(topo: ClusterTopology, placement: Any) -> dict[str, Any]:
    level, name = chosen_domain(topo, list(placement.pod_nodes))
    cost = placement.cost
    return {"domain": name, "level": topo.levels[level].name if level >= 0 else "cluster",
            "nodes": sorted(set(placement.pod_nodes)), "rank_order": placement.rank_order,
            "step_comm_seconds": cost.step_comm_seconds,
            "by_axis": {axis: cost.by_axis[axis] for axis in AXES},
            "tier_by_axis": {axis: cost.tier_by_axis[axis] for axis in AXES}}


def tied(a: float, b: float) -> bool:
    """True when two predicted costs are equal within `RELATIVE_TIE` (both zero included)."""
    return abs(a - b) <= RELATIVE_TIE * max(abs(a), abs(b), 1e-30)


def _where(side: dict[str, Any]) -> str:
    """`leaf su-000 (dgx-0, dgx-1, +2 more)`: a layout's domain and nodes, short."""
    nodes = side["nodes"]
    listed = ", ".join(nodes[:2]) + (f", +{len(nodes) - 2} more" if len(nodes) > 2 else "")
    return f"{side['level']} {side['domain']} ({listed})"


def _why(chosen: dict[str, Any], other: dict[str, Any]) -> str:
    total_a, total_b = chosen["step_comm_seconds"], other["step_comm_seconds"]
    if tied(total_a, total_b):
        return (f"tie: both layouts predict {total_a * 1e3:.4g} ms/step of communication, so the policy's "
                f"tie-breakers (fewest whole domains broken, deeper domain, tightest fit) chose "
                f"{_where(chosen)} over {_where(other)}")
    savings = sorted(((other["by_axis"][a] - chosen["by_axis"][a], a) for a in AXES), reverse=True)
    parts = [f"{axis} {delta * 1e3:.3g} ms/step ({chosen['tier_by_axis'][axis]} vs {other['tier_by_axis'][axis]})"
             for delta, axis in savings if delta > 0]
    verdict = "cheaper" if total_a < total_b else "costlier (the policy is not cost-driven)"
    detail = f"; saves {', '.join(parts)}" if parts and total_a < total_b else ""
    return f"chosen is {(abs(total_b - total_a)) * 1e3:.3g} ms/step {verdict}{detail}"


def compare_with_runner_up(gang: Gang, topo: ClusterTopology, policy: Any, chosen: Any) -> dict[str, Any]:
    """The report's `comparison`: chosen vs runner-up per axis, and why the chosen layout won."""
    other, excluded = runner_up(gang, topo, policy, chosen)
    chosen_side = _side(topo, chosen)
    if other is None:
        return {"chosen": chosen_side, "runner_up": None, "excluded": excluded, "tie": False,
                "why": "the only layout that fits"}
    other_side = _side(topo, other)
    return {"chosen": chosen_side, "runner_up": other_side, "excluded": excluded,
            "tie": tied(chosen_side["step_comm_seconds"], other_side["step_comm_seconds"]),
            "why": _why(chosen_side, other_side)}
