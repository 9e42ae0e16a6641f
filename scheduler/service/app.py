"""The Starlette app of `meshfit serve`: extender verbs, Volcano verbs, health, metrics, reservations.

Routes answer both at the root (`/filter`) and under `/scheduler` (`/scheduler/filter`), so either
urlPrefix style works.  Handlers translate only; `GangScheduler` decides.  A background task
releases expired reservations every `sweep_seconds` even when no request arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from scheduler.service.verbs import extender, volcano
from scheduler.service.lifecycle.actions import ClusterActions
from scheduler.service.binding.binder import Binder, RankTablePublisher
from scheduler.service.ops.gcpolicy import GcPolicy
from scheduler.service.binding.ranktables import lookup_rank_table
from scheduler.service.ops.metrics import ServiceMetrics
from scheduler.service.verbs.scheduling import GangScheduler
from scheduler.cache.state import ClusterState

JSON = "application/json"
JSON_BYTES = JSON.encode()
RANK_TABLE_READ_WAIT_SECONDS = 2.0
"""How long `GET /ranktables/...` waits for rank-table publishes still queued in the background."""
SHUTDOWN_PUBLISH_SECONDS = 10.0
"""How long shutting down waits for queued rank-table publishes."""
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body accepted (`meshfit serve --max-body-bytes`); larger ones get 413 unread."""
Handler = Callable[[GangScheduler, bytes], tuple[int, bytes]]


def encode_error(reason: str) -> bytes:
    """`{"error": reason}` as JSON bytes, the reason on one line."""
    return json.dumps({"error": " ".join(reason.split())}).encode()


INTERNAL_ERROR = encode_error("internal error (logged by meshfit); the server keeps serving")
log = logging.getLogger("meshfit.http")


def build_scheduler(state: ClusterState, binder: Binder, policy: str = "meshfit",
                    publisher: RankTablePublisher | None = None, actions: ClusterActions | None = None,
                    **options: Any) -> tuple[GangScheduler, ServiceMetrics]:
    """A `GangScheduler` wired to a fresh `ServiceMetrics`; ValueError for an unknown policy.

    Rank tables go to `publisher` (real mode: `scheduler.kube.configmap.KubeRankTablePublisher`),
    or stay in memory (`MemoryRankTables`, the embedded mode) when it is None; requeues, evictions
    and Events go to `actions` (real mode: `scheduler.kube.actions.KubeActions`, else recorded in
    memory).  `options` go to `GangScheduler` (e.g. `completion_timeout`), except `failures`: a
    `scheduler.service.lifecycle.failures.FailureOptions` that installs failure replacement and spares (the result
    is kept as `scheduler.failures`).
    """
    from scheduler.placement.policy import get_policy

    get_policy(policy)
    failures = options.pop("failures", None)
    metrics = ServiceMetrics(state)
    scheduler = GangScheduler(state, binder, policy, on_placed=metrics.observe_placement,
                              on_expired=metrics.observe_expiries, publisher=publisher,
                              on_publish_failed=metrics.observe_publish_failure, actions=actions, **options)
    metrics.watch_scheduler(scheduler)
    if failures is not None:
        from scheduler.service.lifecycle.failures import install_failure_handling

        scheduler.failures = install_failure_handling(scheduler, metrics, failures)
    return scheduler, metrics


VerbCall = Callable[[bytes], Awaitable[tuple[int, bytes]]]
"""One protocol verb: request body -> (HTTP status, JSON reply), timed into the verb's latency histogram."""


def log_request(method: str, target: str, status: int, seconds: float) -> None:
    """One request line at debug: method, verb or path, status, duration."""
    log.debug("%s %s %d %.2f ms", method, target, status, seconds * 1000.0,
              extra={"method": method, "verb": target, "status": status, "duration_ms": round(seconds * 1000.0, 3)})


