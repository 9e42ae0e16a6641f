"""Topology-first, whole-gang preemption: which lower-priority gangs to evict, and in which domain.

A gang that does not fit may evict *whole* gangs (and plain GPU pods) of strictly lower priority.
Every topology domain is a candidate (NVLink domain / rack, leaf, spine, ..., the whole cluster):
inside one domain the victims are the lower-priority holders of GPUs there, taken cheapest first
until the preemptor *actually places* (the engine, on a what-if view where the victims' holdings in
that domain are removed and only that domain's nodes are offered -- `scheduler.placement.result.offered.offered_only`
-- undone exactly afterwards); then victims are dropped again, most expensive first, while it still
places.  The plan evicts each victim gang whole, members outside the domain included: never part of
a gang, never a holder of equal or higher priority.

Plans are compared by `PreemptionPlan.order`:

1. the **highest victim priority** (lower is better): a priority-20 job is never evicted while
   evicting priority-10 ones suffices, however many GPUs those hold -- kube-scheduler's own
   `pickOneNodeForPreemption` minimises the same thing first, and PriorityClass values are arbitrary
   integers, so multiplying GPUs by them (GPUs x (1 + priority)) would make the choice depend on
   their scale;
2. the preemptor's **layout tier**: the deepest level whose one domain holds all its pods (a leaf
   beats a spine): among victims of the same priority, clearing a whole leaf is worth a few more
   evicted GPUs than running the preemptor across the spine for its whole life (topology first);
3. the **GPUs evicted** (every GPU of every victim, in the domain or not), then the number of victims;
4. the preemptor's **predicted step communication** there (`scheduler.placement.result.cost.estimate_cost`, via the
   engine's placement);
5. the **smaller domain** (fewer GPUs), then its name (deterministic).

Work is bounded for large clusters: a cheap per-domain estimate (cheapest-first GPU counts, no
placement) orders the domains, at most `MAX_DOMAINS` are verified with the engine, with at most
`MAX_PLACEMENTS` engine placements each (victims are added without one until their GPUs add up), and
a domain whose estimated highest victim priority is already worse than the best plan's is not
verified at all.

Pure core: no service or Kubernetes imports; the caller holds the state lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang
from scheduler.placement.offered import offered_only
from scheduler.placement.result import Placement
from topology.model import ClusterTopology, Domain

MAX_DOMAINS = 48
"""Candidate domains verified with the engine per plan (the cheapest by estimate)."""
MAX_PLACEMENTS = 24
"""Engine placements tried per domain (adding victims, then dropping them) before it is given up."""
CLUSTER = "cluster"
"""Name of the whole-cluster candidate when the topology has several top-level domains."""


@dataclass(frozen=True)
class Holder:
    """Something that holds GPUs and is evicted whole: a gang (all its members and held slots) or one GPU pod."""

    key: str
    """Gang key (`namespace/name`), or `pod:namespace/name` for a pod that is not in a gang."""
    priority: int
    holdings: tuple[str, ...]
    """Topology holding keys (`pod:<ns>/<name>` of bound pods, `resv:<gang>/<index>` of held slots)."""
    preemptible: bool = True
    """False while it cannot be evicted safely now (a bind in flight, already being evicted...)."""
    is_gang: bool = True


@dataclass(frozen=True)
class PreemptionPlan:
    """The domain the preemptor goes to, the whole holders evicted to make room, and its predicted layout."""

    preemptor: str
    domain: str
    level: str
    nodes: frozenset[str] | None
    """The domain's node names (None: the whole cluster)."""
    domain_gpus: int
    victims: tuple[Holder, ...]
    victim_gpus: int
    placement: Placement
    layout_level: int = -1
    """Deepest topology level whose one domain holds all the preemptor's pods (-1: none, the cluster tier)."""

    @property
    def highest_priority(self) -> int:
        """The highest priority among the victims."""
        return max(v.priority for v in self.victims)

    def order(self) -> tuple:
        """Sort key: (highest victim priority, layout tier (deeper first), GPUs evicted, victims, predicted step
        seconds, domain GPUs, name); smaller is better."""
        cost = self.placement.cost.step_comm_seconds if self.placement.cost is not None else 0.0
        return (self.highest_priority, -self.layout_level, self.victim_gpus, len(self.victims), cost,
                self.domain_gpus, self.domain)

    def describe(self) -> str:
        """`<level> <domain>: evicting <victims> (<GPUs> GPUs)` for logs and Events."""
        names = ", ".join(f"{v.key} (priority {v.priority})" for v in self.victims)
        return f"{self.level} {self.domain}: evicting {names} ({self.victim_gpus} GPUs)"


