"""Explicit topology objects passed beside the nodes: Kueue / KAI `Topology` and Volcano `HyperNode`s.

Kueue (`kueue.x-k8s.io/v1beta1` or `v1alpha1`) and KAI (`kai.scheduler/v1alpha1`) both list
`spec.levels[].nodeLabel` outermost first; `kubernetes.io/hostname` is the host level.  Volcano
(`topology.volcano.sh/v1alpha1`) describes a tree of `HyperNode`s, each with a `spec.tier` (1 is
nearest the nodes) and `spec.members[]` of `type` Node or HyperNode selected by
`selector.exactMatch.name`, `selector.regexMatch.pattern` or `selector.labelMatch` (a label
selector, Node members only).  HyperNodes are turned into one synthetic node label per tier so the
ordinary label builder makes the domains.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from topology.model import TopologyError
from topology.schemes import DetectedLevel, levels_from_label_keys

KUEUE_GROUP = "kueue.x-k8s.io"
KAI_GROUP = "kai.scheduler"
VOLCANO_GROUP = "topology.volcano.sh"
HYPERNODE_LABEL_PREFIX = "topology.volcano.sh/hypernode-tier-"
"""Synthetic node-label key (plus the tier number) naming a node's HyperNode at that tier."""


def api_group(obj: Mapping[str, Any]) -> str:
    """The API group of an object (`""` for the core group)."""
    api_version = str(obj.get("apiVersion") or "")
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def is_topology_object(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is a Kueue or KAI `Topology`."""
    return obj.get("kind") == "Topology" and api_group(obj) in (KUEUE_GROUP, KAI_GROUP)


def is_hypernode(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is a Volcano `HyperNode`."""
    return obj.get("kind") == "HyperNode" and api_group(obj) == VOLCANO_GROUP


def topology_label_keys(obj: Mapping[str, Any]) -> list[str]:
    """The `spec.levels[].nodeLabel` keys of a Kueue/KAI Topology, outermost first."""
    name = (obj.get("metadata") or {}).get("name", "?")
    levels = (obj.get("spec") or {}).get("levels")
    if not isinstance(levels, list) or not levels:
        raise TopologyError(f"Topology {name}: spec.levels must be a non-empty list")
    keys = []
    for level in levels:
        key = level.get("nodeLabel") if isinstance(level, Mapping) else None
        if not key or not isinstance(key, str):
            raise TopologyError(f"Topology {name}: every spec.levels entry needs a nodeLabel")
        keys.append(key)
    return keys


def levels_from_topology(obj: Mapping[str, Any]) -> list[DetectedLevel]:
    """Levels (host excluded) from a Kueue or KAI Topology object."""
    return levels_from_label_keys(topology_label_keys(obj))


def _tier_of(hypernode: Mapping[str, Any], name: str) -> int:
    raw = (hypernode.get("spec") or {}).get("tier")
    try:
        tier = int(str(raw))
    except ValueError:
        raise TopologyError(f"HyperNode {name}: spec.tier {raw!r} is not an integer") from None
    if tier < 0:
        raise TopologyError(f"HyperNode {name}: spec.tier must not be negative")
    return tier


def _selector_matches(selector: Mapping[str, Any], name: str, labels: Mapping[str, str] | None) -> bool:
    """Volcano member selector against one candidate (labels is None for HyperNode candidates)."""
    if "exactMatch" in selector:
        return (selector["exactMatch"] or {}).get("name") == name
    if "regexMatch" in selector:
        pattern = (selector["regexMatch"] or {}).get("pattern") or ""
        try:
            return re.search(pattern, name) is not None
        except re.error:
            raise TopologyError(f"HyperNode member regex {pattern!r} is invalid") from None
    if "labelMatch" in selector and labels is not None:
        return label_selector_matches(selector["labelMatch"] or {}, labels)
    return False


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels and matchExpressions In/NotIn/Exists/DoesNotExist)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values, "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}.get(operator)
        if ok is None:
            raise TopologyError(f"label selector operator {operator!r} is not supported")
        if not ok:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def _hypernode_table(hypernodes: list[Mapping[str, Any]]) -> dict[str, tuple[int, list[Mapping[str, Any]]]]:
    table: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
    for obj in hypernodes:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise TopologyError("a HyperNode has no metadata.name")
        if name in table:
            raise TopologyError(f"duplicate HyperNode {name!r}")
        table[name] = (_tier_of(obj, name), list((obj.get("spec") or {}).get("members") or ()))
    return table


