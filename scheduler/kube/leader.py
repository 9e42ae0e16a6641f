"""Leader election for `meshfit serve --leader-elect`: one replica serves, the others stand by.

The election is the official client's (`kubernetes.leaderelection`, client-go's algorithm) on a
`coordination.k8s.io/v1` Lease, with a lock (`MeshfitLeaseLock`) that adds what the client's own
`LeaseLock` lacks for a process that must never act without the lease:

- every Lease request has a timeout (a hung renew cannot keep a stale leader serving);
- `leaseTransitions` is counted as client-go counts it (each change of holder);
- optimistic concurrency: every write is a replace carrying the resourceVersion just read, so of two
  candidates racing for an expired lease exactly one wins (the other gets 409 Conflict);
- a watchdog on the monotonic clock: the leader counts as leader only while its last successful
  renew was *sent* less than `renew_deadline` ago (< `lease_duration`, after which a standby may
  take the lease), whatever the renew loop is doing;
- release on graceful shutdown (holder cleared, duration 1 s), so a rolling update hands over in
  about one retry period instead of a whole lease duration.

A standby keeps no cluster cache: its ledger is empty and its background sweep has nothing to act
on, so it never evicts, requeues or publishes behind the leader's back.  On gaining the lease the
replica lists everything (`run_cache`: one `replace_all`, which rebuilds the gang ledger from bound
pods, the `meshfit.io/*` bind annotations and nominated nodes, i.e. from what the old leader did),
then starts watching, then becomes ready.  Until then `/readyz` is 503 ("standby ...") and every
verb is 503 with a one-line JSON reason (`StandbyGate`), so a misrouted call fails fast instead of
being decided on a cold ledger.  Losing the lease ends the process at once (exit 1, one log line),
as kube-scheduler does: the Deployment restarts it as a standby.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from scheduler.kube.lease_lock import Halted, lease_lock_class

log = logging.getLogger("meshfit.leader")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "meshfit-system"
DEFAULT_LEASE_NAME = "meshfit"


def default_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace (in-cluster service-account file), else `meshfit-system`."""
    try:
        return path.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def default_identity() -> str:
    """`<hostname>_<pid>`: unique per process (the pod name is the hostname in Kubernetes)."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True)
class LeaderOptions:
    """The `--leader-elect-*` flags."""

    namespace: str = ""
    name: str = DEFAULT_LEASE_NAME
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def resolved(self) -> "LeaderOptions":
        """These options with the defaults that depend on where we run filled in."""
        return LeaderOptions(self.namespace or default_namespace(), self.name, self.identity or default_identity(),
                             self.lease_duration, self.renew_deadline, self.retry_period)

    def problem(self) -> str:
        """The one-line reason these options cannot work ("" when they can); the client's own rules."""
        lease, renew, retry = self.lease_duration, self.renew_deadline, self.retry_period
        if not all(math.isfinite(v) for v in (lease, renew, retry)):
            return "--leader-elect-lease-duration / -renew-deadline / -retry-period must be finite numbers"
        if retry < 1:
            return f"--leader-elect-retry-period must be >= 1 second, got {retry:g}"
        if renew <= 1.2 * retry:
            return (f"--leader-elect-renew-deadline ({renew:g}s) must be greater than 1.2 x "
                    f"--leader-elect-retry-period ({retry:g}s)")
        if lease <= renew:
            return (f"--leader-elect-lease-duration ({lease:g}s) must be greater than "
                    f"--leader-elect-renew-deadline ({renew:g}s)")
        if int(lease) != lease:
            return f"--leader-elect-lease-duration must be whole seconds (Lease leaseDurationSeconds), got {lease:g}"
        if not self.name or not _dns_label(self.name):
            return f"--leader-elect-lease-name must be a DNS-1123 name, got {self.name!r}"
        if self.namespace and not _dns_label(self.namespace):
            return f"--leader-elect-namespace must be a DNS-1123 label, got {self.namespace!r}"
        return ""


def leader_flags_problem(options: LeaderOptions | None, embedded: bool) -> str:
    """The one-line reason `--leader-elect*` flags cannot work ("" when they can, or when off)."""
    if options is None:
        return ""
    if embedded:
        return "--leader-elect needs real mode (--kubeconfig, or in-cluster config), not --cluster"
    return options.problem()


