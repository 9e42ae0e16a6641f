"""GPU generations: the vendor figures a step-time model needs, and which generation a cluster's nodes are.

One `GpuGeneration` per NVIDIA data-centre generation meshfit models (H100 SXM, H200 SXM, B200 in an
HGX/DGX B200 node, GB200 in a GB200 NVL72 rack).  Every figure is from the vendor's public specification;
docs/cost-model.md ("Hardware table") names the document and the figure for each.  Compute is *dense* BF16
(the datasheets print BF16 "with sparsity", twice the dense rate; the dense rate is half of it).  Link
bandwidths are GB/s per GPU per direction (the datasheets print NVLink as the bidirectional total, twice this),
the network is one 400 Gb/s NIC per GPU (ConnectX-7, 50 GB/s).

A node says its generation with the GPU feature discovery label `nvidia.com/gpu.product` (e.g.
`NVIDIA-H100-80GB-HBM3`, `NVIDIA-GB200`); `generation_for_product` maps it, `cluster_generation` takes the
product most nodes carry.  A capacity-planning candidate may override any figure (`GpuGeneration.with_overrides`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace

from topology.config import GPU_PRODUCT_LABEL
from topology.model import TopologyError
from topology.strict import unknown_name_message


@dataclass(frozen=True)
class GpuGeneration:
    """Vendor figures of one GPU generation (per GPU; bandwidths per direction)."""

    name: str
    dense_bf16_tflops: float
    """Peak dense BF16 tensor-core TFLOP/s (half the datasheet's "with sparsity" figure)."""
    hbm_gb: float
    """HBM capacity, GB."""
    hbm_tbps: float
    """HBM bandwidth, TB/s."""
    nvlink_gbps: float
    """NVLink bandwidth per GPU per direction, GB/s (half the datasheet's bidirectional figure)."""
    nvlink_domain_gpus: int
    """GPUs in one NVLink domain (8 in an HGX/DGX node, 72 in a GB200 NVL72 rack)."""
    network_gbps: float
    """Scale-out network bandwidth per GPU per direction, GB/s (400 Gb/s NIC = 50)."""

    def with_overrides(self, overrides: Mapping[str, float | int]) -> "GpuGeneration":
        """This generation with some figures replaced (TopologyError naming an unknown figure)."""
        known = {f.name for f in fields(self)} - {"name"}
        for key in overrides:
            if key not in known:
                raise TopologyError(unknown_name_message("GPU figure", key, known))
        return replace(self, **dict(overrides)) if overrides else self


GENERATIONS: dict[str, GpuGeneration] = {
    "h100-sxm": GpuGeneration("h100-sxm", 989.5, 80, 3.35, 450, 8, 50),
    "h200": GpuGeneration("h200", 989.5, 141, 4.8, 450, 8, 50),
    "b200": GpuGeneration("b200", 2250, 180, 7.7, 900, 8, 50),
    "gb200": GpuGeneration("gb200", 2500, 186, 8.0, 900, 72, 50),
}
"""Generation name -> vendor figures (sources in docs/cost-model.md)."""

DEFAULT_GENERATION = "h100-sxm"
"""The generation assumed when a node names no GPU meshfit knows (and the default trace GPU)."""

_PRODUCT_MARKERS = (("GB200", "gb200"), ("B200", "b200"), ("H200", "h200"), ("H100", "h100-sxm"))
"""Substrings of `nvidia.com/gpu.product` values, most specific first, and the generation each names."""


def get_generation(name: str) -> GpuGeneration:
    """The generation called `name`; TopologyError with a did-you-mean hint otherwise."""
    generation = GENERATIONS.get(name)
    if generation is None:
        raise TopologyError(unknown_name_message("GPU generation", name, GENERATIONS))
    return generation


def generation_for_product(product: str) -> GpuGeneration | None:
    """The generation a `nvidia.com/gpu.product` value names (None for a GPU meshfit has no figures for)."""
    upper = product.upper()
    for marker, name in _PRODUCT_MARKERS:
        if marker in upper:
            return GENERATIONS[name]
    return None


def cluster_generation(node_labels: Iterable[Mapping[str, str]]) -> GpuGeneration | None:
    """The generation of the GPU product most nodes carry (None when no node names a known one)."""
    products = Counter(labels.get(GPU_PRODUCT_LABEL, "") for labels in node_labels)
    for product, _count in products.most_common():
        generation = generation_for_product(product)
        if generation is not None:
            return generation
    return None
