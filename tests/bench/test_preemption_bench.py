"""Preemption planning speed on a full 10,000-GPU cluster (pytest-benchmark): run with
`python -m pytest tests/bench/test_preemption_bench.py -n 0 --benchmark-enable` (`-n 0`: pytest-benchmark
does not time under xdist workers).

1,250 hgx-h100 nodes (core / spine / leaf / host), every GPU held by one of ~256 whole-node gangs of
1-16 nodes with mixed priorities; a preemptor of 8, 64 or 256 pods x 8 GPUs plans which whole gangs to
evict.  Target: well under the 1 s sweeper period (the plan runs under the state lock); the time is printed
and measured by the benchmark, never asserted (a shared 2-core box is no clock).
"""

from __future__ import annotations

import random
import time

import pytest

from scheduler.placement.engine import place
from scheduler.placement.jobs import Gang, Parallelism, PodSlot
from scheduler.gangs.preemption import Holder, plan_preemption
from topology.generator import generate_cluster

@pytest.fixture(scope="module")
def full_10k():
    topo = generate_cluster("hgx-h100", 1250, seed=7, used_fraction=0.0)
    rng = random.Random(1)
    holders, start = [], 0
    while start < len(topo.nodes):
        size, priority = rng.choice([1, 1, 2, 4, 8, 16]), rng.choice([0, 10, 20, 50, 100, 1000])
        keys = []
        for node in topo.nodes[start:start + size]:
            key = f"pod:bench/g{len(holders)}-{node.index}"
            topo.add_pod(key, node.name, node.gpus_free)
            keys.append(key)
        holders.append(Holder(f"bench/g{len(holders)}", priority, tuple(keys)))
        start += size
    assert topo.gpus_total == 10_000 and topo.gpus_free == 0
    return topo, holders


@pytest.mark.parametrize("pods", [8, 64, 256])
def test_plan_on_a_full_10k_gpu_cluster(benchmark, full_10k, pods):
    topo, holders = full_10k
    slots = tuple(PodSlot(i, f"u{i}", 8) for i in range(pods))
    gang = Gang("bench", f"urgent{pods}", slots, Parallelism(tp=8, dp=pods))
    before = dict(topo.pods)
    place(gang, topo, "meshfit")  # warm the per-topology caches, as the long-running service has them
    started = time.perf_counter()
    plan = benchmark(plan_preemption, topo, gang, 500, holders, "meshfit")
    elapsed = time.perf_counter() - started
    print(f"\n{pods} pods: {plan.describe()[:120]}... layout tier {plan.layout_level}; {elapsed * 1e3:.1f} ms")
    assert plan is not None and all(v.priority < 500 for v in plan.victims)
    assert topo.pods == before
    topo.check_invariants()
