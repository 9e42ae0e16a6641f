"""A plan candidate's `gpu:` block: which GPU generation its nodes are, and any vendor figure replaced.

```yaml
gpu:
  generation: gb200          # h100-sxm, h200, b200, gb200 (default: what the nodes' nvidia.com/gpu.product says)
  dense_bf16_tflops: 2250    # any figure of topology.hardware.GpuGeneration may be replaced
  mfu: 0.35                  # model FLOPs utilisation on this candidate (default: the run's, 0.40)
```

`nvlink_gbps` and `network_gbps` (the generation's, or the ones given here) become the candidate's link
bandwidths (roles host and nvlink; leaf, spine, core and cluster) unless its `links:` block sets a bandwidth
for that role itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from topology.hardware import GENERATIONS, DEFAULT_GENERATION, get_generation
from topology.strict import StrictModel, unknown_name_message

NVLINK_ROLES = ("host", "nvlink")
"""Link roles that run over NVLink."""
NETWORK_ROLES = ("leaf", "spine", "core", "cluster")
"""Link roles that run over the scale-out network."""


class GpuChoice(StrictModel):
    """GPU generation of a candidate and the figures it replaces."""

    generation: str | None = None
    dense_bf16_tflops: float | None = Field(default=None, gt=0)
    hbm_gb: float | None = Field(default=None, gt=0)
    hbm_tbps: float | None = Field(default=None, gt=0)
    nvlink_gbps: float | None = Field(default=None, gt=0)
    nvlink_domain_gpus: int | None = Field(default=None, ge=1)
    network_gbps: float | None = Field(default=None, gt=0)
    mfu: float | None = Field(default=None, gt=0, le=1)

    @field_validator("generation")
    @classmethod
    def _known(cls, name: str | None) -> str | None:
        if name is not None and name not in GENERATIONS:
            raise ValueError(unknown_name_message("GPU generation", name, GENERATIONS))
        return name

    def figures(self) -> tuple[tuple[str, float], ...]:
        """The vendor figures this block replaces, as (name, value) pairs."""
        data = self.model_dump(exclude_none=True, exclude={"generation", "mfu"})
        return tuple(sorted(data.items()))

    def link_bandwidths(self, preset_generation: str | None, links: dict[str, Any]) -> dict[str, dict[str, float]]:
        """Link overrides that give the candidate its GPUs' NVLink and network bandwidth (roles `links` already
        gives a bandwidth are left alone)."""
        base = get_generation(self.generation or preset_generation or DEFAULT_GENERATION)
        nvlink = self.nvlink_gbps or base.nvlink_gbps
        network = self.network_gbps or base.network_gbps
        result: dict[str, dict[str, float]] = {}
        for roles, bandwidth in ((NVLINK_ROLES, nvlink), (NETWORK_ROLES, network)):
            for role in roles:
                if links.get(role, {}).get("bandwidth_gbps") is None:
                    result[role] = {"bandwidth_gbps": float(bandwidth)}
        return result
