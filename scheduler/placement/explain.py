"""Why a gang does (not) fit: the binding constraint in one sentence, and a report a person can act on.

`unschedulable_reason` is the one sentence policies return (cheap: it runs on every refused attempt).
The binding constraint is checked in this order, so the first that fails is the one named:

1. GPUs per node: a pod asks for more GPUs than any schedulable node has (make pods smaller).
2. Free GPUs: fewer GPUs are free than the gang needs (wait, or free capacity).
3. Fragmentation: enough GPUs are free, but not enough nodes have a pod's worth free.
4. Required level: no domain of the `required-level` holds the gang (too small even when empty, or
   busy now).

`explain_report` (for `meshfit place --explain` and the gRPC Explain call) adds, per topology level,
free GPUs and pod slots in the best domains, who holds reservations, and, given the placement and a
runner-up (`scheduler.placement.result.explain_layout`), why the chosen layout won, axis by axis.
"""

from __future__ import annotations

from typing import Any

from scheduler.placement.capacity import allowed_nodes, constraint_levels, domain_pod_slots, pod_slots
from scheduler.placement.jobs import Gang
from topology.model import ClusterTopology, TopologyError

RESERVATION_PREFIX = "resv:"
"""Topology holding keys of reserved pod slots start with this (see `scheduler.gangs.ledger.reservation_key`)."""
BEST_DOMAINS_SHOWN = 3
"""Domains listed per level in the report."""


def _usable_nodes(gang: Gang, topo: ClusterTopology) -> list:
    allowed = allowed_nodes(gang, topo)
    return [n for n in topo.nodes if n.schedulable and (allowed is None or n.index in allowed)]


def gpus_per_node_reason(gang: Gang, topo: ClusterTopology) -> str | None:
    """The sentence when no usable node is big enough for one pod, else None."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    sizes = sorted({n.gpus_total for n in _usable_nodes(gang, topo)})
    largest = sizes[-1] if sizes else 0
    if largest >= g:
        return None
    if not sizes:
        return f"needs {gang.world_size} GPUs ({pods} pods x {g}); no schedulable node is available"
    shape = ", ".join(str(s) for s in sizes)
    example = f" (e.g. {gang.world_size // largest} pods x {largest})" if gang.world_size % largest == 0 else ""
    advice = f"; use pods of at most {largest} GPUs{example}"
    return (f"needs {gang.world_size} GPUs ({pods} pods x {g}) but no node has {g} GPUs: GPUs per node is "
            f"the binding constraint (nodes have {shape}){advice}")


def _capacity_sentence(gang: Gang, topo: ClusterTopology, slots: list[int]) -> str:
    """Explain a cluster-wide shortage, separating fragmentation from lack of GPUs."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    allowed = allowed_nodes(gang, topo)
    free = sum(n.gpus_free for n in topo.nodes if allowed is None or n.index in allowed)
    where = " inside the assigned domains" if allowed is not None else ""
    down = sum(1 for n in topo.nodes if not n.schedulable)
    down_text = f"; {down} node(s) unschedulable" if down else ""
    if free >= gang.world_size:
        with_room = sum(1 for count in slots if count)
        return (f"needs {pods} pods x {g} GPUs; {free} GPUs are free{where} but only {sum(slots)} pod(s) of {g} "
                f"GPUs fit, on {with_room} node(s) (fragmented: the free GPUs are spread over nodes){down_text}")
    return f"needs {gang.world_size} GPUs ({pods} pods x {g}); only {free} free{where}{down_text}"


