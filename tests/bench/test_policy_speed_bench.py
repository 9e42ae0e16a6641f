"""meshfit against kueue-tas, same cluster, same jobs (issue 21): run with
`MESHFIT_FULL_TESTS=1 python -m pytest tests/bench/test_policy_speed_bench.py -n 0 --benchmark-enable`.

Targets (compare the two policies' rows of one run; the full-size numbers come from
`python tests/bench/policy_speed.py sim --jobs 100000 --repeats 2` and `python tests/bench/policy_speed.py place`):
- placing a 64- and a 256-GPU gang on 16,384 GPUs (hgx-h100, 60% random occupancy): meshfit <= 2x kueue-tas;
- a synthetic trace on 16,384 GPUs through `Simulator.run`: meshfit <= 1.2x kueue-tas.
Each placement round first adds and removes a pod (the free GPUs end as they were, every state-keyed cache is
invalidated) and forgets the layout prices remembered per job shape, as a busy cluster would.
"""

from __future__ import annotations

import pytest

from scheduler.placement.cost import geometry
from scheduler.placement.engine import place
from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import SimConfig
from simulations.simulator import Simulator
from simulations.synthetic import generate
from tests.bench.policy_speed import sized_gang
from tests.sizes import pick
from topology.generator import generate_cluster

POLICIES = ["meshfit", "kueue-tas"]


@pytest.fixture(scope="module")
def hgx_16k():
    return generate_cluster("hgx-h100", 2048, seed=7, used_fraction=0.6)


def _invalidate(topo) -> None:
    """Change and restore one node, and forget remembered layout prices (outside the timing)."""
    node = next(n.name for n in topo.nodes if n.gpus_free)
    topo.add_pod("bench/touch", node, 1)
    topo.remove_pod("bench/touch")
    for pricer in geometry(topo).__dict__.get("shared_pricers", {}).values():
        pricer._memo.clear()
        pricer._reports.clear()


@pytest.mark.parametrize("gpus", [64, 256], ids=["64-gpus", "256-gpus"])
@pytest.mark.parametrize("policy", POLICIES, ids=POLICIES)
def test_place_on_16k_gpus(benchmark, hgx_16k, policy, gpus):
    gang = sized_gang(gpus)
    place(gang, hgx_16k, policy)  # per-topology caches warm, as in a long-running service
    placement = benchmark.pedantic(place, args=(gang, hgx_16k, policy), kwargs={"with_ranks": False},
                                   setup=lambda: _invalidate(hgx_16k), rounds=200, iterations=1, warmup_rounds=5)
    assert placement.placed


@pytest.mark.parametrize("policy", POLICIES, ids=POLICIES)
def test_simulate_on_16k_gpus(benchmark, policy):
    spec = ClusterSpec("hgx-h100", 2048)
    jobs = pick(1000, 4000)  # synthetic jobs: smoke size by default, 4,000 with MESHFIT_FULL_TESTS=1
    workload = generate(jobs, 16384, seed=0)

    def setup():
        return (Simulator(build_cluster(spec), workload, policy, SimConfig()),), {}

    result = benchmark.pedantic(lambda simulator: simulator.run(), setup=setup, rounds=3, iterations=1)
    assert result.summary["completed"] == jobs
