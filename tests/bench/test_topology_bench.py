"""Benchmarks: build a 2,048-node (16,384-GPU) hgx-h100 topology and apply 10,000 pod add/remove updates.

Run with `python -m pytest tests/bench/test_topology_bench.py -n 0 --benchmark-enable -s`; targets are
build < 1 s and < 20 us per update.  Peak memory (tracemalloc) is printed, not asserted.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from tests.builders import make_nodelist
from topology.loaders import topology_from_objects

NODES = 2048
UPDATES = 10_000


@pytest.fixture(scope="module")
def nodelist_items() -> list[dict]:
    items = make_nodelist("hgx-h100", nodes=NODES, seed=0, used_fraction=0.5, unhealthy=8)["items"]
    assert sum(1 for item in items if item["kind"] == "Node") == NODES
    return items


def _update_plan(node_names: list[str]) -> list[tuple[str, str, int]]:
    """UPDATES operations: add a pod, or remove the oldest live one (add ~60% of the time)."""
    rng = random.Random(7)
    plan, live = [], []
    for i in range(UPDATES):
        if live and rng.random() < 0.4:
            plan.append(("remove", live.pop(0), 0))
        else:
            key = f"bench/pod-{i}"
            live.append(key)
            plan.append(("add", key, rng.randrange(len(node_names))))
    return plan


def test_build_2048_node_topology(benchmark, nodelist_items):
    topo = benchmark(topology_from_objects, nodelist_items)
    assert topo.gpus_total == NODES * 8
    tracemalloc.start()
    topology_from_objects(nodelist_items)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\nbuild: {len(topo.nodes)} nodes, {len(topo.domains)} domains, peak traced memory {peak / 2**20:.1f} MiB")


def test_10000_pod_updates(benchmark, nodelist_items):
    topo = topology_from_objects(nodelist_items)
    names = [node.name for node in topo.nodes]
    plan = _update_plan(names)
    snapshot = topo.snapshot_usage()

    def apply_updates() -> None:
        topo.restore_usage(snapshot)
        for op, key, node in plan:
            if op == "add":
                topo.add_pod(key, names[node], 1)
            else:
                topo.remove_pod(key)

    benchmark(apply_updates)
    topo.check_invariants()
    if benchmark.stats is not None:
        per_update_us = benchmark.stats.stats.mean / UPDATES * 1e6
        print(f"\nupdates: {UPDATES} add/remove, {per_update_us:.2f} us each (incl. one restore per round)")


def test_load_2048_node_json_file(benchmark, nodelist_items, tmp_path):
    from tests.builders import make_list, write_objects
    from topology.loaders import load_cluster

    path = write_objects(tmp_path, make_list(*nodelist_items), "cluster.json")
    topo = benchmark(load_cluster, path)
    assert len(topo.nodes) == NODES
    tracemalloc.start()
    load_cluster(path)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\nload from {path.stat().st_size / 2**20:.1f} MiB JSON: peak traced memory {peak / 2**20:.1f} MiB")
