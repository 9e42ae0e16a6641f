"""Extender latency on loopback against a real `meshfit serve` subprocess, 8 concurrent clients.

Targets (issue 4): `/filter` on 5,000 nodes, names only, for pods of already-reserved gangs:
p50 < 2 ms and p99 < 10 ms; first-member filter (which places the whole gang) p99 < 100 ms at
16,384 GPUs.  Run with `MESHFIT_FULL_TESTS=1 python -m pytest tests/bench/test_extender_bench.py -n 0
--benchmark-enable -s`; without `MESHFIT_FULL_TESTS=1` every test runs at smoke size (500 nodes instead of
5,000, 256 instead of 2,048, fewer requests and gangs), which checks the replies, not the targets.
"""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from tests.bench.extender_load import filter_body, percentile, run_load, served
from tests.sizes import pick
from topology.generator import generate_nodelist

POD_TEMPLATE = {
    "metadata": {"name": "", "namespace": "bench", "uid": "", "labels": {"app": "train"}, "annotations": {}},
    "spec": {"containers": [{"name": "main", "image": "registry.invalid/train:1",
                             "resources": {"limits": {"nvidia.com/gpu": "8"},
                                           "requests": {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"}}}],
             "schedulerName": "default-scheduler", "restartPolicy": "Never", "priority": 0},
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}


def gang_member(gang: str, index: int, size: int) -> dict:
    """Pod `index` of an 8-GPU-per-pod gang with tp=8 inside a pod and dp across pods."""
    pod = copy.deepcopy(POD_TEMPLATE)
    pod["metadata"].update(name=f"{gang}-{index}", uid=f"uid-{gang}-{index}")
    pod["metadata"]["labels"]["meshfit.io/gang"] = gang
    pod["metadata"]["annotations"].update({"meshfit.io/pod-index": str(index), "meshfit.io/gang-size": str(size),
                                           "meshfit.io/parallelism": f"tp=8,dp={size}"})
    return pod


def write_cluster(tmp_path, nodes: int) -> tuple:
    """An hgx-h100 NodeList of `nodes` nodes (8 GPUs each) and its node names."""
    nodelist = generate_nodelist("hgx-h100", nodes)
    path = tmp_path / f"cluster-{nodes}.json"
    path.write_text(json.dumps(nodelist))
    return path, [item["metadata"]["name"] for item in nodelist["items"]]


def report(name: str, latencies: list[float], benchmark) -> dict:
    """Print and attach p50 / p99 / max in milliseconds."""
    stats = {"requests": len(latencies), "p50_ms": percentile(latencies, 50) * 1e3,
             "p99_ms": percentile(latencies, 99) * 1e3, "max_ms": max(latencies) * 1e3}
    benchmark.extra_info.update(stats)
    print(f"\n{name}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()))
    return stats


@pytest.mark.slow
def test_filter_reserved_gang_members_5000_nodes(benchmark, tmp_path):
    cluster, names = write_cluster(tmp_path, pick(500, 5000))
    gangs, size = pick(20, 60), 8
    with served(cluster) as url:
        for g in range(gangs):
            reply = httpx.post(f"{url}/filter", content=filter_body(gang_member(f"g{g}", 0, size), names),
                               timeout=30).json()
            assert reply["NodeNames"], reply
        bodies = [filter_body(gang_member(f"g{g}", i, size), names) for g in range(gangs) for i in range(1, size)]
        run_load(f"{url}/filter", bodies[:64], max_requests=200)  # warm-up
        seconds = pick(10.0, 40.0)
        latencies, replies = benchmark.pedantic(run_load, args=(f"{url}/filter", bodies),
                                                kwargs={"max_requests": pick(300, 3000), "max_seconds": seconds},
                                                rounds=1, iterations=1)
        paced, paced_replies = run_load(f"{url}/filter", bodies, max_requests=pick(200, 2000), max_seconds=seconds,
                                        rate=200.0)
    assert all(len(r.get("NodeNames") or []) == 1 for r in replies + paced_replies)
    report("filter, reserved gang members, 5000 nodes, 8 clients, closed loop", latencies, benchmark)
    paced_stats = report("filter, reserved gang members, 5000 nodes, 8 clients paced at 200 req/s", paced, benchmark)
    benchmark.extra_info.update({f"paced_{k}": v for k, v in paced_stats.items()})


@pytest.mark.slow
def test_filter_first_member_places_gang_16384_gpus(benchmark, tmp_path):
    cluster, names = write_cluster(tmp_path, pick(256, 2048))
    size = 8
    bodies = [filter_body(gang_member(f"p{g}", 0, size), names) for g in range(pick(24, 200))]
    with served(cluster) as url:
        run_load(f"{url}/filter", [filter_body(gang_member("warm", 0, 1), names)], max_requests=4)
        latencies, replies = benchmark.pedantic(run_load, args=(f"{url}/filter", bodies),
                                                kwargs={"max_requests": len(bodies), "max_seconds": 120.0},
                                                rounds=1, iterations=1)
        reserved = httpx.get(f"{url}/reservations").json()
    assert all(len(r.get("NodeNames") or []) == 1 for r in replies)
    assert len(reserved) == len(bodies) + 1
    report("filter, first member places the gang (8 pods x 8 GPUs), 16,384 GPUs, 8 clients", latencies, benchmark)


@pytest.fixture(scope="module")
def in_process():
    """A scheduler over 5,000 hgx-h100 nodes without HTTP, for handler-only timings."""
    from scheduler.service.app import build_scheduler
    from scheduler.service.binding.binder_memory import MemoryBinder
    from scheduler.cache.state import ClusterState

    def make(nodes: int):
        nodelist = generate_nodelist("hgx-h100", nodes)
        state = ClusterState()
        state.replace_all(nodelist["items"], [], [])
        scheduler, _ = build_scheduler(state, MemoryBinder(), "meshfit")
        return scheduler, [item["metadata"]["name"] for item in nodelist["items"]]

    return make


def test_filter_handler_reserved_member_5000_nodes(benchmark, in_process):
    from scheduler.service.verbs.extender import handle_filter

    scheduler, names = in_process(pick(500, 5000))
    handle_filter(scheduler, filter_body(gang_member("r", 0, 8), names))
    body = filter_body(gang_member("r", 5, 8), names)
    status, reply = benchmark(handle_filter, scheduler, body)
    assert status == 200 and json.loads(reply)["NodeNames"]


def test_filter_handler_first_member_16384_gpus(benchmark, in_process):
    from scheduler.service.verbs.extender import handle_filter

    scheduler, names = in_process(pick(256, 2048))
    gangs = pick(24, 120)
    bodies = iter([filter_body(gang_member(f"f{g}", 0, 8), names) for g in range(gangs)])
    replies = []
    benchmark.pedantic(lambda body: replies.append(handle_filter(scheduler, body)),
                       setup=lambda: ((next(bodies),), {}), rounds=gangs, iterations=1)
    assert all(json.loads(reply)["NodeNames"] for _, reply in replies)


@pytest.mark.parametrize("frozen", [False, True], ids=["not-frozen", "frozen-after-load"])
def test_full_gc_pause_with_250_gangs_placed_16384_gpus(benchmark, in_process, frozen):
    """A full collection's pause once 250 gangs hold reservations, with and without `GcPolicy`'s freeze
    after the load (`scheduler.service.ops.gcpolicy`); the pytest process's own heap is counted in both."""
    import gc

    from scheduler.service.verbs.extender import handle_filter
    from scheduler.service.ops.gcpolicy import collect_and_freeze

    scheduler, names = in_process(pick(256, 2048))
    if frozen:
        collect_and_freeze()
    try:
        for g in range(pick(30, 250)):  # 8 whole nodes each: the cluster full at either size
            status, _ = handle_filter(scheduler, filter_body(gang_member(f"gc{g}", 0, 8), names))
            assert status == 200
        scheduler.rank_tables.wait_idle(30.0)
        benchmark.pedantic(gc.collect, rounds=5, iterations=1)
    finally:
        gc.unfreeze()
