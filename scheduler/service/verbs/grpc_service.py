"""gRPC `meshfit.v1.Placement` (Place, Explain, GetReservation, ListReservations, PlacePodGroup) plus gRPC health.

A thin translation onto `GangScheduler`: a `GangSpec` becomes a `Gang`, a `Placement` becomes a
`PlaceResponse`.  Bad specs answer INVALID_ARGUMENT with the one-line reason; an unknown gang in
GetReservation answers NOT_FOUND.
"""

from __future__ import annotations

import json
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scheduler.placement.jobs import JobSpecError, ModelShape, Parallelism, TopologyConstraint
from scheduler.gangs.sources import GangMembership as Membership
from scheduler.gangs.membership import gang_from_membership
from scheduler.placement.result import Placement
from scheduler.service.verbs.pod_group_rpc import PodGroupError, place_pod_group
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2_grpc as pb_grpc
from scheduler.service.verbs.scheduling import GangScheduler
from topology.model import TopologyError

SERVICE_NAME = "meshfit.v1.Placement"


def gang_from_spec(spec: pb.GangSpec):
    """The `Gang` a `GangSpec` describes; JobSpecError with one line if it is incomplete."""
    if not spec.name:
        raise JobSpecError("gang.name is required")
    if spec.pods < 1 or spec.gpus_per_pod < 1:
        raise JobSpecError(f"gang {spec.name}: pods and gpus_per_pod must be >= 1")
    member = Membership(
        gang_key=f"{spec.namespace or 'default'}/{spec.name}", index=0, size=spec.pods, source="grpc",
        parallelism=Parallelism.parse(spec.parallelism) if spec.parallelism else None,
        rank_order=spec.rank_order or None,
        model=ModelShape.parse(spec.model) if spec.model else None,
        constraint=TopologyConstraint(spec.required_level or None, spec.preferred_level or None,
                                      tuple(spec.assigned_domains)),
        gpus_per_pod=spec.gpus_per_pod)
    return gang_from_membership(member)


def placement_response(placement: Placement, reserved: bool) -> pb.PlaceResponse:
    """Wire form of a placement (with the full DESIGN JSON in `placement_json`)."""
    doc = placement.to_json()
    response = pb.PlaceResponse(
        job=doc["job"], status=doc["status"], reason=doc["reason"] or "", policy=doc["policy"],
        rank_order=doc["rank_order"], placement_json=json.dumps(doc), reserved=reserved)
    for pod in doc["pods"]:
        response.pods.add(index=pod["index"], name=pod["name"], node=pod["node"], ranks=pod["ranks"])
    if doc["cost"]:
        response.step_comm_seconds = doc["cost"]["step_comm_seconds"]
        response.lower_bound_seconds = doc["cost"]["lower_bound_seconds"]
        response.by_axis.update(doc["cost"]["by_axis"])
        response.tier_by_axis.update(doc["cost"]["tier_by_axis"])
    return response


def reservation_message(doc: dict) -> pb.Reservation:
    """Wire form of one `/reservations` entry."""
    return pb.Reservation(gang=doc["gang"], status=doc["status"], pods=doc["pods"],
                          expires_at=doc["expires_at"] or 0.0)


class PlacementServicer(pb_grpc.PlacementServicer):
    """Implements meshfit.v1.Placement over one `GangScheduler`."""

    def __init__(self, scheduler: GangScheduler, auth=None) -> None:
        self.scheduler = scheduler
        self.auth = auth  # scheduler.service.ops.tls.VerbAuth: who may reserve (None: anyone)

    def _gang(self, request: pb.PlaceRequest, context: grpc.ServicerContext):
        try:
            return gang_from_spec(request.gang)
        except (JobSpecError, TopologyError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def Place(self, request: pb.PlaceRequest, context: grpc.ServicerContext) -> pb.PlaceResponse:  # noqa: N802
        """Place the gang (dry run, or reserve it)."""
        if request.reserve and self.auth is not None and (refusal := self.auth.grpc_refusal(context)) is not None:
            context.abort(*refusal)
        gang = self._gang(request, context)
        try:
            placement = self.scheduler.place(gang, reserve=request.reserve)
        except (JobSpecError, TopologyError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        reserved = self.scheduler.reservation(gang.key) is not None
        return placement_response(placement, reserved)

    def Explain(self, request: pb.PlaceRequest, context: grpc.ServicerContext) -> pb.ExplainResponse:  # noqa: N802
        """One sentence on whether and where the gang fits now."""
        gang = self._gang(request, context)
        from scheduler.placement.explain import explain

        with self.scheduler.state.lock:
            try:
                text = explain(gang, self.scheduler.state.topology)
            except (JobSpecError, TopologyError, ValueError) as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.ExplainResponse(explanation=text)

    def GetReservation(self, request: pb.GetReservationRequest, context: grpc.ServicerContext) -> pb.Reservation:  # noqa: N802
        """One gang's reservation; NOT_FOUND if it has none."""
        doc = self.scheduler.reservation(request.gang)
        if doc is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no reservation for gang {request.gang!r}")
        return reservation_message(doc)

    def PlacePodGroup(self, request: pb.PodGroupRequest, context: grpc.ServicerContext,
                      ) -> pb.PodGroupPlacement:  # noqa: N802
        """A whole pod group's placement for kube-scheduler's group cycle (`scheduler.service.verbs.pod_group_rpc`)."""
        if self.auth is not None and (refusal := self.auth.grpc_refusal(context)) is not None:
            context.abort(*refusal)
        try:
            return place_pod_group(self.scheduler, request)
        except (PodGroupError, JobSpecError, TopologyError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def ListReservations(self, request: pb.ListReservationsRequest, context: grpc.ServicerContext,
                         ) -> pb.ListReservationsResponse:  # noqa: N802
        """Every reservation."""
        return pb.ListReservationsResponse(
            reservations=[reservation_message(d) for d in self.scheduler.reservations()])


def serve_grpc(scheduler: GangScheduler, address: str, workers: int = 4, tls=None, auth=None) -> grpc.Server:
    """Start the gRPC server (Placement + health) on `address` ("host:port", port 0 = any); returns it.

    With `tls` (`scheduler.service.ops.tls.ServerTLS`) the port serves TLS with the HTTP certificate (client
    certificates signed by its client CA required when it has one); `auth` guards `Place` with `reserve`."""
    # No SO_REUSEPORT (gRPC's default is on): a second server on a taken port must fail, not split the clients.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_PlacementServicer_to_server(PlacementServicer(scheduler, auth), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        port = (server.add_secure_port(address, tls.grpc_credentials()) if tls is not None
                else server.add_insecure_port(address))
    except RuntimeError:  # newer grpcio raises where older ones returned 0
        port = 0
    if port == 0:
        server.stop(None)
        raise OSError(f"cannot listen for gRPC on {address} (port in use, or address not available)")
    server.bound_port = port
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server
