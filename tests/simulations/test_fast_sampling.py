"""The numpy sampler row and node-state arrays read exactly what the per-node Python loops read."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulations.cluster import ClusterSpec, all_schedulable, build_cluster, node_state
from simulations.sampling import Sampler
from tests.simulations.sim_builders import make_workload


def reference_row(sampler: Sampler, sim) -> tuple:
    """The per-node loop `Sampler._row` replaced (tests only)."""
    topo, total = sampler.topo, sim.total_gpus
    smallest = min(sampler.waiting_pod_sizes) if sampler.waiting_pod_sizes else 0
    free = stranded = down = 0
    touched: set[int] = set()
    for node in topo.nodes:
        if not node.schedulable:
            down += 1
            continue
        free += node.gpus_free
        if node.gpus_free < smallest:
            stranded += node.gpus_free
        if node.gpus_used:
            touched.add(node.path[sampler.level])
    broken = sum(1 for d in touched if topo.domains[d].gpus_free > 0)
    return (sim.busy, round(sim.busy / total, 6), len(sim.queue), len(sim.running_by_end), free, stranded,
            round(stranded / total, 6), broken, down, round(sim.ideal_busy / total, 6))


def shuffle_state(topo, rng: random.Random, steps: int) -> None:
    """Random pods added and removed, nodes failed and repaired, a snapshot restored now and then."""
    snapshot = None
    for step in range(steps):
        node = rng.choice(topo.nodes)
        roll = rng.random()
        if roll < 0.5 and node.gpus_free:
            topo.add_pod(f"p{step}", node.name, rng.randint(1, node.gpus_free))
        elif roll < 0.7 and topo.pods:
            topo.remove_pod(rng.choice(sorted(topo.pods)))
        elif roll < 0.85:
            topo.set_schedulable(node.name, rng.random() < 0.5)
        elif snapshot is None:
            snapshot = topo.snapshot_usage()
        else:
            topo.restore_usage(snapshot)


def fake_sim(topo, rng: random.Random):
    """The few simulator attributes a sample reads."""
    busy = rng.randint(0, topo.gpus_total)
    return SimpleNamespace(total_gpus=topo.gpus_total, busy=busy, ideal_busy=busy / rng.uniform(1.0, 2.0),
                           queue=[1] * 3, running_by_end=[1] * 2)


PRESETS = [("hgx-h100", 24), ("gb200-nvl72", 36), ("gke-a3", 16), ("aws-p5", 20)]


@pytest.mark.parametrize(("preset", "nodes"), PRESETS, ids=[p for p, _ in PRESETS])
@pytest.mark.parametrize("fast", [True, False], ids=["fast-topology", "base-topology"])
def test_sample_rows_match_the_per_node_loop(preset, nodes, fast):
    rng = random.Random(f"{preset}{fast}")
    topo = build_cluster(ClusterSpec(preset, nodes), fast=fast)
    sampler = Sampler(topo, make_workload(), 10)
    rows = set()
    for _ in range(40):
        shuffle_state(topo, rng, 15)
        sampler.waiting_pod_sizes = {size: 1 for size in rng.sample([1, 2, 4, 8], rng.randint(0, 2))}
        sim = fake_sim(topo, rng)
        row = sampler._row(sim)
        assert row == reference_row(sampler, sim)
        assert all(type(value) in (int, float) for value in row)
        rows.add(row[4:])
    assert len(rows) > 10  # the states really varied


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 60))
def test_live_node_arrays_equal_the_nodes(seed, steps):
    rng = random.Random(seed)
    topo = build_cluster(ClusterSpec("hgx-h100", 12))
    shuffle_state(topo, rng, steps)
    used, up = node_state(topo)
    assert used.tolist() == [n.gpus_used for n in topo.nodes]
    assert up.tolist() == [n.schedulable for n in topo.nodes]
    assert all_schedulable(topo) == all(n.schedulable for n in topo.nodes)
    assert topo.free_arrays()[0].tolist() == [n.gpus_free for n in topo.nodes]
    topo.check_invariants()