def holder_gpus(topo: ClusterTopology, holder: Holder) -> int:
    """GPUs the holder holds in the topology now."""
    return sum(topo.pods[k][1] for k in holder.holdings if k in topo.pods)


def _usage(topo: ClusterTopology, holder: Holder) -> list[tuple[str, int, int]]:
    """(holding key, node index, GPUs) of every holding on a schedulable node."""
    found = []
    for key in holder.holdings:
        if key in topo.pods:
            node, gpus = topo.pods[key]
            if gpus > 0 and topo.nodes[node].schedulable:
                found.append((key, node, gpus))
    return found


@dataclass
class _Candidate:
    domain: Domain | None
    victims: list[Holder]
    estimate: tuple[int, int]


def _candidates(topo: ClusterTopology, need: int, lower: list[Holder],
                usage: dict[str, list[tuple[str, int, int]]], gpus: dict[str, int]) -> list[_Candidate]:
    """Every domain where freeing lower-priority GPUs could reach `need`, cheapest estimate first."""
    in_domain: dict[int | None, dict[str, int]] = {}
    several_roots = len(topo.root_domain_ids) > 1
    for holder in lower:
        for _, node, count in usage[holder.key]:
            targets = list(topo.nodes[node].path) + ([None] if several_roots else [])
            for domain_id in targets:
                per = in_domain.setdefault(domain_id, {})
                per[holder.key] = per.get(holder.key, 0) + count
    by_key = {h.key: h for h in lower}
    found = []
    for domain_id, per in in_domain.items():
        domain = topo.domains[domain_id] if domain_id is not None else None
        free = domain.gpus_free if domain is not None else topo.gpus_free
        ordered = sorted((by_key[k] for k in per), key=lambda h: (h.priority, -per[h.key], gpus[h.key], h.key))
        reach, taken = free, []
        for holder in ordered:
            if reach >= need:
                break
            reach += per[holder.key]
            taken.append(holder)
        if reach < need or not taken:
            continue
        estimate = (max(h.priority for h in taken), sum(gpus[h.key] for h in taken))
        found.append(_Candidate(domain, ordered, estimate))
    found.sort(key=lambda c: (c.estimate, -(c.domain.level if c.domain else -1),
                              c.domain.gpus_total if c.domain else topo.gpus_total,
                              c.domain.name if c.domain else CLUSTER))
    return found


class _WhatIf:
    """Removes holders' holdings inside one domain from the topology and puts them back exactly."""

    def __init__(self, topo: ClusterTopology, usage: dict[str, list[tuple[str, int, int]]],
                 inside: set[int] | None) -> None:
        self.topo, self.usage, self.inside = topo, usage, inside
        self.removed: dict[str, list[tuple[str, int, int]]] = {}

    def remove(self, holder: Holder) -> None:
        """Free the holder's GPUs inside the domain."""
        gone = [(k, n, g) for k, n, g in self.usage[holder.key] if self.inside is None or n in self.inside]
        for key, _, _ in gone:
            self.topo.remove_pod(key)
        self.removed[holder.key] = gone

    def restore(self, holder: Holder) -> None:
        """Hold the holder's GPUs again."""
        for key, node, gpus in self.removed.pop(holder.key, []):
            self.topo.add_pod(key, self.topo.nodes[node].name, gpus)

    def restore_all(self) -> None:
        """Undo every removal."""
        for key in list(self.removed):
            for hold_key, node, gpus in self.removed.pop(key):
                self.topo.add_pod(hold_key, self.topo.nodes[node].name, gpus)


