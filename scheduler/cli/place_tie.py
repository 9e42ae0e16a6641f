"""`meshfit place`'s tie line: when every policy predicts the same step communication, say so and why, in one line.

meshfit wins where layouts differ: fragmented clusters, pods smaller than a node (a group can be split across
hosts), jobs spanning leaves or an oversubscribed tier.  Whole-node pods on free hosts of one leaf tie: any
choice of hosts gives every group the same links.  This module places the job with each baseline next to the
policy the user asked for and, when all predicted costs are equal, names the reason.
"""

from __future__ import annotations

from typing import Any

COMPARED_POLICIES = ("meshfit", "kueue-tas", "volcano-hypernode", "first-fit")
"""Policies whose layouts are compared for a tie."""


def tie_line(gang: Any, topo: Any, placement: Any) -> str | None:
    """One line when every compared policy places `gang` at the same predicted cost as `placement`, else None."""
    from scheduler.placement.engine import place
    from scheduler.placement.explain_layout import tied

    if not placement.placed:
        return None
    chosen = placement.cost.step_comm_seconds
    for name in COMPARED_POLICIES:
        if name == placement.policy:
            continue
        other = place(gang, topo, name, with_ranks=False)
        if not other.placed or not tied(chosen, other.cost.step_comm_seconds):
            return None
    return (f"every policy ties ({', '.join(COMPARED_POLICIES)}: {chosen:.6f} s/step): "
            f"{_reason(gang, topo, placement)}")


def _reason(gang: Any, topo: Any, placement: Any) -> str:
    """Why no layout can do better than another for this job on this cluster."""
    cost = placement.cost
    tiers = ", ".join(f"{axis} over {cost.tier_by_axis[axis]}" for axis in ("tp", "cp", "ep", "pp", "dp")
                      if gang.parallelism.degree(axis) > 1)
    if len(gang.pods) == 1:
        return "one pod, so every group stays inside one host whichever host it gets"
    if all(topo.node_by_name[name].gpus_total == gang.gpus_per_pod for name in placement.pod_nodes):
        return (f"whole-node pods, so any choice of free hosts gives each group the same links ({tiers}); "
                "topology matters on fragmented clusters, with sub-node pods or across leaves")
    return f"every layout puts each group on the same tiers ({tiers})"
