"""Node-label schemes: which label keys make which topology levels, and auto-detection.

No standard exists (KEP-4962 closed), so each vendor's keys are normalised here to named levels,
outermost first, each with a *role* (`core`, `spine`, `leaf`, `nvlink`, `host`) that selects default
link properties.  Detection picks the scheme whose own keys most nodes carry; within it only the
levels whose keys appear on at least one node are kept.  NVLink-domain keys (`nvidia.com/gpu.clique`
and the scheme's own) form one optional `nvlink` level just above the host.

Topograph's two generations normalise to the same levels: old
`network.topology.nvidia.com/{core|datacenter, spine, leaf|block, accelerator}` and new
`fabric.topograph.run/tier-N` (tier 0 is the switch nearest the node; any depth) plus
`accelerator.topograph.run/domain`.  Tier 0 is `leaf`, 1 `spine`, 2 `core`, deeper tiers `tier-N`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""NVIDIA GPU operator / DRA driver NVLink partition label, `<ClusterUUID>.<CliqueID>`."""

TOPOGRAPH_TIER_PREFIX = "fabric.topograph.run/tier-"
TOPOGRAPH_ACCELERATOR = "accelerator.topograph.run/domain"
TOPOGRAPH_SUBDOMAIN = "accelerator.topograph.run/sub-domain"
_OLD_TOPOGRAPH = "network.topology.nvidia.com/"
_OLD_TOPOGRAPH_BY_TIER = {0: ("leaf", "block"), 1: ("spine",), 2: ("core", "datacenter")}
_TIER_NAMES = {0: "leaf", 1: "spine", 2: "core"}
_TIER_RE = re.compile(re.escape(TOPOGRAPH_TIER_PREFIX) + r"(\d+)$")


@dataclass(frozen=True)
class SchemeLevel:
    """One level a scheme can produce: its name, role and label keys (first present wins).

    `per_host` marks a level expected to hold one node per domain (GKE's physical host); it is kept
    only when some domain holds more than one node, since otherwise it repeats the host level.
    """

    name: str
    role: str
    keys: tuple[str, ...]
    per_host: bool = False


@dataclass(frozen=True)
class LabelScheme:
    """A vendor label scheme: fabric levels outermost first, plus its own NVLink-domain keys."""

    name: str
    levels: tuple[SchemeLevel, ...]
    nvlink_keys: tuple[str, ...] = ()
    owns_key: Callable[[str], bool] | None = None

    def owns(self, key: str) -> bool:
        """Whether `key` is one of this scheme's own label keys (used for detection)."""
        if self.owns_key is not None and self.owns_key(key):
            return True
        return key in self.nvlink_keys or any(key in level.keys for level in self.levels)


def _topograph_owns(key: str) -> bool:
    return key.startswith((TOPOGRAPH_TIER_PREFIX, _OLD_TOPOGRAPH, "accelerator.topograph.run/"))


SCHEMES: tuple[LabelScheme, ...] = (
    LabelScheme("topograph", (), (TOPOGRAPH_ACCELERATOR, _OLD_TOPOGRAPH + "accelerator"), _topograph_owns),
    LabelScheme("gke", (
        SchemeLevel("block", "spine", ("cloud.google.com/gce-topology-block",)),
        SchemeLevel("subblock", "leaf", ("cloud.google.com/gce-topology-subblock",)),
        SchemeLevel("machine", "host", ("cloud.google.com/gce-topology-host",), per_host=True),
    )),
    LabelScheme("aws", (
        SchemeLevel("layer-1", "core", ("topology.k8s.aws/network-node-layer-1",)),
        SchemeLevel("layer-2", "spine", ("topology.k8s.aws/network-node-layer-2",)),
        SchemeLevel("layer-3", "leaf", ("topology.k8s.aws/network-node-layer-3",)),
    ), ("topology.k8s.aws/ultraserver-id",)),
    LabelScheme("oci", (
        SchemeLevel("network-block", "spine", ("oci.oraclecloud.com/host.network_block_id",)),
        SchemeLevel("rack", "leaf", ("oci.oraclecloud.com/host.rack_id",)),
    )),
    LabelScheme("coreweave", (
        SchemeLevel("fabric", "core", ("ib.coreweave.cloud/fabric",)),
        SchemeLevel("superpod", "spine", ("ib.coreweave.cloud/superpod",)),
        SchemeLevel("leafgroup", "leaf", ("ib.coreweave.cloud/leafgroup",)),
    ), ("ds.coreweave.com/nvlink.domain",)),
)
"""Every known scheme, in tie-break order."""

CLIQUE_SCHEME = LabelScheme("nvidia-clique", ())
"""Used when no scheme's own keys are present but nodes carry `nvidia.com/gpu.clique`."""

NO_SCHEME = LabelScheme("none", ())
"""Used when nodes carry no topology labels at all: every node is its own top-level domain."""

SCHEMES_BY_NAME = {s.name: s for s in (*SCHEMES, CLIQUE_SCHEME, NO_SCHEME)}


@dataclass(frozen=True)
class DetectedLevel:
    """A level chosen for a cluster: name, role and the label keys that give its value."""

    name: str
    role: str
    keys: tuple[str, ...]


