"""The GPU generation table: consistent with the presets' labels, link profiles and NVLink domains."""

from __future__ import annotations

import pytest

from simulations.cluster import ClusterSpec, build_cluster
from topology.config import LINK_PROFILES
from topology.hardware import GENERATIONS, cluster_generation, generation_for_product, get_generation
from topology.model import TopologyError
from topology.presets import PRESETS

PRESET_GENERATION = [("hgx-h100", "h100-sxm"), ("hgx-h200", "h200"), ("hgx-b200", "b200"),
                     ("gb200-nvl72", "gb200"), ("gke-a3", "h100-sxm"), ("aws-p5", "h100-sxm")]


@pytest.mark.parametrize(("preset", "generation"), PRESET_GENERATION, ids=[p for p, _ in PRESET_GENERATION])
def test_preset_product_label_names_its_generation(preset, generation):
    assert generation_for_product(PRESETS[preset].gpu_product).name == generation


@pytest.mark.parametrize(("preset", "generation"), PRESET_GENERATION[:4], ids=[p for p, _ in PRESET_GENERATION[:4]])
def test_link_profile_carries_the_generations_bandwidths(preset, generation):
    links, gpu = LINK_PROFILES[PRESETS[preset].link_profile], GENERATIONS[generation]
    assert links["host"].bandwidth_gbps == gpu.nvlink_gbps
    assert links["nvlink"].bandwidth_gbps == gpu.nvlink_gbps
    assert {links[r].bandwidth_gbps for r in ("leaf", "spine", "core", "cluster")} == {gpu.network_gbps}


@pytest.mark.parametrize(("preset", "generation"), PRESET_GENERATION[:4], ids=[p for p, _ in PRESET_GENERATION[:4]])
def test_nvlink_domain_size_matches_the_preset(preset, generation):
    topo = build_cluster(ClusterSpec(preset, 36), fast=False)
    assert cluster_generation(n.labels for n in topo.nodes).name == generation
    nvlink = [i for i, level in enumerate(topo.levels) if level.role == "nvlink"]
    level = nvlink[0] if nvlink else topo.host_level
    largest = max(d.gpus_total for d in topo.domains if d.level == level)
    assert largest == GENERATIONS[generation].nvlink_domain_gpus


def test_blackwell_is_faster_than_hopper_and_h200_has_more_memory():
    h100, h200, b200, gb200 = (GENERATIONS[n] for n in ("h100-sxm", "h200", "b200", "gb200"))
    assert h200.dense_bf16_tflops == h100.dense_bf16_tflops and h200.hbm_gb > h100.hbm_gb
    assert gb200.dense_bf16_tflops > b200.dense_bf16_tflops > 2 * h100.dense_bf16_tflops


def test_unknown_generation_and_figure_get_a_hint():
    with pytest.raises(TopologyError, match="did you mean 'gb200'"):
        get_generation("gb20")
    with pytest.raises(TopologyError, match="did you mean 'hbm_gb'"):
        GENERATIONS["b200"].with_overrides({"hbm_g": 1})
    assert GENERATIONS["b200"].with_overrides({"hbm_gb": 192}).hbm_gb == 192


def test_unknown_product_names_no_generation():
    assert generation_for_product("NVIDIA-A100-SXM4-80GB") is None
    assert cluster_generation([{"nvidia.com/gpu.product": "NVIDIA-A100"}, {}]) is None
