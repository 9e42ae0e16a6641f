"""gRPC `PlacePodGroup` over loopback: what the kube-scheduler plugin asks once per group cycle."""

from __future__ import annotations

import json

import grpc
import pytest

from scheduler.gangs.ledger import SLOT_BOUND, SLOT_RESERVED
from scheduler.handoff.assignment import parse_assignment
from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.verbs.grpc_service import serve_grpc
from scheduler.service.verbs.pod_group_rpc import place_pod_group
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2_grpc as pb_grpc
from tests.service.helpers import gang_pod, make_pod, make_service


@pytest.fixture()
def rpc():
    service = make_service()  # 2 racks x 4 nodes x 8 GPUs
    server = serve_grpc(service.scheduler, "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
    yield service, pb_grpc.PlacementStub(channel)
    channel.close()
    server.stop(grace=None)


def request(pods: list[dict], nodes: list[str] | None = None, service=None) -> pb.PodGroupRequest:
    """A PodGroupRequest carrying the pods as JSON (as the plugin sends them) and every known node."""
    if nodes is None:
        nodes = sorted(service.state.topology.node_by_name)
    return pb.PodGroupRequest(namespace="default", pod_group="llm", topology_key="network.topology.nvidia.com/leaf",
                              pods=[json.dumps(p).encode() for p in pods], nodes=nodes)


def observe(service, pods: list[dict]) -> None:
    """The watch has seen the pods (meshfit's cluster state knows them before kube-scheduler asks)."""
    for pod in pods:
        service.state.upsert_pod(pod)


def test_one_call_places_and_reserves_the_whole_group_with_ranks_and_pod_0_as_rendezvous(rpc):
    service, stub = rpc
    pods = [gang_pod("llm", i, 4, parallelism="tp=8,dp=4") for i in range(4)]
    observe(service, pods)
    reply = stub.PlacePodGroup(request(pods, service=service))
    assert reply.status == "placed" and reply.gang == "default/llm", reply
    nodes = {m.index: m.node for m in reply.members}
    assert sorted(nodes) == [0, 1, 2, 3] and len(set(nodes.values())) == 4
    racks = {service.state.topology.node_by_name[n].labels["network.topology.nvidia.com/leaf"] for n in nodes.values()}
    assert len(racks) == 1, nodes
    assert sorted(r for m in reply.members for r in m.ranks) == list(range(32))
    assert reply.rendezvous == nodes[0]
    for member in reply.members:
        told = parse_assignment(dict(member.annotations))
        assert told.master_addr == nodes[0] and list(told.ranks) == list(member.ranks)
        assert member.uid == f"uid-default-llm-{member.index}"
    entry = service.state.ledger.get("default/llm")
    assert {i: s.node for i, s in entry.slots.items()} == nodes
    assert all(s.state == SLOT_RESERVED for s in entry.slots.values())
    assert service.binder.snapshot() == []  # meshfit binds nothing: kube-scheduler does


def test_asking_again_gives_the_same_placement_and_the_bound_pods_mark_the_slots(rpc):
    service, stub = rpc
    pods = [gang_pod("llm", i, 2, parallelism="tp=8,dp=2") for i in range(2)]
    observe(service, pods)
    first = stub.PlacePodGroup(request(pods, service=service))
    again = stub.PlacePodGroup(request(pods, service=service))
    assert [(m.name, m.node) for m in first.members] == [(m.name, m.node) for m in again.members]
    for pod, member in zip(pods, first.members):  # kube-scheduler's Binding, as the watch reports it
        pod["spec"]["nodeName"] = member.node
        pod["metadata"]["annotations"].update(member.annotations)
        service.state.upsert_pod(pod)
    entry = service.state.ledger.get("default/llm")
    assert all(s.state == SLOT_BOUND for s in entry.slots.values())


def test_a_group_that_does_not_fit_waits_with_meshfits_reason_and_holds_nothing(rpc):
    service, stub = rpc
    pods = [gang_pod("huge", i, 9, parallelism="tp=8,dp=9") for i in range(9)]  # 72 GPUs > 64
    observe(service, pods)
    reply = stub.PlacePodGroup(request(pods, service=service))
    assert reply.status == "unschedulable" and "does not fit" in reply.reason, reply
    assert not reply.members
    assert service.state.ledger.get("default/huge") is None
    assert service.state.topology.gpus_free == 64


def test_only_the_offered_nodes_are_used(rpc):
    service, stub = rpc
    pods = [gang_pod("llm", i, 2, parallelism="tp=8,dp=2") for i in range(2)]
    observe(service, pods)
    offered = ["n-1-0", "n-1-1", "n-1-2"]
    reply = stub.PlacePodGroup(request(pods, nodes=offered))
    assert reply.status == "placed" and {m.node for m in reply.members} <= set(offered), reply


@pytest.mark.parametrize("pods, why", [
    ([b"{not json"], "not JSON"), ([b"[1, 2]"], "not a Pod object"), ([], "pods is empty")],
    ids=["bad-json", "not-a-pod", "empty"])
def test_a_bad_request_is_invalid_argument(rpc, pods, why):
    _, stub = rpc
    with pytest.raises(grpc.RpcError) as caught:
        stub.PlacePodGroup(pb.PodGroupRequest(namespace="default", pod_group="x", pods=pods, nodes=["n-0-0"]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in caught.value.details()


def test_a_pod_outside_any_gang_is_invalid_argument(rpc):
    service, stub = rpc
    pod = make_pod("loner", gpus=8)
    observe(service, [pod])
    with pytest.raises(grpc.RpcError) as caught:
        stub.PlacePodGroup(request([pod], service=service))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a member of any gang" in caught.value.details()


def test_the_go_plugins_embedded_descriptor_matches_the_python_stubs():
    """kubeplugin/placement.desc (what the Go plugin builds its messages from) is the proto the stubs were made of."""
    from pathlib import Path

    from google.protobuf import descriptor_pb2

    desc = Path(__file__).resolve().parents[2] / "kubeplugin" / "placement.desc"
    embedded = descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes())
    stubs = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert [f.name for f in embedded.file] == ["meshfit/v1/placement.proto"]
    theirs = embedded.file[0]
    messages = list(theirs.message_type)
    while messages:  # protoc's descriptor sets carry json_name; the Python stubs' copy leaves it out
        message = messages.pop()
        messages.extend(message.nested_type)
        for field in message.field:
            field.ClearField("json_name")
    assert theirs == stubs, "regenerate kubeplugin/placement.desc (kubeplugin/README.md)"


@pytest.mark.parametrize("through", ["extender-filter", "group-cycle"])
def test_members_placed_for_the_group_cycle_are_never_requeued_by_meshfit(through):
    """kube-scheduler's own queue retries a PodGroup; the extender path's requeue of quiet members is not for them."""
    service = make_service(actions=MemoryActions(), synchronous_actions=True)
    pods = [gang_pod("llm", i, 2, parallelism="tp=8,dp=2") for i in range(2)]
    observe(service, pods)
    if through == "group-cycle":
        assert place_pod_group(service.scheduler, request(pods, service=service)).status == "placed"
    else:
        for pod in pods:
            assert service.scheduler.filter(pod, sorted(service.state.topology.node_by_name)).nodes
    service.clock.advance(60.0)  # reserved, not bound, quiet for a minute
    service.scheduler.tick()
    requeued = {c.pod.name for c in service.scheduler.actions.of("requeue")}
    assert requeued == (set() if through == "group-cycle" else {"llm-0", "llm-1"}), requeued


@pytest.mark.parametrize("group_cycle", [False, True], ids=["extender", "serve --group-cycle"])
def test_with_group_cycle_on_meshfit_neither_reserves_unasked_gangs_nor_requeues_them(group_cycle):
    """`meshfit serve --group-cycle`: a gang kube-scheduler has not reached yet waits in its queue untouched."""
    service = make_service(actions=MemoryActions(), synchronous_actions=True)
    if group_cycle:  # what the flag wires for the Workload API source; the label source stands in for it here
        service.scheduler.lifecycle.admission.group_cycle_sources = frozenset({"meshfit-label"})
    for i in range(2):
        pod = gang_pod("llm", i, 2, parallelism="tp=8,dp=2")
        pod["spec"]["schedulerName"] = "meshfit"
        service.state.upsert_pod(pod)
    for _ in range(3):  # never asked about for 90 s
        service.clock.advance(30.0)
        service.scheduler.tick()
    reserved = service.state.ledger.get("default/llm") is not None
    requeued = sorted({c.pod.name for c in service.scheduler.actions.of("requeue")})
    assert (reserved, requeued) == ((False, []) if group_cycle else (True, ["llm-0", "llm-1"]))
