"""Spare capacity: which nodes are held back per leaf domain, and the order replacements try nodes in.

Shared by the service (`scheduler.service.lifecycle.spare_pool`, `scheduler.service.lifecycle.replacement`) and the
simulator (`simulations.recovery`), so the same code decides in both:

- `leaf_of`: a node's leaf domain, the smallest domain holding it and at least one other node
  (a leaf switch, an NVL72 rack);
- `leaf_members` / `target_of` / `pick_spares`: per leaf, ceil(fraction x nodes) spare nodes, taken from the
  highest-index eligible nodes (a fixed, predictable choice);
- `replacement_order`: candidate nodes for a lost pod, nearest domain to the gang first (longest
  common topology path), spares first among equals, then by node index;
- `parse_gang_spares`: the per-gang `meshfit.io/spares` annotation or label (0..64 spare pod slots).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from topology.model import ClusterTopology

ANNOTATION_SPARES = "meshfit.io/spares"
MAX_GANG_SPARES = 64
MAX_SPARE_FRACTION = 0.5


def leaf_of(topo: ClusterTopology, node: int) -> int:
    """The id of the smallest domain holding node index `node` and at least one other node (-1 if none)."""
    for domain in reversed(topo.nodes[node].path):
        if len(topo.domains[domain].nodes) > 1:
            return domain
    return -1


def check_spare_fraction(fraction: float) -> str:
    """"" when `fraction` is a usable spare fraction (0 <= F <= 0.5), else the one-line reason."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not math.isfinite(fraction) \
            or not 0.0 <= fraction <= MAX_SPARE_FRACTION:
        return f"--spare-fraction must be a number from 0 to {MAX_SPARE_FRACTION}, got {fraction}"
    return ""


def leaf_members(topo: ClusterTopology) -> dict[int, list[int]]:
    """Leaf id (see `leaf_of`) -> node indices in that leaf."""
    leaves: dict[int, list[int]] = {}
    for node in topo.nodes:
        leaves.setdefault(leaf_of(topo, node.index), []).append(node.index)
    return leaves


def target_of(members: int, fraction: float) -> int:
    """Spare nodes a leaf of `members` nodes keeps: ceil(fraction x members), at most all of them."""
    if fraction <= 0:
        return 0
    return min(math.ceil(fraction * members - 1e-9), members)


def pick_spares(topo: ClusterTopology, fraction: float,
                eligible: Callable[[int], bool] | None = None) -> tuple[set[int], dict[int, int]]:
    """(spare node indices, target per leaf): per leaf, the ceil(fraction x n) highest-index eligible nodes."""
    spares: set[int] = set()
    target: dict[int, int] = {}
    if fraction <= 0:
        return spares, target
    for leaf, members in leaf_members(topo).items():
        target[leaf] = target_of(len(members), fraction)
        usable = [n for n in sorted(members) if eligible is None or eligible(n)]
        spares.update(usable[max(len(usable) - target[leaf], 0):])
    return spares, target


def common_depth(topo: ClusterTopology, a: int, b: int) -> int:
    """How many topology levels nodes `a` and `b` share (longer = nearer)."""
    home, other = topo.nodes[a].path, topo.nodes[b].path
    return next((i for i, (x, y) in enumerate(zip(home, other)) if x != y), len(home))


def replacement_order(topo: ClusterTopology, home: int, candidates: Iterable[int],
                      spares: Iterable[int] = ()) -> list[int]:
    """`candidates` nearest to node `home` first (longest common path), spares first among equals, then index."""
    spare_set = set(spares)
    return sorted(candidates, key=lambda n: (-common_depth(topo, home, n), n not in spare_set, n))


def parse_gang_spares(meta: Mapping[str, Any] | None) -> int:
    """Spare pod slots a gang asks for (`meshfit.io/spares` annotation, else label); 0 when absent.

    Raises ValueError with a one-line reason for anything but a whole number from 0 to 64."""
    meta = meta or {}
    for where in ("annotations", "labels"):
        values = meta.get(where) or {}
        if isinstance(values, Mapping) and ANNOTATION_SPARES in values:
            raw = values[ANNOTATION_SPARES]
            text = str(raw).strip() if isinstance(raw, (str, int)) and not isinstance(raw, bool) else ""
            if not (text.isascii() and text.isdigit() and len(text) <= 3 and int(text) <= MAX_GANG_SPARES):
                raise ValueError(f"{ANNOTATION_SPARES}: {str(raw)[:40]!r} is not a whole number of spare pod "
                                 f"slots from 0 to {MAX_GANG_SPARES}")
            return int(text)
    return 0
