"""A simulated kube-scheduler loop as property tests: whole gangs or nothing, never over-commit."""

from __future__ import annotations

import queue
import random
import threading
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.gangs.membership import gang_from_membership, identify
from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_service

GANGS = st.lists(st.tuples(st.integers(1, 4), st.sampled_from([2, 4, 8])), min_size=1, max_size=7)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def all_pods(gangs: list[tuple[int, int]]) -> list[dict]:
    """Every member of every gang (gang i is called g<i>)."""
    return [gang_pod(f"g{i}", index, size, gpus) for i, (size, gpus) in enumerate(gangs) for index in range(size)]


def kube_view(service, pod: dict) -> list[str]:
    """Nodes kube-scheduler itself finds feasible: capacity minus bound pods (it knows no reservations)."""
    used = Counter()
    for binding in service.binder.snapshot():
        used[binding.node] += service.state.pod(binding.namespace, binding.name).gpus
    gpus = int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    return [n.name for n in service.state.topology.nodes if n.gpus_total - used[n.name] >= gpus]


def schedule_once(service, pod: dict) -> bool:
    """One scheduling attempt through HTTP: filter, then bind the first node left."""
    offered = kube_view(service, pod)
    if not offered:
        return False
    nodes = filter_nodes(service.filter(pod, offered, cache=bool(len(offered) % 2)))
    return bool(nodes) and service.bind(pod, nodes[0]) == {"Error": ""}


def run_until_quiet(service, pods: list[dict], rng: random.Random, tick: float = 0.0) -> None:
    """Retry pending pods in random order until a whole round binds nothing."""
    pending = list(pods)
    while pending:
        rng.shuffle(pending)
        still = []
        for pod in pending:
            service.clock.advance(tick)
            if not schedule_once(service, pod):
                still.append(pod)
        if len(still) == len(pending):
            return
        pending = still


def assert_never_overcommitted(service) -> None:
    """Bound GPUs fit every node, and the topology's books balance."""
    used = Counter()
    for binding in service.binder.snapshot():
        used[binding.node] += service.state.pod(binding.namespace, binding.name).gpus
    for node in service.state.topology.nodes:
        assert used[node.name] <= node.gpus_total, node.name
        assert node.gpus_used <= node.gpus_total, node.name
    service.state.topology.check_invariants()


@SETTINGS
@given(gangs=GANGS, seed=st.integers(0, 10_000))
def test_every_gang_binds_whole_or_not_at_all(gangs, seed):
    service = make_service(make_nodes(racks=2, nodes_per_rack=3))
    run_until_quiet(service, all_pods(gangs), random.Random(seed))
    assert_never_overcommitted(service)
    for i, (size, _) in enumerate(gangs):
        bound = [k for k in service.binder.bindings if k[1].startswith(f"g{i}-")]
        assert len(bound) in (0, size), (i, bound)
        if not bound:
            member = identify(gang_pod(f"g{i}", 0, size, gangs[i][1]))
            dry = service.scheduler.place(gang_from_membership(member))
            head = service.scheduler.lifecycle.queue.head_before(f"default/g{i}", 0, service.state.topology)
            assert not dry.placed or head is not None, f"g{i} fits now, nothing waits ahead of it, yet it is unplaced"
    assert all(r["status"] == "bound" for r in service.client.get("/reservations").json())


@SETTINGS
@given(gangs=GANGS, seed=st.integers(0, 10_000), tick=st.sampled_from([0.0, 7.0, 25.0]))
def test_expired_reservations_are_released_and_nothing_overcommits(gangs, seed, tick):
    service = make_service(make_nodes(racks=2, nodes_per_rack=3), ttl=20.0)
    run_until_quiet(service, all_pods(gangs), random.Random(seed), tick)
    service.clock.advance(21.0)
    service.scheduler.sweep()
    assert_never_overcommitted(service)
    bound_gpus = sum(service.state.pod(b.namespace, b.name).gpus for b in service.binder.snapshot())
    assert service.state.topology.gpus_free == service.state.topology.gpus_total - bound_gpus
    assert all(r["status"] in ("bound", "partial") for r in service.client.get("/reservations").json())


@settings(max_examples=10, deadline=None)
@given(gangs=GANGS, seed=st.integers(0, 10_000))
def test_concurrent_filters_from_threads_never_overcommit_or_split_gangs(gangs, seed):
    service = make_service(make_nodes(racks=2, nodes_per_rack=3))
    pods = all_pods(gangs)
    random.Random(seed).shuffle(pods)
    work: queue.Queue = queue.Queue()
    for pod in pods:
        work.put((pod, 0))
    view_lock = threading.Lock()
    crashes: list[BaseException] = []

    def worker() -> None:
        try:
            work_until_empty()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            crashes.append(exc)

    def work_until_empty() -> None:
        while True:
            try:
                pod, attempts = work.get_nowait()
            except queue.Empty:
                return
            with view_lock:
                offered = kube_view(service, pod)
            decision = service.scheduler.filter(pod, offered)
            meta = pod["metadata"]
            if decision.nodes and not service.scheduler.bind(meta["namespace"], meta["name"], meta["uid"],
                                                             decision.nodes[0]):
                continue
            if attempts < 2 * len(pods):
                work.put((pod, attempts + 1))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not crashes, crashes
    assert_never_overcommitted(service)
    for i, (size, _) in enumerate(gangs):
        bound = [k for k in service.binder.bindings if k[1].startswith(f"g{i}-")]
        assert len(bound) in (0, size), (i, bound)
