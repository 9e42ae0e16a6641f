"""Link properties per topology level, with defaults per hardware profile and a config-file override.

A *role* says what kind of link a level is (`host`: inside one node, `nvlink`: a multi-node NVLink
domain, `leaf` / `spine` / `core`: the scale-out fabric, `cluster`: no common domain at all).  A
*profile* (one per preset: `hgx-h100`, `gb200-nvl72`, `gke-a3`, `aws-p5`, plus `hgx-a100` and
`hgx-b200`) gives full link properties for every role.  A config file overrides any of them by level
name or by role; the level name wins:

```yaml
profile: hgx-h100               # link defaults to start from (auto-detected when omitted)
gpu_resources: [nvidia.com/gpu, amd.com/gpu]
links:
  spine: {oversubscription: 2.0}        # the level called "spine" (or every level of role spine)
  nvlink: {bandwidth_gbps: 900, latency_us: 3}
levels:                                  # optional: explicit levels, outermost first
  - {label: example.com/pod, name: pod, role: spine}
  - {label: example.com/rack, name: rack, role: leaf}
```

Bandwidths are GB/s per GPU per direction: NVLink 4 (H100) 450, NVLink 5 (B200/GB200) 900,
InfiniBand NDR 400 Gb/s per GPU = 50 GB/s.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from topology.model import LinkTier, TopologyError
from topology.strict import StrictModel, did_you_mean, unknown_name_message, validation_message
from topology.textfile import read_text

ROLES = ("host", "nvlink", "leaf", "spine", "core", "cluster")
"""Every link role, innermost first."""

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
"""Extended-resource names counted as GPUs, first present wins."""

DEFAULT_PROFILE = "hgx-h100"
"""Profile used when nothing else says which hardware this is."""


class LinkSpec(StrictModel):
    """Full link properties of one tier (GB/s per GPU per direction, microseconds, ratio >= 1)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    bandwidth_gbps: float = Field(gt=0)
    latency_us: float = Field(ge=0)
    oversubscription: float = Field(default=1.0, ge=1.0)

    def to_tier(self) -> LinkTier:
        """The model's immutable `LinkTier`."""
        return LinkTier(self.bandwidth_gbps, self.latency_us, self.oversubscription)


class LinkOverride(StrictModel):
    """Partial link properties from a config file; unset fields keep the profile's value."""

    bandwidth_gbps: float | None = Field(default=None, gt=0)
    latency_us: float | None = Field(default=None, ge=0)
    oversubscription: float | None = Field(default=None, ge=1.0)

    def apply(self, base: LinkSpec) -> LinkSpec:
        """`base` with this override's set fields replaced."""
        return base.model_copy(update=self.model_dump(exclude_none=True))


class LevelOverride(StrictModel):
    """An explicit level from a config file: the node label, and optionally its name and role."""

    label: str = Field(min_length=1)
    name: str | None = None
    role: str | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str | None) -> str | None:
        if role is not None and role not in ROLES:
            raise ValueError(unknown_name_message("role", role, ROLES))
        return role


def _profile(host: tuple, nvlink: tuple, leaf: tuple, spine: tuple, core: tuple, cluster: tuple) -> dict[str, LinkSpec]:
    rows = {"host": host, "nvlink": nvlink, "leaf": leaf, "spine": spine, "core": core, "cluster": cluster}
    return {role: LinkSpec(bandwidth_gbps=bw, latency_us=lat) for role, (bw, lat) in rows.items()}


LINK_PROFILES: dict[str, dict[str, LinkSpec]] = {
    # NVLink 4 inside the node (450 GB/s/dir), ConnectX-7 NDR 400 Gb/s per GPU on a fat tree.
    "hgx-h100": _profile((450, 2.0), (450, 2.5), (50, 5.0), (50, 7.0), (50, 10.0), (50, 15.0)),
    # NVLink 5 across the 72-GPU rack (900 GB/s/dir), NDR 400 Gb/s per GPU between racks.
    "gb200-nvl72": _profile((900, 2.0), (900, 3.0), (50, 5.0), (50, 7.0), (50, 10.0), (50, 15.0)),
    # A3 Mega: NVLink 4 in the VM, GPUDirect-TCPXO 8 x 200 Gb/s = 25 GB/s per GPU.
    "gke-a3": _profile((450, 2.0), (450, 2.5), (25, 8.0), (25, 12.0), (25, 16.0), (25, 25.0)),
    # p5.48xlarge: NVLink 4 in the instance, EFA 3,200 Gb/s = 50 GB/s per GPU, SRD latencies.
    "aws-p5": _profile((450, 2.0), (450, 2.5), (50, 12.0), (50, 16.0), (50, 20.0), (50, 30.0)),
    # NVLink 3 (300 GB/s/dir), HDR 200 Gb/s per GPU.
    "hgx-a100": _profile((300, 2.0), (300, 2.5), (25, 5.0), (25, 7.0), (25, 10.0), (25, 15.0)),
    # NVLink 5 inside the node, NDR 400 Gb/s per GPU.
    "hgx-b200": _profile((900, 2.0), (900, 2.5), (50, 5.0), (50, 7.0), (50, 10.0), (50, 15.0)),
}
"""Profile name -> role -> full link properties."""