def _fits(topo: ClusterTopology, gang: Gang, policy: str, domain: Domain | None) -> Placement | None:
    free = domain.gpus_free if domain is not None else topo.gpus_free
    if free < gang.world_size:
        return None
    placement = place(gang, topo, policy, with_ranks=False)
    return placement if placement.placed else None


def _plan_in(topo: ClusterTopology, gang: Gang, policy: str, candidate: _Candidate,
             usage: dict[str, list[tuple[str, int, int]]], gpus: dict[str, int],
             max_placements: int) -> PreemptionPlan | None:
    domain = candidate.domain
    names = frozenset(topo.nodes[i].name for i in domain.nodes) if domain is not None else None
    what_if = _WhatIf(topo, usage, set(domain.nodes) if domain is not None else None)
    with offered_only(topo, names):
        try:
            chosen: list[Holder] = []
            placement, tries = None, 0
            free = (lambda: domain.gpus_free) if domain is not None else (lambda: topo.gpus_free)
            for holder in candidate.victims:  # cheapest first; the engine only once the GPUs add up
                what_if.remove(holder)
                chosen.append(holder)
                if free() >= gang.world_size:
                    tries += 1
                    placement = _fits(topo, gang, policy, domain)
                    if placement is not None or tries >= max_placements:
                        break
            if placement is None:
                return None
            for holder in sorted(chosen, key=lambda h: (-h.priority, -gpus[h.key], h.key)):  # drop the dearest first
                if len(chosen) == 1 or tries >= max_placements:
                    break
                what_if.restore(holder)
                again = None
                if free() >= gang.world_size:
                    tries += 1
                    again = _fits(topo, gang, policy, domain)
                if again is not None:
                    chosen.remove(holder)
                    placement = again
                else:
                    what_if.remove(holder)
        finally:
            what_if.restore_all()
    level = topo.levels[domain.level].name if domain is not None else CLUSTER
    layout = topo.group_level([topo.node_by_name[name].index for name in placement.pod_nodes])
    return PreemptionPlan(gang.key, domain.name if domain is not None else CLUSTER, level, names,
                          domain.gpus_total if domain is not None else topo.gpus_total,
                          tuple(sorted(chosen, key=lambda h: h.key)), sum(gpus[h.key] for h in chosen), placement,
                          layout)


def plan_preemption(topo: ClusterTopology, gang: Gang, priority: int, holders: list[Holder], policy: str,
                    max_domains: int = MAX_DOMAINS, max_placements: int = MAX_PLACEMENTS) -> PreemptionPlan | None:
    """The cheapest plan (see the module docstring) that lets `gang` of `priority` place by evicting whole
    holders of strictly lower priority inside one domain; None when there is none.  Leaves `topo` as it was."""
    lower = [h for h in holders if h.preemptible and h.priority < priority and h.key != gang.key]
    usage = {h.key: _usage(topo, h) for h in lower}
    lower = [h for h in lower if usage[h.key]]
    if not lower:
        return None
    gpus = {h.key: holder_gpus(topo, h) for h in lower}
    best: PreemptionPlan | None = None
    for candidate in _candidates(topo, gang.world_size, lower, usage, gpus)[:max_domains]:
        if best is not None and candidate.estimate[0] > best.highest_priority:
            break  # sorted by estimate: no later domain can evict lower priorities than the best plan
        plan = _plan_in(topo, gang, policy, candidate, usage, gpus, max_placements)
        if plan is not None and (best is None or plan.order() < best.order()):
            best = plan
    return best
