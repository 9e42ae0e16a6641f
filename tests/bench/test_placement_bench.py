"""Placement speed and memory (pytest-benchmark): run with
`MESHFIT_FULL_TESTS=1 python -m pytest tests/bench/test_placement_bench.py -n 0 --benchmark-enable`.

Targets (issue 3): a 1,024-GPU gang (tp=8, pp=8, dp=16) on a 16,384-GPU hgx-h100 cluster at 60% random
occupancy and a tp=16 job on gb200-nvl72, median < 50 ms, peak memory < 500 MB; plus scaling 1k -> 64k GPUs.
Peak memory (tracemalloc) is stored in each benchmark's extra_info and printed.  The scaling test runs
256 -> 2k GPUs by default (smoke) and 1k -> 64k under `MESHFIT_FULL_TESTS=1`.
"""

from __future__ import annotations

import tracemalloc

import pytest

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot
from tests.sizes import pick
from topology.generator import generate_cluster

MEMORY_BUDGET_BYTES = 500 * 2**20


def _gang(tp: int, pp: int, dp: int, gpus_per_pod: int) -> Gang:
    par = Parallelism(tp=tp, pp=pp, dp=dp)
    pods = par.world_size // gpus_per_pod
    return Gang("bench", f"tp{tp}-pp{pp}-dp{dp}", tuple(PodSlot(i, f"p{i}", gpus_per_pod) for i in range(pods)), par)


def _peak_bytes(gang: Gang, topo) -> int:
    tracemalloc.start()
    try:
        place(gang, topo, "meshfit")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _run(benchmark, gang: Gang, topo) -> None:
    place(gang, topo, "meshfit")  # warm the per-topology caches, as a long-running service would
    peak = _peak_bytes(gang, topo)
    benchmark.extra_info["peak_bytes"] = peak
    placement = benchmark(place, gang, topo, "meshfit")
    print(f"\n{gang.name} on {topo.gpus_total} GPUs: peak {peak / 2**20:.1f} MiB, status {placement.status}")
    assert placement.placed
    assert peak < MEMORY_BUDGET_BYTES


@pytest.fixture(scope="module")
def hgx_16k():
    return generate_cluster("hgx-h100", 2048, seed=7, used_fraction=0.6)


def test_1024_gpu_3d_gang_on_16k_hgx_at_60_percent(benchmark, hgx_16k):
    _run(benchmark, _gang(8, 8, 16, 8), hgx_16k)


def test_tp16_job_on_gb200_nvl72(benchmark):
    topo = generate_cluster("gb200-nvl72", 2304, seed=7, used_fraction=0.6)
    _run(benchmark, _gang(16, 4, 8, 4), topo)


SCALING_GPUS = pick([256, 512, 1024, 2048], [1024, 4096, 16384, 65536])
"""Cluster sizes of the scaling test: smoke sizes by default, 1k -> 64k GPUs with MESHFIT_FULL_TESTS=1."""


@pytest.mark.parametrize("gpus", SCALING_GPUS, ids=lambda g: f"{g // 1024}k-gpus" if g >= 1024 else f"{g}-gpus")
def test_scaling_with_cluster_size(benchmark, gpus):
    topo = generate_cluster("hgx-h100", gpus // 8, seed=3, used_fraction=0.6)
    _run(benchmark, _gang(8, 4, min(gpus // 256, 16), 8), topo)