_PRODUCT_PROFILES = (("GB200", "gb200-nvl72"), ("GB300", "gb200-nvl72"), ("B200", "hgx-b200"),
                     ("A100", "hgx-a100"), ("H100", "hgx-h100"), ("H200", "hgx-h100"))
_SCHEME_PROFILES = {"gke": "gke-a3", "aws": "aws-p5"}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU feature discovery label naming the GPU model, used to pick a profile."""


class TopologyConfig(StrictModel):
    """What a config file may set: link profile, per-level/role link overrides, GPU resources, levels."""

    profile: str | None = None
    gpu_resources: list[str] = Field(default_factory=lambda: list(DEFAULT_GPU_RESOURCES), min_length=1)
    links: dict[str, LinkOverride] = Field(default_factory=dict)
    levels: list[LevelOverride] | None = None

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, profile: str | None) -> str | None:
        if profile is not None and profile not in LINK_PROFILES:
            raise ValueError(unknown_name_message("link profile", profile, LINK_PROFILES))
        return profile

    def check_link_keys(self, level_names: list[str], level_roles: list[str]) -> None:
        """TopologyError (with a did-you-mean hint) for a `links` key that is neither a level of this cluster
        nor a role (a role this cluster lacks, e.g. `core` on a small cluster, is fine: one fabric
        config serves clusters of several sizes; a typo such as `lef` is not)."""
        names = set(level_names) | {"host", "cluster"}
        roles = set(level_roles) | {"host", "cluster"}
        for key in self.links:
            if key in names or key in roles or key in ROLES:
                continue
            hint = did_you_mean(key, names | roles)
            where = "no level or role of this cluster"
            raise TopologyError(f"link override {key!r} names {where}{hint} (levels: {', '.join(level_names)}; "
                                f"roles: {', '.join(sorted(roles))})")

    def link_for(self, profile: str, level_name: str, role: str) -> LinkTier:
        """Link tier of a level: the profile's value for its role, then the role override, then the name's."""
        table = LINK_PROFILES[profile]
        spec = table.get(role) or table["leaf"]
        for key in (role, level_name):
            override = self.links.get(key)
            if override is not None:
                spec = override.apply(spec)
        return spec.to_tier()


def detect_profile(node_labels: list[dict[str, str]], scheme: str) -> str:
    """Pick a link profile from the GPU product label most nodes carry, else from the label scheme."""
    products = Counter(labels.get(GPU_PRODUCT_LABEL, "") for labels in node_labels)
    for product, _count in products.most_common():
        upper = product.upper()
        for marker, profile in _PRODUCT_PROFILES:
            if marker in upper:
                return _SCHEME_PROFILES.get(scheme, profile) if marker in ("H100", "H200") else profile
    return _SCHEME_PROFILES.get(scheme, DEFAULT_PROFILE)


def parse_config(data: Any) -> TopologyConfig:
    """Validate a config mapping (already decoded); TopologyError with a one-line message if invalid."""
    if data is None:
        return TopologyConfig()
    if not isinstance(data, dict):
        raise TopologyError("topology config must be a mapping")
    try:
        return TopologyConfig.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(f"invalid topology config: {validation_message(exc, TopologyConfig, 'config')}") from None


def load_config(path: str | Path) -> TopologyConfig:
    """Read a YAML or JSON config file into a `TopologyConfig`."""
    import yaml

    text = read_text(path, "config", TopologyError)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"config {path} is not valid YAML/JSON: {' '.join(str(exc).split())}") from None
    try:
        return parse_config(data)
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from None


def as_config(config: TopologyConfig | dict | str | Path | None) -> TopologyConfig:
    """Accept a config object, a mapping, a file path or None and return a `TopologyConfig`."""
    if isinstance(config, TopologyConfig):
        return config
    if isinstance(config, (str, Path)):
        return load_config(config)
    return parse_config(config)
