"""The fence's collision test gives the same answer with the per-pass memo as without it (`state_collision_check`)."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.kube.node_fit import PodNeeds, state_collision_check

RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "pods")


def node(cpu: int, memory: int, gpus: int) -> dict:
    """A Node object with allocatable cpu, memory (GiB), GPUs and 110 pods."""
    return {"metadata": {"name": "n"}, "status": {"allocatable": {
        "cpu": str(cpu), "memory": f"{memory}Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}}}


def pod(uid: str, priority: int, cpu: int, memory: int, gpus: int) -> SimpleNamespace:
    """A pod record as the fence sees it: uid, priority, requests, no gang."""
    requests = {"cpu": Decimal(cpu), "memory": Decimal(memory) * 2**30, "nvidia.com/gpu": Decimal(gpus),
                "pods": Decimal(1)}
    return SimpleNamespace(uid=uid, priority=priority, member=None,
                           needs=PodNeeds(requests={r: v for r, v in requests.items() if v or r == "pods"}))


shapes = st.tuples(st.integers(0, 2), st.integers(0, 16), st.integers(0, 64), st.integers(0, 8))


@settings(max_examples=150, deadline=None)
@given(bound=st.tuples(st.integers(0, 16), st.integers(0, 64), st.integers(0, 8)),
       member=shapes, others=st.lists(shapes, min_size=1, max_size=12),
       nominated=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 2)), max_size=4),
       in_flight=st.tuples(st.integers(0, 8), st.integers(0, 32), st.integers(0, 8)))
def test_the_memo_never_changes_an_answer(bound, member, others, nominated, in_flight):
    pods = [pod(f"o{i}", *shape) for i, shape in enumerate(others)]
    the_member = pod("m", *member)
    nominated_here = {}
    for index, priority in nominated:  # some of the racing pods are nominated on the node themselves
        if index < len(pods):
            nominated_here[pods[index].uid] = SimpleNamespace(**{**vars(pods[index]), "priority": priority})
    state = SimpleNamespace(
        nodes={"n": node(16, 64, 8)},
        requested={"n": {"cpu": Decimal(bound[0]), "memory": Decimal(bound[1]) * 2**30,
                         "nvidia.com/gpu": Decimal(bound[2])}},
        nominated_to={"n": nominated_here}, ledger=SimpleNamespace(get=lambda key: None))
    flight = {"cpu": Decimal(in_flight[0]), "memory": Decimal(in_flight[1]) * 2**30,
              "nvidia.com/gpu": Decimal(in_flight[2])}
    racing = state_collision_check(state)
    memo: dict = {}
    for other in pods:
        assert racing(other, the_member, "n", flight, (), memo) == racing(other, the_member, "n", flight, ())


def test_a_cpu_pod_that_fits_only_without_the_member_collides_through_the_memo():
    state = SimpleNamespace(nodes={"n": node(16, 64, 8)}, requested={"n": {"cpu": Decimal(4)}}, nominated_to={},
                            ledger=SimpleNamespace(get=lambda key: None))
    racing, memo = state_collision_check(state), {}
    member = pod("m", 0, 10, 40, 8)
    assert racing(pod("small", 0, 1, 1, 0), member, "n", {}, (), memo) is False
    assert racing(pod("big", 0, 8, 30, 0), member, "n", {}, (), memo) is True