def _dns_label(text: str) -> bool:
    import re

    return len(text) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", text) is not None


def exit_process(reason: str) -> None:
    """Default reaction to losing the lease: one log line, then exit 1 at once (no further decision)."""
    log.error("lost leadership (%s): exiting so that this replica restarts as a standby", reason,
              extra={"event": "leader-lost", "reason": reason})
    for handler in logging.getLogger().handlers + log.handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


class LeaderElector:
    """Runs the election in a thread; `serving()` is True only while leading *and* re-listed.

    `on_started_leading` callbacks run in order once the lease is won (the first re-lists the
    cluster); `serving()` turns True after the last returns.  `on_lost(reason)` runs when the
    lease is lost (renew failed, or the watchdog saw no successful renew for `renew_deadline`).
    """

    def __init__(self, api_client: Any, options: LeaderOptions,
                 on_started_leading: Iterable[Callable[[], None]] = (),
                 on_lost: Callable[[str], None] = exit_process) -> None:
        self.options = options.resolved()
        self.api_client = api_client
        self.on_started_leading = list(on_started_leading)
        self.on_lost = on_lost
        self.lock = lease_lock_class()(api_client, self.options.name, self.options.namespace,
                                        self.options.identity, request_timeout=max(1.0, self.options.retry_period))
        self.leading = threading.Event()  # won the lease (and not lost it)
        self.ready = threading.Event()  # ... and the callbacks (re-list) finished
        self.lost = threading.Event()
        self.stopping = False
        self.became_leader_at: float | None = None
        self._threads: list[threading.Thread] = []
        self.cache: Any = None  # the list+watch cache, started once leading
        self.cache_stop = threading.Event()
        self.grpc_server: Any = None  # started once leading (see start_leader_election)

    # ----- state -------------------------------------------------------------------------------
    def fresh(self) -> bool:
        """True while our last successful renew was sent less than `renew_deadline` ago."""
        renewed = self.lock.renewed_at
        return renewed is not None and time.monotonic() - renewed < self.options.renew_deadline

    def is_leader(self) -> bool:
        """Holding a lease that is certainly still ours."""
        return self.leading.is_set() and not self.lost.is_set() and self.fresh()

    def serving(self) -> bool:
        """Leader, re-listed: the verbs may be answered."""
        return self.ready.is_set() and self.is_leader()

    def holder(self) -> str:
        """The holder last seen on the Lease ("" when none / not read yet)."""
        return self.lock.holder

    def standby_reason(self) -> str:
        """One line: why this replica does not answer now."""
        o = self.options
        if self.is_leader():
            return f"meshfit {o.identity} just became leader of Lease {o.namespace}/{o.name} and is re-listing the cluster"
        holder = self.holder()
        held = f"held by {holder}" if holder and holder != o.identity else "not held by this replica"
        return f"meshfit standby {o.identity}: Lease {o.namespace}/{o.name} is {held}; send verbs to the leader"

    # ----- running -----------------------------------------------------------------------------
    def start(self) -> "LeaderElector":
        """Start the election thread and the watchdog; returns at once."""
        from kubernetes.leaderelection import electionconfig, leaderelection

        o = self.options
        config = electionconfig.Config(self.lock, lease_duration=int(o.lease_duration),
                                       renew_deadline=o.renew_deadline, retry_period=o.retry_period,
                                       onstarted_leading=self._started, onstopped_leading=self._stopped)
        election = leaderelection.LeaderElection(config)
        if not log.isEnabledFor(logging.DEBUG):  # the client logs every retry at info ("yet to finish ...")
            logging.getLogger("leaderelection").setLevel(logging.WARNING)
        log.info("leader election: %s is a candidate for Lease %s/%s (lease %gs, renew deadline %gs, retry %gs)",
                 o.identity, o.namespace, o.name, o.lease_duration, o.renew_deadline, o.retry_period,
                 extra={"identity": o.identity, "lease": f"{o.namespace}/{o.name}"})
        def run() -> None:
            try:
                election.run()
            except Halted:
                pass
            except Exception:  # noqa: BLE001 - a bug in the loop: as leader the watchdog exits, as standby say so
                log.exception("leader election loop failed; this replica can no longer become leader")

        for target, name in ((run, "meshfit-leader-election"), (self._watchdog, "meshfit-leader-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _started(self) -> None:
        if self.stopping:
            return
        self.became_leader_at = time.monotonic()
        self.leading.set()
        o = self.options
        log.info("%s became leader of Lease %s/%s: re-listing the cluster before serving", o.identity,
                 o.namespace, o.name, extra={"event": "leader-elected", "identity": o.identity})
        for callback in self.on_started_leading:
            callback()
            if self.lost.is_set():
                return
        self.ready.set()
        log.info("%s is leader and serving (%.2f s after winning the lease)", o.identity,
                 time.monotonic() - self.became_leader_at, extra={"event": "leader-serving"})

    def _stopped(self) -> None:
        self._lose("could not renew the Lease within the renew deadline")

    def _watchdog(self) -> None:
        period = min(0.5, self.options.retry_period / 4)
        while not self.lost.is_set():
            time.sleep(period)
            if self.leading.is_set() and not self.fresh() and not self.stopping:
                self._lose(f"no successful Lease renew for {self.options.renew_deadline:g} s")
                return

    def _lose(self, reason: str) -> None:
        if self.stopping or self.lost.is_set():
            return
        self.lost.set()
        self.ready.clear()
        self.on_lost(reason)

    def shutdown(self) -> None:
        """Graceful stop (after the server drained): stop renewing and release the lease if held."""
        self.stopping = True
        was_leader = self.is_leader()
        self.ready.clear()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=5).wait(10)
        self.cache_stop.set()
        if self.lock.release():
            log.info("released Lease %s/%s", self.options.namespace, self.options.name)
        elif was_leader:
            log.info("Lease %s/%s not released; it expires in %gs", self.options.namespace, self.options.name,
                     self.options.lease_duration)


class StandbyGate:
    """ASGI front: while the replica is not serving, `/readyz` is 503 and every verb 503 with a JSON reason."""

    def __init__(self, app: Any, elector: LeaderElector, verb_paths: Iterable[str] | None = None) -> None:
        self.app, self.elector = app, elector
        self.verb_paths = frozenset(verb_paths if verb_paths is not None else getattr(app, "calls", {}))

    def __getattr__(self, name: str) -> Any:  # app.state, app.calls ... of the wrapped app
        if name == "app":
            raise AttributeError(name)
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and not self.elector.serving():
            path = scope.get("path", "")
            if path == "/readyz":
                await _answer(send, 503, b"text/plain; charset=utf-8", self.elector.standby_reason().encode())
                return
            if scope.get("method") == "POST" and path in self.verb_paths:
                body = json.dumps({"error": self.elector.standby_reason()}).encode()
                await _answer(send, 503, b"application/json", body)
                return
        await self.app(scope, receive, send)


async def _answer(send, status: int, content_type: bytes, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": body})


def start_leader_election(state: Any, api_client: Any, options: LeaderOptions,
                          grpc_start: Callable[[], Any] | None = None,
                          on_lost: Callable[[str], None] = exit_process, **cache_options: Any) -> LeaderElector:
    """Stand by for the lease; once won, list + watch the cluster into `state` (rebuilding the gang
    ledger from what the API server holds), start gRPC (`grpc_start`, if any: a standby has no gRPC
    listener, so gRPC clients fail fast with UNAVAILABLE), then serve.  `elector.shutdown()` stops
    that gRPC server and releases the lease."""
    from scheduler.kube import run_cache

    elector: LeaderElector

    def relist() -> None:
        began = time.monotonic()
        elector.cache = run_cache(state, api_client, stop_event=elector.cache_stop, **cache_options)
        log.info("re-listed the cluster as leader in %.2f s: %d nodes (state generation %s)",
                 time.monotonic() - began, len(getattr(getattr(state, "topology", None), "nodes", ()) or ()),
                 getattr(state, "generation", "?"))

    def start_grpc() -> None:
        if grpc_start is not None:
            elector.grpc_server = grpc_start()

    elector = LeaderElector(api_client, options, [relist, start_grpc], on_lost)
    return elector.start()


__all__ = ["DEFAULT_LEASE_NAME", "DEFAULT_NAMESPACE", "LeaderElector", "LeaderOptions", "StandbyGate",
           "default_identity", "default_namespace", "exit_process", "leader_flags_problem", "start_leader_election"]
