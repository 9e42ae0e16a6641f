"""Simulator throughput (pytest-benchmark): 2,000 synthetic jobs on a 2,048-GPU cluster per policy.

The full-size number (100,000 jobs on 16,384 GPUs) comes from
`python -m simulations.bench --jobs 100000 --nodes 2048 --policy first-fit --policy meshfit`.
"""

from __future__ import annotations

import pytest

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import SimConfig
from simulations.simulator import Simulator
from simulations.synthetic import generate

POLICIES = ["first-fit", "meshfit", "kueue-tas", "volcano-hypernode"]


@pytest.mark.parametrize("policy", POLICIES, ids=POLICIES)
def test_simulator_events_per_second(benchmark, policy):
    spec = ClusterSpec("hgx-h100", 256)
    workload = generate(2000, 2048, seed=0)

    def run():
        return Simulator(build_cluster(spec), workload, policy, SimConfig()).run()

    result = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["events"] = result.events
    if benchmark.stats is not None:  # None under --benchmark-disable (the default test run)
        benchmark.extra_info["events_per_second"] = result.events / benchmark.stats.stats.mean
    assert result.summary["completed"] == 2000
