"""Layouts where an earlier admission pinned every pod to its own domain (`TopologyConstraint.pod_domains`).

Kueue TAS assigns a gang to topology domains and, pod by pod, gives each a nodeSelector for its domain in
rank order (its TopologyUngater: rank i goes to the i-th domain slot, domains in order, each repeated by its
pod count).  Once ungated the pod cannot go anywhere else, so its domain is a fact, not a preference: a pod
pinned to a host stays on that host, and the pods pinned to a larger domain (a leaf, a block) are placed
inside it by the policy as one sub-gang.  Pods keep their indices, so their rank blocks are Kueue's order.
"""

from __future__ import annotations

from collections import OrderedDict

from scheduler.placement.jobs import Gang, Parallelism, PodSlot, TopologyConstraint
from scheduler.placement.policy import PlacementPolicy
from scheduler.placement.result import Assignment
from topology.model import ClusterTopology, TopologyError

HOLD_PREFIX = "pinned:"


def _on_host(topo: ClusterTopology, host: str, indices: list[int], gpus: int) -> list[int] | str:
    node = topo.node_by_name[host]
    need = len(indices) * gpus
    if not node.schedulable:
        return f"pod(s) {_listed(indices)} are pinned to node {host}, which is not schedulable ({node.unschedulable_reason})"
    if node.gpus_free < need:
        return (f"pod(s) {_listed(indices)} are pinned to node {host}, which has {node.gpus_free} free GPU(s) of "
                f"the {need} they need")
    return [node.index] * len(indices)


def _in_domain(gang: Gang, topo: ClusterTopology, policy: PlacementPolicy, domain: str,
               indices: list[int]) -> list[int] | str:
    if not any(d.name == domain for d in topo.domains):
        return f"pod(s) {_listed(indices)} are pinned to domain {domain}, which is not in the cluster's topology"
    gpus = gang.gpus_per_pod
    sub = Gang(gang.namespace, gang.name, tuple(PodSlot(j, gang.pods[i].name, gpus) for j, i in enumerate(indices)),
               Parallelism(tp=max(gpus, 1), dp=len(indices)), constraint=TopologyConstraint(assigned_domains=(domain,)),
               priority=gang.priority)
    assignment = policy.assign(sub, topo)
    if assignment.pod_nodes is None:
        return f"pod(s) {_listed(indices)} are pinned to domain {domain}: {assignment.reason or 'they do not fit'}"
    return list(assignment.pod_nodes)


def _listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices[:8])) + (f" (+{len(indices) - 8})" if len(indices) > 8 else "")


def assign_in_pod_domains(gang: Gang, topo: ClusterTopology, policy: PlacementPolicy) -> Assignment:
    """Every pod inside its pinned domain (see the module docstring), or why not; never mutates `topo` for good."""
    domains = gang.constraint.pod_domains
    if len(domains) != len(gang.pods):
        return Assignment.unschedulable(f"{len(domains)} pinned domains for {len(gang.pods)} pods")
    groups: OrderedDict[str, list[int]] = OrderedDict()
    for index, domain in enumerate(domains):
        groups.setdefault(domain, []).append(index)
    nodes: list[int] = [0] * len(gang.pods)
    held: list[str] = []
    try:
        for domain, indices in groups.items():
            found = (_on_host(topo, domain, indices, gang.gpus_per_pod) if domain in topo.node_by_name
                     else _in_domain(gang, topo, policy, domain, indices))
            if isinstance(found, str):
                return Assignment.unschedulable(f"Kueue's assignment cannot be honoured now: {found}")
            for index, node in zip(indices, found):  # held while the next domains are placed
                nodes[index] = node
                key = f"{HOLD_PREFIX}{gang.key}/{index}"
                topo.add_pod(key, topo.nodes[node].name, gang.gpus_per_pod)
                held.append(key)
    except TopologyError as exc:
        return Assignment.unschedulable(f"Kueue's assignment cannot be honoured now: {exc}")
    finally:
        for key in held:
            topo.remove_pod(key)
    return Assignment(tuple(nodes))
