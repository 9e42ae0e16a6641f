"""gRPC Placement and health over loopback."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scheduler.service.verbs.grpc_service import SERVICE_NAME, serve_grpc
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2_grpc as pb_grpc
from tests.service.helpers import make_service


@pytest.fixture()
def grpc_env():
    service = make_service()
    server = serve_grpc(service.scheduler, "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
    yield service, pb_grpc.PlacementStub(channel), channel
    channel.close()
    server.stop(grace=None)


def spec(**overrides) -> pb.GangSpec:
    """A 2-pod x 8-GPU gang spec."""
    fields = {"namespace": "ml", "name": "llm", "pods": 2, "gpus_per_pod": 8, "parallelism": "tp=8,dp=2"}
    fields.update(overrides)
    return pb.GangSpec(**fields)


def test_health_reports_serving(grpc_env):
    _, _, channel = grpc_env
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE_NAME):
        assert stub.Check(health_pb2.HealthCheckRequest(service=name)).status == health_pb2.HealthCheckResponse.SERVING


def test_place_dry_run_returns_ranks_and_cost_without_reserving(grpc_env):
    service, stub, _ = grpc_env
    reply = stub.Place(pb.PlaceRequest(gang=spec()))
    assert reply.status == "placed" and reply.job == "ml/llm" and not reply.reserved
    assert [list(p.ranks) for p in reply.pods] == [list(range(8)), list(range(8, 16))]
    assert reply.step_comm_seconds >= reply.lower_bound_seconds > 0
    assert service.state.topology.gpus_free == 64


def test_place_with_reserve_holds_the_gang_and_lists_it(grpc_env):
    service, stub, _ = grpc_env
    reply = stub.Place(pb.PlaceRequest(gang=spec(), reserve=True))
    assert reply.reserved and service.state.topology.gpus_free == 48
    got = stub.GetReservation(pb.GetReservationRequest(gang="ml/llm"))
    assert got.status == "reserved" and dict(got.pods) == {p.name: p.node for p in reply.pods}
    assert [r.gang for r in stub.ListReservations(pb.ListReservationsRequest()).reservations] == ["ml/llm"]


@pytest.mark.parametrize("bad", [spec(name=""), spec(pods=0), spec(parallelism="tp=3"), spec(parallelism="zz=2")],
                         ids=["no-name", "no-pods", "world-size", "unknown-axis"])
def test_bad_spec_is_invalid_argument(grpc_env, bad):
    _, stub, _ = grpc_env
    with pytest.raises(grpc.RpcError) as err:
        stub.Place(pb.PlaceRequest(gang=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details()


def test_unknown_reservation_is_not_found_and_explain_answers(grpc_env):
    _, stub, _ = grpc_env
    with pytest.raises(grpc.RpcError) as err:
        stub.GetReservation(pb.GetReservationRequest(gang="ml/none"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    text = stub.Explain(pb.PlaceRequest(gang=spec(pods=9))).explanation
    assert text.startswith("unschedulable") and "72" in text
