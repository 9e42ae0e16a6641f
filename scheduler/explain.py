"""Why a gang does (not) fit: one plain sentence naming the binding constraint and the numbers.

Used by policies for their unschedulable reasons and by `meshfit place --explain`.
"""

from __future__ import annotations

from scheduler.capacity import allowed_nodes, constraint_levels, domain_pod_slots, pod_slots
from scheduler.jobs import Gang
from topology.model import ClusterTopology, TopologyError


def _best_domain(topo: ClusterTopology, level: int, per_domain: list[int]) -> tuple[str, int]:
    """(name, pod slots) of the domain at `level` with the most slots."""
    best = max((d for d in topo.domains if d.level == level), key=lambda d: per_domain[d.id], default=None)
    return (best.name, per_domain[best.id]) if best is not None else ("-", 0)


def _capacity_sentence(gang: Gang, topo: ClusterTopology, slots: list[int]) -> str:
    """Explain a cluster-wide shortage, separating fragmentation from lack of GPUs."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    allowed = allowed_nodes(gang, topo)
    free = sum(n.gpus_free for n in topo.nodes if allowed is None or n.index in allowed)
    where = " inside the assigned domains" if allowed is not None else ""
    down = sum(1 for n in topo.nodes if not n.schedulable)
    down_text = f"; {down} node(s) unschedulable" if down else ""
    if free >= gang.world_size:
        return (f"needs {pods} pods x {g} GPUs; {free} GPUs are free{where} but only {sum(slots)} "
                f"nodes-slots of {g} GPUs exist (fragmented){down_text}")
    return f"needs {gang.world_size} GPUs ({pods} pods x {g}); only {free} free{where}{down_text}"


def unschedulable_reason(gang: Gang, topo: ClusterTopology) -> str | None:
    """The reason `gang` cannot be placed by a topology-aware policy, or None if it can."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    slots = pod_slots(topo, g, allowed_nodes(gang, topo))
    if sum(slots) < pods:
        return _capacity_sentence(gang, topo, slots)
    try:
        required, _ = constraint_levels(gang, topo)
    except TopologyError as exc:
        return f"topology constraint cannot be met: {exc}"
    if required is None:
        return None
    per_domain = domain_pod_slots(topo, slots)
    fitting = [d for d in topo.domains if d.level >= required and per_domain[d.id] >= pods]
    if fitting:
        return None
    level_name = topo.levels[required].name
    name, best = _best_domain(topo, required, per_domain)
    return (f"needs {gang.world_size} GPUs ({pods} pods x {g}) in one {level_name} domain "
            f"(required); largest free {level_name} domain {name} has {best * g}")


def explain(gang: Gang, topo: ClusterTopology) -> str:
    """A human sentence on whether and where the gang fits, for `meshfit place --explain`."""
    reason = unschedulable_reason(gang, topo)
    if reason is not None:
        return f"unschedulable: {reason}"
    g, pods = gang.gpus_per_pod, len(gang.pods)
    per_domain = domain_pod_slots(topo, pod_slots(topo, g, allowed_nodes(gang, topo)))
    for level in range(topo.host_level, -1, -1):
        fits = [d for d in topo.domains if d.level == level and per_domain[d.id] >= pods]
        if fits:
            return (f"schedulable: {gang.world_size} GPUs fit in one {topo.levels[level].name} domain "
                    f"({len(fits)} candidate(s), e.g. {fits[0].name})")
    return f"schedulable: {gang.world_size} GPUs fit only across top-level domains (cluster tier)"
