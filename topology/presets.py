"""Cluster presets: realistic GPU node types, their label layouts and their default link properties.

- `hgx-h100`: 8 x H100 per node, NVLink island = node, DGX SuperPOD-like 32-node scalable units
  (one leaf group each), spine groups of 4 SUs, a core tier once there is more than one spine group;
  labelled with the current Topograph keys `fabric.topograph.run/tier-{0,1,2}`.
- `gb200-nvl72`: 4 x GB200 per node, 18 nodes per NVLink domain (`nvidia.com/gpu.clique`), leaf
  groups of 8 racks, spine groups of 4 leaf groups, core when larger; older Topograph keys
  `network.topology.nvidia.com/{leaf,spine,core}`.
- `hgx-h200`, `hgx-b200`: the `hgx-h100` layout with 8 x H200 (NVLink 4) or 8 x B200 (NVLink 5) per node.
- `gke-a3`: 8 x H100 (a3-megagpu-8g), `cloud.google.com/gce-topology-{block,subblock,host}`.
- `aws-p5`: 8 x H100 (p5.48xlarge), `topology.k8s.aws/network-node-layer-{1,2,3}` (1 outermost).
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.config import LINK_PROFILES, LinkSpec
from topology.model import TopologyError


@dataclass(frozen=True)
class PresetLevel:
    """One label a preset writes: key, nodes per domain, value template, and when it is written.

    The template may use `{i}` (domain index), `{hex8}`, `{hex16}`, `{hex17}` and `{uuid}` (stable
    pseudo-random ids); the label is only written when the cluster has more than `min_nodes` nodes.
    """

    label: str
    nodes_per_domain: int
    value: str
    min_nodes: int = 0


@dataclass(frozen=True)
class Preset:
    """A node type and its topology layout, outermost label first."""

    name: str
    description: str
    gpus_per_node: int
    gpu_product: str
    instance_type: str
    architecture: str
    cpu: str
    memory: str
    node_name: str
    levels: tuple[PresetLevel, ...]
    link_profile: str
    extra_labels: tuple[tuple[str, str], ...] = ()

    @property
    def links(self) -> dict[str, LinkSpec]:
        """Default link properties per role for this preset."""
        return LINK_PROFILES[self.link_profile]


_TOPOGRAPH_NEW = "fabric.topograph.run/tier-"
_TOPOGRAPH_OLD = "network.topology.nvidia.com/"

_SUPERPOD_LEVELS = (PresetLevel(_TOPOGRAPH_NEW + "2", 0, "core-{i}", min_nodes=128),
                    PresetLevel(_TOPOGRAPH_NEW + "1", 128, "spine-group-{i:02d}"),
                    PresetLevel(_TOPOGRAPH_NEW + "0", 32, "su-{i:03d}"))
"""The DGX SuperPOD fabric of the HGX presets: 32-node scalable units, spine groups of 4 SUs, a core."""

PRESETS: dict[str, Preset] = {
    "hgx-h100": Preset(
        "hgx-h100", "DGX H100 SuperPOD-like: 32-node scalable units, spine groups of 4 SUs, core",
        8, "NVIDIA-H100-80GB-HBM3", "dgx-h100", "amd64", "224", "2063937852Ki", "dgx-h100-{i:04d}",
        _SUPERPOD_LEVELS,
        "hgx-h100"),
    "hgx-h200": Preset(
        "hgx-h200", "DGX H200 SuperPOD-like: the hgx-h100 layout with 8 x H200 141 GB per node",
        8, "NVIDIA-H200", "dgx-h200", "amd64", "224", "2063937852Ki", "dgx-h200-{i:04d}",
        _SUPERPOD_LEVELS,
        "hgx-h100"),
    "hgx-b200": Preset(
        "hgx-b200", "DGX B200 SuperPOD-like: the hgx-h100 layout with 8 x B200 (NVLink 5) per node",
        8, "NVIDIA-B200", "dgx-b200", "amd64", "224", "2063937852Ki", "dgx-b200-{i:04d}",
        _SUPERPOD_LEVELS,
        "hgx-b200"),
    "gb200-nvl72": Preset(
        "gb200-nvl72", "GB200 NVL72 racks: 18 x 4-GPU trays per NVLink domain, 8-rack leaf groups",
        4, "NVIDIA-GB200", "gb200-nvl72-tray", "arm64", "144", "899653280Ki", "gb200-r{rack:03d}-n{slot:02d}",
        (PresetLevel(_TOPOGRAPH_OLD + "core", 0, "core-{i}", min_nodes=576),
         PresetLevel(_TOPOGRAPH_OLD + "spine", 576, "spine-{i:02d}"),
         PresetLevel(_TOPOGRAPH_OLD + "leaf", 144, "leaf-{i:03d}"),
         PresetLevel("nvidia.com/gpu.clique", 18, "{uuid}.32766")),
        "gb200-nvl72"),
    "gke-a3": Preset(
        "gke-a3", "GKE A3 Mega (a3-megagpu-8g): blocks of 8 sub-blocks of 16 hosts",
        8, "NVIDIA-H100-80GB-HBM3", "a3-megagpu-8g", "amd64", "208", "1919716324Ki",
        "gke-a3-mega-np-0-{pool}-{hex4}",
        (PresetLevel("cloud.google.com/gce-topology-block", 128, "{hex16}"),
         PresetLevel("cloud.google.com/gce-topology-subblock", 16, "{hex16}"),
         PresetLevel("cloud.google.com/gce-topology-host", 1, "{hex16}")),
        "gke-a3", (("cloud.google.com/gke-accelerator", "nvidia-h100-mega-80gb"),
                   ("cloud.google.com/gke-nodepool", "a3-mega-np-0"))),
    "aws-p5": Preset(
        "aws-p5", "EKS p5.48xlarge: network node layers of 256 / 64 / 16 instances",
        8, "NVIDIA-H100-80GB-HBM3", "p5.48xlarge", "amd64", "192", "2097152000Ki", "ip-10-{b}-{c}-{d}.ec2.internal",
        (PresetLevel("topology.k8s.aws/network-node-layer-1", 256, "nn-{hex17}"),
         PresetLevel("topology.k8s.aws/network-node-layer-2", 64, "nn-{hex17}"),
         PresetLevel("topology.k8s.aws/network-node-layer-3", 16, "nn-{hex17}")),
        "aws-p5", (("topology.kubernetes.io/zone", "us-east-1a"), ("eks.amazonaws.com/nodegroup", "p5"))),
}
"""Preset name -> preset (layout, node type and `links`, the default link properties per role)."""


def get_preset(name: str) -> Preset:
    """The preset called `name`; TopologyError listing the known ones otherwise."""
    preset = PRESETS.get(name)
    if preset is None:
        raise TopologyError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return preset
