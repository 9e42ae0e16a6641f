"""Members placed after others bound keep the rendezvous the bound ones were given (master address, rank order).

Pod 0 lost its reservation (a restart of the service, or TTL expiry) while pods 2 and 3 were
already bound with `meshfit.io/master-addr` = pod 0's old node: pod 0 must go back there, and the
rank order must stay the one the bound pods were told; when that node has no room, the rest of
the gang is refused with the reason until it does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler.handoff.assignment import parse_assignment
from scheduler.placement.jobs import DEFAULT_RANK_ORDER, parse_rank_order
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS, rank_to_coords
from tests.service.helpers import Service, filter_nodes, gang_pod, make_nodes, make_pod, make_service

SIZE, PARALLELISM = 4, "tp=8,pp=2,dp=2"
BOUND_FIRST = (2, 3)
OTHER_ORDER = next(order for order in SUPPORTED_RANK_ORDERS if order != DEFAULT_RANK_ORDER)


def member(index: int, rank_order: str | None = None, **kwargs) -> dict:
    """Pod `index` of gang `train` (4 pods x 8 GPUs, tp=8,pp=2,dp=2), optionally declaring a rank order."""
    pod = gang_pod("train", index, SIZE, parallelism=PARALLELISM, **kwargs)
    if rank_order is not None:
        pod["metadata"]["annotations"]["meshfit.io/rank-order"] = rank_order
    return pod


def bound_member(index: int, node: str, annotations: dict[str, str]) -> dict:
    """Pod `index` as the API server has it after a meshfit bind: on `node`, Running, with `annotations`."""
    pod = member(index, node=node, phase="Running")
    pod["metadata"]["annotations"].update(annotations)
    return pod


def with_rank_order(annotations: dict[str, str], order: str) -> dict[str, str]:
    """Bind annotations rewritten as if the placement had resolved `auto` to `order`."""
    given = parse_assignment(annotations)
    coords = tuple(rank_to_coords(rank, given.parallelism, parse_rank_order(order)) for rank in given.ranks)
    return {**annotations, **replace(given, rank_order=order, coords=coords).to_annotations()}


def bind_first_members(rank_order: str | None = None) -> tuple[Service, str]:
    """A service that placed the gang while a loner held n-0-0 and bound pods 2 and 3; (service, master given).

    The loner makes pod 0's reservation land where a fresh placement would not put it again.
    """
    loner = make_pod("loner", 8, node="n-0-0", phase="Running")
    service = make_service(pods=[loner], ttl=30)
    for index in BOUND_FIRST:
        pod = member(index, rank_order)
        assert service.bind(pod, filter_nodes(service.filter(pod))[0]) == {"Error": ""}
    service.state.delete_pod("default", "loner")
    [master] = {parse_assignment(b.annotations).master_addr for b in service.binder.snapshot()}
    assert master != "n-0-0"
    return service, master


def restarted(service: Service, nodes: list[dict] | None = None, extra: tuple[dict, ...] = (),
              rewrite: Callable[[dict[str, str]], dict[str, str]] = dict) -> Service:
    """A fresh service listing the bound members (annotations through `rewrite`) and `extra` pods."""
    bound = [bound_member(int(b.name.rsplit("-", 1)[1]), b.node, rewrite(b.annotations))
             for b in service.binder.snapshot()]
    return make_service(nodes, pods=[*bound, *extra], ttl=30)


def test_a_partly_bound_gang_keeps_pod_0s_slot_past_the_ttl():
    service, master = bind_first_members()
    service.clock.advance(31)
    assert service.scheduler.sweep() == []
    assert service.state.ledger.get("default/train").missing_indices() == []
    given = bind_the_rest(service)
    assert {parse_assignment(a).master_addr for a in given.values()} == {master}
    service.state.topology.check_invariants()


def bind_the_rest(service: Service, rank_order: str | None = None) -> dict[int, dict[str, str]]:
    """Filter and bind pods 0 and 1; their bind annotations by pod index."""
    for index in (0, 1):
        pod = member(index, rank_order)
        nodes = filter_nodes(service.filter(pod))
        assert len(nodes) == 1 and service.bind(pod, nodes[0]) == {"Error": ""}
    return {int(b.name.rsplit("-", 1)[1]): b.annotations for b in service.binder.snapshot()
            if b.name in ("train-0", "train-1")}


@pytest.mark.parametrize("lose_reservation", [
    lambda service: restarted(service),
], ids=["restart"])
def test_pod_0_goes_back_to_the_master_address_bound_members_were_given(lose_reservation):
    first, master = bind_first_members()
    service = lose_reservation(first)
    assert service.state.ledger.get("default/train").missing_indices() == [0, 1]
    given = bind_the_rest(service)
    assert {parse_assignment(a).master_addr for a in given.values()} == {master}
    assert service.state.ledger.get("default/train").node_of(0) == master
    service.state.topology.check_invariants()


def test_restart_keeps_the_rank_order_auto_resolved_to_for_the_bound_members():
    """The pending members declare `auto`; the bound ones were told a non-default order, which must win."""
    first, _ = bind_first_members(rank_order="auto")
    service = restarted(first, rewrite=lambda annotations: with_rank_order(annotations, OTHER_ORDER))
    given = bind_the_rest(service, rank_order="auto")
    assert {parse_assignment(a).rank_order for a in given.values()} == {OTHER_ORDER}


@pytest.mark.parametrize("take_master, state", [
    (lambda master: ([], (make_pod("squatter", 4, "other", node=master, phase="Running"),)), "only 4 free GPU"),
    (lambda master: ([n for n in make_nodes() if n["metadata"]["name"] != master], ()), "no longer in the cluster"),
], ids=["taken-by-another-pod", "node-gone"])
def test_master_node_without_room_refuses_the_rest_with_the_reason(take_master, state):
    first, master = bind_first_members()
    nodes, extra = take_master(master)
    service = restarted(first, nodes or None, extra)
    for index in (0, 1):
        reply = service.filter(member(index))
        assert filter_nodes(reply) == [] and reply["FailedNodes"]
        assert all(f"must run on node {master}" in reason and state in reason
                   for reason in reply["FailedNodes"].values())
    assert service.state.ledger.get("default/train").missing_indices() == [0, 1]
    assert service.state.topology.gpus_free == (len(nodes or make_nodes()) - len(BOUND_FIRST)) * 8 - (
        4 if extra else 0)


def test_master_node_cordoned_refuses_the_rest_until_uncordoned():
    first, master = bind_first_members()
    service = restarted(first)
    node = next(n for n in make_nodes() if n["metadata"]["name"] == master)
    service.state.upsert_node({**node, "spec": {"unschedulable": True}})
    reply = service.filter(member(0))
    assert filter_nodes(reply) == [] and all("cordoned" in r for r in reply["FailedNodes"].values())
    service.state.upsert_node(node)
    assert filter_nodes(service.filter(member(0))) == [master]


def test_bound_members_given_different_rendezvous_refuse_the_rest():
    first, master = bind_first_members()
    elsewhere = next(n["metadata"]["name"] for n in make_nodes() if n["metadata"]["name"] not in (master, "n-0-0"))
    bound = [bound_member(int(b.name.rsplit("-", 1)[1]), b.node,
                          {**b.annotations, "meshfit.io/master-addr": elsewhere if b.name == "train-3" else master})
             for b in first.binder.snapshot()]
    service = make_service(pods=bound)
    reply = service.filter(member(0))
    assert filter_nodes(reply) == []
    assert all("different rendezvous" in r and master in r and elsewhere in r for r in reply["FailedNodes"].values())