def _level_sentence(gang: Gang, topo: ClusterTopology, required: int, per_domain: list[int]) -> str:
    g, pods = gang.gpus_per_pod, len(gang.pods)
    level_name = topo.levels[required].name
    name, best = _best_domain(topo, required, per_domain)
    empty = domain_pod_slots(topo, [n.gpus_total // g if n.schedulable else 0 for n in topo.nodes])
    roomiest = max((empty[d.id] for d in topo.domains if d.level == required), default=0)
    advice = (f"even empty no {level_name} domain holds more than {roomiest * g}: require an outer level or "
              f"shrink the job" if roomiest < pods else
              f"busy now: wait for capacity in one {level_name} domain, or require an outer level")
    return (f"needs {gang.world_size} GPUs ({pods} pods x {g}) in one {level_name} domain "
            f"(required); largest free {level_name} domain {name} has {best * g}; {advice}")


def _best_domain(topo: ClusterTopology, level: int, per_domain: list[int]) -> tuple[str, int]:
    """(name, pod slots) of the domain at `level` with the most slots."""
    best = max((d for d in topo.domains if d.level == level), key=lambda d: per_domain[d.id], default=None)
    return (best.name, per_domain[best.id]) if best is not None else ("-", 0)


def binding_constraint(gang: Gang, topo: ClusterTopology) -> tuple[str | None, str | None]:
    """(kind, sentence) of what stops the gang: gpus-per-node, free-gpus, fragmentation, level, required-level."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    too_big = gpus_per_node_reason(gang, topo)
    if too_big is not None:
        return "gpus-per-node", too_big
    slots = pod_slots(topo, g, allowed_nodes(gang, topo))
    if sum(slots) < pods:
        sentence = _capacity_sentence(gang, topo, slots)
        return ("fragmentation" if "fragmented" in sentence else "free-gpus"), sentence
    try:
        required, _ = constraint_levels(gang, topo)
    except TopologyError as exc:
        return "level", f"topology constraint cannot be met: {exc}"
    if required is None:
        return None, None
    per_domain = domain_pod_slots(topo, slots)
    if any(d.level >= required and per_domain[d.id] >= pods for d in topo.domains):
        return None, None
    return "required-level", _level_sentence(gang, topo, required, per_domain)


def unschedulable_reason(gang: Gang, topo: ClusterTopology) -> str | None:
    """The reason `gang` cannot be placed by a topology-aware policy, or None if it can."""
    return binding_constraint(gang, topo)[1]


def reservation_holders(topo: ClusterTopology, exclude: str | None = None,
                        nodes: set[int] | None = None) -> dict[str, int]:
    """GPUs held by reservations, per gang (largest first), optionally only on `nodes` and not `exclude`'s."""
    held: dict[str, int] = {}
    for key, (node, gpus) in topo.pods.items():
        if not key.startswith(RESERVATION_PREFIX) or (nodes is not None and node not in nodes):
            continue
        gang_key = key[len(RESERVATION_PREFIX):].rsplit("/", 1)[0]
        if gang_key != exclude:
            held[gang_key] = held.get(gang_key, 0) + gpus
    return dict(sorted(held.items(), key=lambda item: (-item[1], item[0])))


def _held_text(held: dict[str, int]) -> str:
    if not held:
        return ""
    shown = ", ".join(f"{key} ({gpus})" for key, gpus in list(held.items())[:3])
    more = f" and {len(held) - 3} more" if len(held) > 3 else ""
    return f"; {sum(held.values())} GPUs are held by reservations of {shown}{more}"


def chosen_domain(topo: ClusterTopology, node_names: list[str]) -> tuple[int, str]:
    """(level index, domain name) of the smallest domain holding every node; (-1, 'cluster') across roots."""
    indices = [topo.node_by_name[name].index for name in node_names]
    level = topo.group_level(indices)
    if level < 0:
        return -1, "cluster"
    return level, topo.domain_of(indices[0], level).name


def level_rows(gang: Gang, topo: ClusterTopology, shown: int = BEST_DOMAINS_SHOWN) -> list[dict[str, Any]]:
    """Per level (outermost first): domains, how many fit the gang, and the best `shown` by pod slots."""
    g, pods = gang.gpus_per_pod, len(gang.pods)
    per_domain = domain_pod_slots(topo, pod_slots(topo, g, allowed_nodes(gang, topo)))
    rows = []
    for level, spec in enumerate(topo.levels):
        domains = sorted(topo.domains_at(level), key=lambda d: (-per_domain[d.id], -d.gpus_free, d.name))
        rows.append({"level": spec.name, "role": spec.role, "domains": len(domains),
                     "fitting_domains": sum(1 for d in domains if per_domain[d.id] >= pods),
                     "best": [{"domain": d.name, "gpus_free": d.gpus_free, "gpus_total": d.gpus_total,
                               "pod_slots": per_domain[d.id], "fits": per_domain[d.id] >= pods}
                              for d in domains[:shown]]})
    return rows


def _schedulable_sentence(gang: Gang, topo: ClusterTopology, placement: Any | None) -> str:
    if placement is not None and getattr(placement, "placed", False):
        level, name = chosen_domain(topo, list(placement.pod_nodes))
        where = "across top-level domains (cluster tier)" if level < 0 else \
            f"in {topo.levels[level].name} domain {name}"
        return f"schedulable: {gang.world_size} GPUs placed {where}"
    g, pods = gang.gpus_per_pod, len(gang.pods)
    per_domain = domain_pod_slots(topo, pod_slots(topo, g, allowed_nodes(gang, topo)))
    for level in range(topo.host_level, -1, -1):
        fits = [d for d in topo.domains if d.level == level and per_domain[d.id] >= pods]
        if fits:
            best = max(fits, key=lambda d: (-d.gpus_free, d.name))
            return (f"schedulable: {gang.world_size} GPUs fit in one {topo.levels[level].name} domain "
                    f"({len(fits)} candidate(s), the tightest {best.name})")
    return f"schedulable: {gang.world_size} GPUs fit only across top-level domains (cluster tier)"


def explain(gang: Gang, topo: ClusterTopology, placement: Any | None = None) -> str:
    """One human sentence on whether and where the gang fits (the report's `summary`)."""
    kind, reason = binding_constraint(gang, topo)
    if reason is None and placement is not None and not placement.placed:
        kind, reason = "policy", placement.reason
    if reason is not None:
        held = reservation_holders(topo, exclude=gang.key) if kind in ("free-gpus", "required-level",
                                                                       "fragmentation") else {}
        return f"unschedulable: {reason}{_held_text(held)}"
    return _schedulable_sentence(gang, topo, placement)


def explain_report(gang: Gang, topo: ClusterTopology, placement: Any | None = None,
                   comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `--explain` document: summary, binding constraint, per-level best domains, chosen vs runner-up."""
    kind, _ = binding_constraint(gang, topo)
    if kind is None and placement is not None and not placement.placed:
        kind = "policy"
    report: dict[str, Any] = {"summary": explain(gang, topo, placement), "binding_constraint": kind,
                              "gpus_per_pod": gang.gpus_per_pod, "pods": len(gang.pods),
                              "levels": level_rows(gang, topo),
                              "reservations": reservation_holders(topo, exclude=gang.key)}
    if comparison is not None:
        report["comparison"] = comparison
    return report