def _verb_call(verb: str, handler: Handler, scheduler: GangScheduler, metrics: ServiceMetrics,
               threaded: bool = False) -> VerbCall:
    histogram = metrics.latency.labels(verb)

    async def call(body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        if threaded:
            status, payload = await run_in_threadpool(handler, scheduler, body)
        else:
            status, payload = handler(scheduler, body)
        elapsed = time.perf_counter() - started
        histogram.observe(elapsed)
        if log.isEnabledFor(logging.DEBUG):
            log_request("POST", verb, status, elapsed)
        return status, payload

    return call


def verb_calls(scheduler: GangScheduler, metrics: ServiceMetrics) -> dict[str, VerbCall]:
    """Every POST verb by path: extender verbs at the root and under `/scheduler`, Volcano's under `/volcano`."""
    verbs: list[tuple[str, Handler, bool]] = [
        ("filter", extender.handle_filter, False),
        ("guard", extender.handle_guard, False),
        ("prioritize", extender.handle_prioritize, False),
        ("bind", extender.handle_bind, True),  # API round trips: in a worker thread, never on the loop
        ("preempt", extender.handle_preempt, False),
    ]
    calls: dict[str, VerbCall] = {}
    for verb, handler, threaded in verbs:
        call = _verb_call(verb, handler, scheduler, metrics, threaded)
        calls[f"/{verb}"] = calls[f"/scheduler/{verb}"] = call
    for verb, handler in volcano.HANDLERS.items():
        calls[f"/volcano/{verb}"] = _verb_call(f"volcano/{verb}", handler, scheduler, metrics)
    return calls


class FastVerbs:
    """ASGI front answering `POST` to a verb path directly; everything else goes to the Starlette app.

    The verbs are plain bytes in, bytes out, and kube-scheduler calls them for every pod: skipping
    Starlette's middleware stack, router and Request/Response objects saves a measurable share of
    a reserved member's ~0.3 ms per request.  The same paths are also Starlette routes (405 for
    other methods, and the reference of what is served).
    """

    def __init__(self, app: Starlette, calls: dict[str, VerbCall], max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 authorize: Any = None) -> None:
        self.app = app
        self.calls = calls
        self.state = app.state
        self.max_body_bytes = max_body_bytes
        self.authorize = authorize  # scheduler.service.ops.tls.VerbAuth: who may call the verbs (None: anyone)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        call = self.calls.get(scope.get("path", "")) if scope["method"] == "POST" else None
        if call is None:
            await self._starlette(scope, receive, send)
            return
        if self.authorize is not None and (refusal := self.authorize.check_scope(scope)) is not None:
            status, payload, headers = refusal  # before reading the body: an unauthorized caller costs nothing
            log.warning("%s %s refused: %d %s", scope["method"], scope.get("path", ""), status, payload.decode())
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        status, payload = await self._read_body(scope, receive)
        if status == 0:
            try:
                status, payload = await call(payload)
            except Exception:  # noqa: BLE001 - last resort: a bug in one request must not stop the server
                log.exception("%s %s failed", scope["method"], scope.get("path", ""))
                status, payload = 500, INTERNAL_ERROR
        elif status < 0:
            return  # the client went away
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", JSON_BYTES), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    async def _read_body(self, scope, receive) -> tuple[int, bytes]:
        """(0, body); (413, reason) as soon as the body is known to exceed the limit (the rest is never
        read); (-1, b"") when the client disconnected."""
        limit = self.max_body_bytes
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                if not value.isdigit():
                    return 400, encode_error("malformed Content-Length header")
                if int(value) > limit:
                    return 413, self._too_large()
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return -1, b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return 413, self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return 0, b"".join(chunks)

    def _too_large(self) -> bytes:
        return encode_error(f"request body larger than {self.max_body_bytes} bytes (meshfit serve --max-body-bytes)")

    async def _starlette(self, scope, receive, send) -> None:
        """The Starlette app; an exception escaping it is logged and, if no answer started yet, a JSON 500."""
        started, status = time.perf_counter(), [0]

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:  # noqa: BLE001 - last resort: the server keeps serving
            log.exception("%s %s failed", scope["method"], scope.get("path", ""))
            if status[0] == 0:
                status[0] = 500
                await send({"type": "http.response.start", "status": 500,
                            "headers": [(b"content-type", JSON_BYTES),
                                        (b"content-length", str(len(INTERNAL_ERROR)).encode())]})
                await send({"type": "http.response.body", "body": INTERNAL_ERROR})
        finally:
            if log.isEnabledFor(logging.DEBUG):
                log_request(scope["method"], scope.get("path", ""), status[0], time.perf_counter() - started)


def _routes(scheduler: GangScheduler, metrics: ServiceMetrics, ready: Callable[[], bool],
            calls: dict[str, VerbCall]) -> list[Route]:
    def endpoint_of(call: VerbCall):
        async def endpoint(request: Request) -> Response:
            status, payload = await call(await request.body())
            return Response(payload, status_code=status, media_type=JSON)

        return endpoint

    routes = [Route(path, endpoint_of(call), methods=["POST"]) for path, call in calls.items()]

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        return PlainTextResponse("ok") if ready() else PlainTextResponse("cluster state not synced", 503)

    async def metrics_endpoint(_: Request) -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def reservations(_: Request) -> Response:
        return JSONResponse(scheduler.reservations())

    async def gangs(_: Request) -> Response:
        return JSONResponse({"gangs": scheduler.gangs()})

    async def spares(_: Request) -> Response:
        from scheduler.service.lifecycle.failures import spares_json

        return JSONResponse(spares_json(scheduler))

    async def rank_table(request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        if not scheduler.rank_tables.wait_idle(0):  # a filter just queued a publish: read after it
            await run_in_threadpool(scheduler.rank_tables.wait_idle, RANK_TABLE_READ_WAIT_SECONDS)
        configmap = lookup_rank_table(scheduler.publisher, namespace, name)
        if configmap is None:
            return JSONResponse({"error": f"no rank table published for job {namespace}/{name} (not placed "
                                          f"yet, or placed before this service started)"}, 404)
        return JSONResponse(configmap)

    return routes + [Route("/healthz", healthz), Route("/readyz", readyz),
                     Route("/metrics", metrics_endpoint), Route("/reservations", reservations), Route("/gangs", gangs),
                     Route("/spares", spares),
                     Route("/ranktables/{namespace}/{name}", rank_table, methods=["GET"])]


def create_app(scheduler: GangScheduler, metrics: ServiceMetrics, ready: Callable[[], bool] = lambda: True,
               sweep_seconds: float = 1.0, gc_policy: GcPolicy | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, authorize: Any = None) -> FastVerbs:
    """The ASGI app serving every verb of one scheduler (with `gc_policy`, its sweeper also re-freezes
    the long-lived state for the garbage collector after rebuilds; see `scheduler.service.ops.gcpolicy`)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette):
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(sweep_seconds)
                try:
                    await run_in_threadpool(scheduler.tick)  # expiries, rollbacks, requeues, the gang queue
                    if scheduler.rank_tables.due():
                        await run_in_threadpool(scheduler.publish_due)  # retries failed publishes (API I/O)
                    if gc_policy is not None:
                        gc_policy.maybe_refreeze()
                except Exception:  # noqa: BLE001 - one failed round must not end the background work for good
                    log.exception("background sweep failed; retrying in %s s", sweep_seconds)

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await run_in_threadpool(scheduler.rank_tables.wait_idle, SHUTDOWN_PUBLISH_SECONDS)
            await run_in_threadpool(scheduler.shutdown)  # no wake-up, Binding or action runs after the service

    calls = verb_calls(scheduler, metrics)
    async def internal_error(_: Request, __: Exception) -> Response:  # logged by FastVerbs, which sees it re-raised
        return Response(INTERNAL_ERROR, status_code=500, media_type=JSON)

    app = Starlette(routes=_routes(scheduler, metrics, ready, calls), lifespan=lifespan,
                    exception_handlers={Exception: internal_error})
    app.state.scheduler = scheduler
    app.state.metrics = metrics
    return FastVerbs(app, calls, max_body_bytes, authorize)