def topograph_levels(keys_present: set[str]) -> list[SchemeLevel]:
    """Fabric levels for Topograph, outermost first, as deep as the deepest `tier-N` present."""
    tiers = [int(m.group(1)) for m in map(_TIER_RE.match, keys_present) if m]
    deepest = max([2, *tiers])
    levels = []
    for tier in range(deepest, -1, -1):
        keys = (f"{TOPOGRAPH_TIER_PREFIX}{tier}",) + tuple(
            _OLD_TOPOGRAPH + suffix for suffix in _OLD_TOPOGRAPH_BY_TIER.get(tier, ()))
        role = "core" if tier >= 2 else _TIER_NAMES[tier]
        levels.append(SchemeLevel(_TIER_NAMES.get(tier, f"tier-{tier}"), role, keys))
    return levels


def detect_scheme(node_labels: list[dict[str, str]]) -> LabelScheme:
    """The scheme whose own keys the most nodes carry (ties go to table order)."""
    owners_by_key: dict[str, frozenset[str]] = {}
    counts: Counter[str] = Counter()
    for labels in node_labels:
        owners: set[str] = set()
        for key in labels:
            found = owners_by_key.get(key)
            if found is None:
                found = owners_by_key[key] = frozenset(s.name for s in SCHEMES if s.owns(key))
            owners.update(found)
        counts.update(owners)
    best = max(SCHEMES, key=lambda s: (counts[s.name], -SCHEMES.index(s)))
    if counts[best.name]:
        return best
    if any(CLIQUE_LABEL in labels for labels in node_labels):
        return CLIQUE_SCHEME
    return NO_SCHEME


def _keys_present(node_labels: Iterable[dict[str, str]]) -> set[str]:
    present: set[str] = set()
    for labels in node_labels:
        present.update(key for key, value in labels.items() if value)
    return present


def _shared_by_two(key: str, node_labels: list[dict[str, str]]) -> bool:
    seen: set[str] = set()
    for labels in node_labels:
        value = labels.get(key)
        if value:
            if value in seen:
                return True
            seen.add(value)
    return False


def scheme_levels(scheme: LabelScheme, node_labels: list[dict[str, str]]) -> list[DetectedLevel]:
    """The levels of `scheme` whose keys appear on at least one node, outermost first (host excluded)."""
    present = _keys_present(node_labels)
    candidates = topograph_levels(present) if scheme.name == "topograph" else list(scheme.levels)
    candidates.append(SchemeLevel("nvlink", "nvlink", (*scheme.nvlink_keys, CLIQUE_LABEL)))
    if scheme.name == "topograph":
        candidates.append(SchemeLevel("nvlink-subdomain", "nvlink", (TOPOGRAPH_SUBDOMAIN,)))
    chosen = []
    for level in candidates:
        keys = [k for k in level.keys if k in present]
        if not keys:
            continue
        if level.per_host and not any(_shared_by_two(k, node_labels) for k in keys):
            continue
        ordered = (*keys, *(k for k in level.keys if k not in present))
        chosen.append(DetectedLevel(level.name, level.role, ordered))
    return chosen


def detect_levels(node_labels: list[dict[str, str]]) -> tuple[str, list[DetectedLevel]]:
    """Auto-detect the scheme and its levels from the nodes' labels: (scheme name, levels)."""
    scheme = detect_scheme(node_labels)
    return scheme.name, scheme_levels(scheme, node_labels)


_KNOWN_KEYS: dict[str, tuple[str, str]] = {
    key: (level.name, level.role) for scheme in SCHEMES for level in scheme.levels for key in level.keys}
_KNOWN_KEYS.update({key: ("nvlink", "nvlink") for scheme in SCHEMES for key in scheme.nvlink_keys})
_KNOWN_KEYS.update({CLIQUE_LABEL: ("nvlink", "nvlink"), TOPOGRAPH_SUBDOMAIN: ("nvlink-subdomain", "nvlink")})
for _level in topograph_levels({f"{TOPOGRAPH_TIER_PREFIX}{n}" for n in range(8)}):
    for _key in _level.keys:
        _KNOWN_KEYS[_key] = (_level.name, _level.role)

_ROLE_WORDS = (("nvlink", "nvlink"), ("clique", "nvlink"), ("accelerator", "nvlink"), ("ultraserver", "nvlink"),
               ("rack", "leaf"), ("leaf", "leaf"), ("subblock", "leaf"), ("tor", "leaf"),
               ("spine", "spine"), ("block", "spine"), ("pod", "spine"),
               ("core", "core"), ("datacenter", "core"), ("zone", "core"), ("region", "core"))
_POSITION_ROLES = ("leaf", "spine", "core")


def name_and_role_for_key(key: str, depth_from_inside: int) -> tuple[str, str]:
    """Level name and role for an explicitly listed label key (known key, else derived from the key)."""
    if key in _KNOWN_KEYS:
        return _KNOWN_KEYS[key]
    short = key.rsplit("/", 1)[-1]
    short = re.sub(r"^(topology|network)[-._]", "", short) or short
    lowered = short.lower()
    for word, role in _ROLE_WORDS:
        if word in lowered:
            return short, role
    return short, _POSITION_ROLES[min(depth_from_inside, len(_POSITION_ROLES) - 1)]


def levels_from_label_keys(keys: list[str]) -> list[DetectedLevel]:
    """Levels for an explicit, outermost-first list of label keys (host keys dropped, names made unique)."""
    from topology.builder import HOST_LABEL, HOST_LEVEL

    keys = [k for k in keys if k != HOST_LABEL]
    levels: list[DetectedLevel] = []
    used = {HOST_LEVEL, "cluster"}
    for position, key in enumerate(keys):
        name, role = name_and_role_for_key(key, len(keys) - 1 - position)
        unique, n = name, 2
        while unique in used:
            unique, n = f"{name}-{n}", n + 1
        used.add(unique)
        levels.append(DetectedLevel(unique, role, (key,)))
    return levels