def _parents(table: dict[str, tuple[int, list[Mapping[str, Any]]]]) -> dict[str, str]:
    """HyperNode child -> parent, rejecting a child claimed by two parents."""
    parents: dict[str, str] = {}
    for parent, (_tier, members) in table.items():
        for member in members:
            if member.get("type") != "HyperNode":
                continue
            selector = member.get("selector") or {}
            exact = (selector.get("exactMatch") or {}).get("name") if "exactMatch" in selector else None
            candidates = [exact] if exact in table else [] if exact is not None else list(table)
            for child in candidates:
                if child != parent and _selector_matches(selector, child, None):
                    if parents.setdefault(child, parent) != parent:
                        raise TopologyError(f"contradictory parents: HyperNode {child!r} is a member of "
                                            f"both {parents[child]!r} and {parent!r}")
    return parents


class _NodeMemberIndex:
    """Node-type members of every HyperNode: exact names in a dict, regex/label selectors in a list."""

    def __init__(self, table: dict[str, tuple[int, list[Mapping[str, Any]]]]) -> None:
        self.exact: dict[str, list[str]] = {}
        self.other: list[tuple[str, Mapping[str, Any]]] = []
        for hn, (_tier, members) in table.items():
            for member in members:
                if member.get("type", "Node") != "Node":
                    continue
                selector = member.get("selector") or {}
                if "exactMatch" in selector:
                    self.exact.setdefault((selector["exactMatch"] or {}).get("name"), []).append(hn)
                else:
                    self.other.append((hn, selector))

    def hypernodes_of(self, node_name: str, labels: Mapping[str, str]) -> list[str]:
        """HyperNodes that list this node directly."""
        found = list(self.exact.get(node_name, ()))
        found += [hn for hn, sel in self.other if hn not in found and _selector_matches(sel, node_name, labels)]
        return found


def _node_tier_labels(table, parents: dict[str, str], direct: list[str], node_name: str) -> dict[int, str]:
    by_tier: dict[int, str] = {}
    for start in direct:
        current: str | None = start
        visited: set[str] = set()
        while current is not None and current not in visited:
            visited.add(current)
            tier = table[current][0]
            if by_tier.setdefault(tier, current) != current:
                raise TopologyError(f"contradictory parents: node {node_name} is in HyperNodes "
                                    f"{by_tier[tier]!r} and {current!r}, both tier {tier}")
            current = parents.get(current)
    return by_tier


def apply_hypernodes(hypernodes: list[Mapping[str, Any]], node_labels: dict[str, dict[str, str]]) -> list[DetectedLevel]:
    """Add one synthetic tier label per node from Volcano HyperNodes (in place); return the levels.

    `node_labels` maps node name -> its (mutable) labels.  Levels are named `tier-N`, highest tier
    (outermost) first; roles go leaf, spine, core from the lowest tier up.
    """
    table = _hypernode_table(hypernodes)
    parents = _parents(table)
    members = _NodeMemberIndex(table)
    for node_name, labels in node_labels.items():
        direct = members.hypernodes_of(node_name, labels)
        for tier, hypernode in _node_tier_labels(table, parents, direct, node_name).items():
            labels[f"{HYPERNODE_LABEL_PREFIX}{tier}"] = hypernode
    tiers = sorted({tier for tier, _members in table.values()})
    roles = ("leaf", "spine", "core")
    return [DetectedLevel(f"tier-{tier}", roles[min(i, len(roles) - 1)], (f"{HYPERNODE_LABEL_PREFIX}{tier}",))
            for i, tier in reversed(list(enumerate(tiers)))]
