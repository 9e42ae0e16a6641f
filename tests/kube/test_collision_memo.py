"""The fence's collision test gives the same answer with the per-pass memo as without it (`RoomFit.collides`)."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cache.room_ledger import ClaimState, RoomLedger
from scheduler.kube.node_fit import PodNeeds, RoomFit

RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "pods")


def node(cpu: int, memory: int, gpus: int) -> dict:
    """A Node object with allocatable cpu, memory (GiB), GPUs and 110 pods."""
    return {"metadata": {"name": "n"}, "status": {"allocatable": {
        "cpu": str(cpu), "memory": f"{memory}Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}}}


def pod(uid: str, priority: int, cpu: int, memory: int, gpus: int, node_name: str = "",
        nominated: str = "") -> SimpleNamespace:
    """A pod record as the fence sees it: uid, priority, requests, no gang, bound on `node_name` or nominated."""
    requests = {"cpu": Decimal(cpu), "memory": Decimal(memory) * 2**30, "nvidia.com/gpu": Decimal(gpus),
                "pods": Decimal(1)}
    return SimpleNamespace(uid=uid, priority=priority, member=None, node=node_name, nominated=nominated,
                           phase="Running" if node_name else "Pending", terminating=False,
                           needs=PodNeeds(requests={r: v for r, v in requests.items() if v or r == "pods"}))


def fit_over(claims: list[SimpleNamespace], assumed: SimpleNamespace | None = None,
             held: SimpleNamespace | None = None) -> RoomFit:
    """A `RoomFit` over one node "n" whose room ledger holds `claims` (bound or nominated pods), a member
    kube-scheduler assumed there and one meshfit holds there."""
    room = RoomLedger(lambda key, index: None, lambda: 0.0)
    for record in claims:
        room.observe_pod(record)
    if assumed is not None:
        room.hold(assumed, "n", ClaimState.ASSUMED)
    if held is not None:
        room.hold(held, "n", ClaimState.HELD)
    return RoomFit(SimpleNamespace(nodes={"n": node(16, 64, 8)}, room=room))


shapes = st.tuples(st.integers(0, 2), st.integers(0, 16), st.integers(0, 64), st.integers(0, 8))


@settings(max_examples=150, deadline=None)
@given(bound=st.tuples(st.integers(0, 16), st.integers(0, 64), st.integers(0, 8)),
       member=shapes, others=st.lists(shapes, min_size=1, max_size=12),
       nominated=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 2)), max_size=4),
       assumed=st.tuples(st.integers(0, 8), st.integers(0, 32), st.integers(0, 8)),
       held=st.tuples(st.integers(0, 8), st.integers(0, 32), st.integers(0, 8)))
def test_the_memo_never_changes_an_answer(bound, member, others, nominated, assumed, held):
    pods = [pod(f"o{i}", *shape) for i, shape in enumerate(others)]
    the_member = pod("m", *member)
    claims = [pod("bound", 0, *bound, node_name="n")]
    for index, priority in nominated:  # some of the racing pods are nominated on the node themselves
        if index < len(pods):
            pods[index] = SimpleNamespace(**{**vars(pods[index]), "priority": priority, "nominated": "n"})
            claims.append(pods[index])
    fit = fit_over(claims, pod("assumed", 0, *assumed), pod("held", 0, *held))
    memo: dict = {}
    for other in pods:
        assert fit.collides(other, the_member, "n", memo) == fit.collides(other, the_member, "n")


def test_a_cpu_pod_that_fits_only_without_the_member_collides_through_the_memo():
    fit, memo = fit_over([pod("bound", 0, 4, 0, 0, node_name="n")]), {}
    member = pod("m", 0, 10, 40, 8)
    assert fit.collides(pod("small", 0, 1, 1, 0), member, "n", memo) is False
    assert fit.collides(pod("big", 0, 8, 30, 0), member, "n", memo) is True


def test_what_meshfit_holds_beside_the_member_counts_in_the_collision_but_not_in_kube_schedulers_view():
    """Four 2.5-CPU members and an 8-CPU pod each fit a 16-CPU node; together they do not."""
    held = pod("held", 0, 6, 0, 0)
    fit = fit_over([], held=held)
    member = pod("m", 0, 3, 0, 0)
    assert fit.collides(pod("cpu", 0, 8, 0, 0), member, "n") is True  # 8 + 3 + 6 > 16: not both
    assert fit.collides(pod("cpu", 0, 8, 0, 0), member, "n") is True
    assert fit.fits(pod("cpu", 0, 11, 0, 0), "n").startswith("insufficient cpu")  # meshfit's view counts the hold
    assert fit.state.room.kube_used("n", 0) == {}  # kube-scheduler's cannot
