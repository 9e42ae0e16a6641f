"""`meshfit serve`: the extender / Volcano / gRPC service, embedded (`--cluster`) or real (`--kubeconfig`)."""

from __future__ import annotations

import difflib
import logging
import math
import signal
import threading
from pathlib import Path
from typing import Any, Optional

import typer

from scheduler.cli.common import fail
from scheduler.gangs.queue import BACKFILL_MODES, backfill_rule

log = logging.getLogger("meshfit.serve")


def split_objects(objects: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """(nodes, pods, other objects) of a flattened List."""
    nodes = [o for o in objects if o.get("kind") == "Node"]
    pods = [o for o in objects if o.get("kind") == "Pod"]
    others = [o for o in objects if o.get("kind") not in ("Node", "Pod")]
    return nodes, pods, others


def embedded_state(cluster: Path, config: Any, tolerations: list[str], ttl: float):
    """A `ClusterState` loaded from a NodeList / List file, plus the in-memory binder."""
    from scheduler.service.binding.binder_memory import MemoryBinder
    from scheduler.cache.state import ClusterState
    from topology.loaders import read_objects

    state = ClusterState(config, tolerations, ttl)
    nodes, pods, others = split_objects([dict(o) for o in read_objects(cluster)])
    if not nodes:
        raise ValueError(f"{cluster}: no Node objects found (expected a NodeList, or a List containing Nodes)")
    state.replace_all(nodes, pods, others)
    return state, MemoryBinder()


def real_state(kubeconfig: Optional[Path], config: Any, tolerations: list[str], ttl: float, policy: str,
               start_cache: bool = True):
    """A `ClusterState` fed by the list+watch cache, plus the API-server binder (kubernetes imported here only)."""
    import kubernetes

    from scheduler.cache.state import ClusterState
    from scheduler.kube.kubeconfig import load_kubeconfig

    if kubeconfig is not None:
        load_kubeconfig(kubeconfig)
    else:
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException as exc:
            raise ValueError("no cluster to serve: give --cluster FILE (embedded mode) or --kubeconfig FILE, or run "
                             f"inside a pod (in-cluster config: {exc})") from None
    configuration = kubernetes.client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_CONNECTIONS  # the binds, verbs and watches never queue for one
    api_client = kubernetes.client.ApiClient(configuration)
    from scheduler.kube import run_cache
    from scheduler.kube.binder import KubeBinder
    from scheduler.kube.node_fit import pod_needs

    state = ClusterState(config, tolerations, ttl)
    state.needs_of = pod_needs  # what the direct binder checks a member against its node with
    from scheduler.kube.api import pod_getter

    state.pod_lookup = pod_getter(api_client)  # a pod the watch has not shown: one GET, never state from a body
    state.policy = policy  # the first list already re-holds the missing members of partly bound gangs
    state.watch_is_truth = True  # request bodies select pods, never overwrite what the API server says
    if start_cache:  # with --leader-elect the cache starts (a fresh list) only once the lease is won
        threading.Thread(target=run_cache, args=(state, api_client), name="meshfit-cache", daemon=True).start()
    return state, KubeBinder(api_client)


def kube_direct_binding(state: Any, binder: Any, fence_seconds: float, workers: int, backlog_limit: int,
                        always_nominate: bool = False) -> Any:
    """The direct binder's parts in Kubernetes mode: node-fit and race checks over the watched state, and
    nominations written through the binder's API client."""
    from scheduler.kube.binder import KubeNominator
    from scheduler.kube.node_fit import RoomFit
    from scheduler.service.binding.binding_wiring import DirectBinding

    return DirectBinding(RoomFit(state), KubeNominator(binder.api_client),
                         fence_seconds, workers, backlog_limit, always_nominate)


API_CONNECTIONS = 128
"""Connections the API client keeps: bind workers, kube-scheduler's concurrent `/bind` verbs (up to 40), the
action and rank-table threads and one long-lived watch per resource, with room to spare (the client's default
of 10 made every extra bind open a new TLS connection)."""
STALE_AFTER_SECONDS = 15.0
"""A watch failing this long makes `/readyz` false: decisions would be taken on a stale view."""


def kube_state_fresh(state: Any) -> bool:
    """Ready in Kubernetes mode: listed at least once, and no watch failing for `STALE_AFTER_SECONDS`."""
    import time

    since = state.cache_failing_since
    return state.generation > 0 and (since is None or time.monotonic() - since < STALE_AFTER_SECONDS)


def kube_actions(binder: Any):
    """Real mode's requeue / evict / Event actions, sharing the binder's API client."""
    from scheduler.kube.actions import KubeActions

    return KubeActions(binder.api_client)


def kube_rank_table_publisher(binder: Any):
    """Real mode's rank-table publisher, sharing the binder's API client."""
    from scheduler.kube.configmap import KubeRankTablePublisher

    return KubeRankTablePublisher(binder.api_client)


def _start_grpc(scheduler, port: int, host: str, tls: Any = None, auth: Any = None):
    try:
        from scheduler.service.verbs.grpc_service import serve_grpc
    except ImportError as exc:  # grpc stubs missing from a slim install
        log.warning("gRPC disabled: %s", exc)
        return None
    from scheduler.service.ops.server import check_free

    check_free(host, port, "gRPC")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return serve_grpc(scheduler, address, tls=tls, auth=auth)


def default_host(cluster: Optional[Path]) -> str:
    """Listen address without `--host`: loopback for the embedded try-it-out mode (its /bind has no
    authentication), every interface in real mode (in a pod, kube-scheduler connects from elsewhere)."""
    return "127.0.0.1" if cluster is not None else "0.0.0.0"


def check_flags(port: int, grpc_port: int, reservation_ttl: float, cluster: Optional[Path],
                kubeconfig: Optional[Path]) -> str:
    """The one-line reason the flags cannot work together ("" when they can)."""
    from scheduler.service.ops.server import check_port

    if cluster is not None and kubeconfig is not None:
        return "use either --cluster (embedded mode) or --kubeconfig (real mode), not both"
    if not math.isfinite(reservation_ttl) or reservation_ttl <= 0:
        return f"--reservation-ttl must be a number of seconds > 0, got {reservation_ttl}"
    reason = check_port("--port", port) or check_port("--grpc-port", grpc_port)
    if not reason and port and port == grpc_port:
        reason = f"--port and --grpc-port must differ, both are {port}"
    return reason


def log_started(mode: str, host: str, http_port: int, grpc_server: Any, state: Any, policy: str) -> None:
    """The start-up line: mode, address, ports, nodes and GPUs known now, policy."""
    with state.lock:
        topo = state.topology
        nodes, gpus = len(topo.nodes), topo.gpus_total
    grpc_port = grpc_server.bound_port if grpc_server is not None else 0
    synced = "" if mode == "embedded" else " (cluster cache still syncing: nodes appear as the list arrives)"
    log.info("meshfit serving %s mode on %s, HTTP port %d, gRPC port %s: %d nodes, %d GPUs, policy %s%s",
             mode, host, http_port, grpc_port or "off", nodes, gpus, policy, synced,
             extra={"mode": mode, "address": host, "http_port": http_port, "grpc_port": grpc_port,
                    "nodes": nodes, "gpus": gpus, "policy": policy})


def log_stopped(stop_signal: int | None) -> None:
    """The shutdown line."""
    cause = signal.Signals(stop_signal).name if stop_signal else "server exit"
    log.info("meshfit stopped (%s): requests drained, gRPC stopped", cause, extra={"signal": cause})


def register(app: typer.Typer) -> None:
    """Add `meshfit serve` to the CLI."""

    @app.command("serve")
    def serve(
        host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (default: 127.0.0.1 with "
                                           "--cluster, whose verbs have no authentication; 0.0.0.0 in real mode)."),
        port: int = typer.Option(8888, "--port", help="HTTP port (extender, Volcano, metrics)."),
        grpc_port: int = typer.Option(9090, "--grpc-port", help="gRPC port (0 disables gRPC)."),
        metrics_port: int = typer.Option(0, "--metrics-port",
                                         help="Also serve /metrics on this port of its own, plain HTTP even with "
                                              "--tls-cert-file, metrics only (0: off; /metrics stays on --port)."),
        cluster: Optional[Path] = typer.Option(None, "--cluster", help="Embedded mode: NodeList/List file."),
        kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Real mode: kubeconfig file."),
        policy: str = typer.Option("meshfit", "--policy", help="Placement policy."),
        reservation_ttl: float = typer.Option(120.0, "--reservation-ttl",
                                              help="Seconds a reservation lives while no member is bound "
                                                   "(refreshed by every member's progress)."),
        completion_timeout: float = typer.Option(300.0, "--gang-completion-timeout",
                                                 help="Seconds a partly bound gang may take to bind its last "
                                                      "member before it is rolled back whole."),
        preemption: bool = typer.Option(True, "--preemption/--no-preemption",
                                        help="A gang that does not fit may evict whole lower-priority gangs in one "
                                             "topology domain (docs/preemption.md)."),
        direct_bind: bool = typer.Option(True, "--direct-bind/--no-direct-bind",
                                         help="Real mode: once a gang is reserved, meshfit binds its members itself "
                                              "(after checking each against its node), instead of waiting for "
                                              "kube-scheduler to reach every member (docs/architecture.md)."),
        group_cycle: bool = typer.Option(False, "--group-cycle",
                                         help="kube-scheduler 1.36 runs the MeshfitPlacement plugin (kubeplugin/): "
                                              "PodGroup members are placed only when its group cycle asks "
                                              "(gRPC PlacePodGroup), never queued unasked or requeued by meshfit."),
        backfill: Optional[str] = typer.Option(None, "--backfill",
                                               help="Which later gangs may start before a waiting one: easy (only if "
                                                    "it costs the first waiting gang none of the slots it waits for; "
                                                    "no starvation; the default) or best-effort (whenever it fits, as "
                                                    "kube-scheduler's queue and Kueue's BestEffortFIFO; more gangs "
                                                    "bound, a big gang may starve; the default with --group-cycle, "
                                                    "where kube-scheduler's queue, or Kueue ahead of it, orders the "
                                                    "groups)."),
        bind_workers: int = typer.Option(16, "--bind-workers", help="Bindings meshfit posts in parallel (1-256)."),
        bind_backlog: int = typer.Option(128, "--bind-backlog",
                                         help="Real mode: members reserved and not yet bound at which meshfit reserves "
                                              "no further gang until they drain (1-100000; docs/architecture.md)."),
        bind_fence_seconds: float = typer.Option(
            2.0, "--bind-fence-seconds",
            help="Real mode: how long a nominated member waits at most for pods kube-scheduler may have been placing "
                 "before it saw the nomination (0-60; docs/architecture.md, \"Binding path\")."),
        always_nominate: bool = typer.Option(
            False, "--always-nominate", help="Real mode: nominate every member before its Binding, even one no pod "
            "can race (for a kube-scheduler running meshfit's profile without the /guard entry; docs/deployment.md)."),
        config: Optional[Path] = typer.Option(None, "--config", help="Topology config file (levels, links)."),
        toleration: list[str] = typer.Option([], "--toleration", help="Taint to tolerate (key[=value][:Effect])."),
        replace_unhealthy: bool = typer.Option(True, "--replace-unhealthy/--no-replace-unhealthy",
                                               help="Replace gang members bound to failed nodes on new nodes, same "
                                                    "ranks (docs/failures.md)."),
        unhealthy_grace: float = typer.Option(15.0, "--unhealthy-grace",
                                              help="Seconds a node must stay failed before its members are replaced."),
        unhealthy_condition: list[str] = typer.Option([], "--unhealthy-condition",
                                                      help="Node condition Type or Type=Status that marks a node "
                                                           "failed (repeat; replaces the defaults; 'none': no "
                                                           "condition source)."),
        unhealthy_label: list[str] = typer.Option([], "--unhealthy-label",
                                                  help="Node label key=value that marks a node failed (repeat; "
                                                       "replaces the default; 'none': no label source)."),
        unhealthy_ignore: list[str] = typer.Option([], "--unhealthy-ignore",
                                                   help="Built-in failure source to ignore: not-ready, cordoned, "
                                                        "no-execute or gpu-allocatable (repeat)."),
        spare_fraction: float = typer.Option(0.0, "--spare-fraction",
                                             help="Per leaf domain, hold ceil(F x nodes) whole free nodes as spares "
                                                  "for replacements (0 to 0.5)."),
        max_body_bytes: int = typer.Option(16 * 1024 * 1024, "--max-body-bytes",
                                           help="Largest request body accepted; larger ones get 413 unread."),
        leader_elect: bool = typer.Option(False, "--leader-elect",
                                          help="Real mode, several replicas: only the holder of a coordination.k8s.io "
                                               "Lease serves (and is ready); the others stand by and take over."),
        leader_elect_namespace: str = typer.Option("", "--leader-elect-namespace",
                                                   help="Namespace of the Lease (default: the pod's own, else "
                                                        "meshfit-system)."),
        leader_elect_lease_name: str = typer.Option("meshfit", "--leader-elect-lease-name", help="Lease name."),
        leader_elect_identity: str = typer.Option("", "--leader-elect-identity",
                                                  help="This replica's holder identity (default: hostname_pid)."),
        leader_elect_lease_duration: float = typer.Option(15.0, "--leader-elect-lease-duration",
                                                          help="Seconds a standby waits after the last renew "
                                                               "before taking the Lease."),
        leader_elect_renew_deadline: float = typer.Option(10.0, "--leader-elect-renew-deadline",
                                                          help="Seconds the leader keeps serving without a "
                                                               "successful renew (then it exits, status 1)."),
        leader_elect_retry_period: float = typer.Option(2.0, "--leader-elect-retry-period",
                                                        help="Seconds between Lease attempts (>= 1)."),
        log_format: str = typer.Option("text", "--log-format", help="Log lines as text or json (one object a line)."),
        log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error or critical "
                                                                   "(debug adds one line per request)."),
        tls_cert_file: Optional[Path] = typer.Option(None, "--tls-cert-file",
                                                     help="PEM certificate (chain): HTTPS, and TLS on gRPC."),
        tls_private_key_file: Optional[Path] = typer.Option(None, "--tls-private-key-file",
                                                            help="PEM private key of --tls-cert-file."),
        client_ca_file: Optional[Path] = typer.Option(None, "--client-ca-file",
                                                      help="Mutual TLS: the verbs need a client certificate "
                                                           "signed by this CA (GET endpoints stay open)."),
        allowed_client_names: Optional[str] = typer.Option(None, "--allowed-client-names",
                                                           help="NAME,...: client certificate CN or DNS SAN "
                                                                "allowed to call the verbs (default: any)."),
        verb_token_file: Optional[Path] = typer.Option(None, "--verb-token-file",
                                                       help="Without a client CA: the verbs need "
                                                            "'Authorization: Bearer <token in this file>'."),
        kueue: bool = typer.Option(True, "--kueue/--no-kueue",
                                   help="Real mode: serve Kueue AdmissionChecks whose controllerName is "
                                        "meshfit.io/topology (once Kueue's CRDs exist; on the leader only)."),
    ) -> None:
        """Serve the kube-scheduler extender, Volcano extender, gRPC placement API and metrics."""
        from scheduler.service.app import build_scheduler, create_app
        from scheduler.service.ops.gcpolicy import GcPolicy
        from scheduler.service.ops.logs import configure_logging
        from scheduler.service.ops.server import PortError, bind_http_socket, serve_http

        reason = check_flags(port, grpc_port, reservation_ttl, cluster, kubeconfig)
        host = host or default_host(cluster)
        if not reason and not (math.isfinite(completion_timeout) and completion_timeout > 0):
            reason = f"--gang-completion-timeout must be a number of seconds > 0, got {completion_timeout}"
        if not reason and max_body_bytes < 1:
            reason = f"--max-body-bytes must be >= 1, got {max_body_bytes}"
        backfill = backfill_rule(backfill, group_cycle)
        if not reason and backfill not in BACKFILL_MODES:
            close = difflib.get_close_matches(backfill, BACKFILL_MODES, n=1)
            reason = (f"--backfill must be one of {', '.join(BACKFILL_MODES)}, got {backfill!r}"
                      + (f" (did you mean {close[0]!r}?)" if close else ""))
        if not reason and not 1 <= bind_workers <= 256:
            reason = f"--bind-workers must be between 1 and 256, got {bind_workers}"
        if not reason and not 1 <= bind_backlog <= 100000:
            reason = f"--bind-backlog must be between 1 and 100000, got {bind_backlog}"
        if not reason and not 0 <= bind_fence_seconds <= 60:
            reason = f"--bind-fence-seconds must be between 0 and 60, got {bind_fence_seconds}"
        from scheduler.service.ops.metrics import metrics_port_problem, start_metrics_server

        reason = reason or metrics_port_problem(metrics_port, port, grpc_port)
        from scheduler.service.lifecycle.failures import failure_options_from_flags

        try:
            failure_options = failure_options_from_flags(replace_unhealthy, unhealthy_grace, unhealthy_condition,
                                                         unhealthy_label, unhealthy_ignore, spare_fraction)
        except ValueError as exc:
            reason = reason or str(exc)
        from scheduler.kube.leader import LeaderOptions, leader_flags_problem

        leader = LeaderOptions(leader_elect_namespace, leader_elect_lease_name, leader_elect_identity,
                               leader_elect_lease_duration, leader_elect_renew_deadline,
                               leader_elect_retry_period) if leader_elect else None
        reason = reason or leader_flags_problem(leader, cluster is not None)
        if reason:
            fail(reason)
        try:
            configure_logging(log_format, log_level.lower())
        except ValueError as exc:
            fail(str(exc))
        from scheduler.service.ops.tls import security_from_flags

        try:  # TLS files and the verb token: checked before any port is taken
            tls, verb_auth = security_from_flags(tls_cert_file, tls_private_key_file, client_ca_file,
                                                 allowed_client_names, verb_token_file)
        except ValueError as exc:
            fail(str(exc))
        try:
            http_socket = bind_http_socket(host, port)  # first: a taken port fails before any work
            if metrics_port:
                from scheduler.service.ops.server import check_free

                check_free(host, metrics_port, "metrics (--metrics-port)")
        except PortError as exc:
            fail(str(exc))
        grpc_server = metrics_server = None
        try:
            try:
                cfg = None
                if config is not None:
                    from topology.config import load_config

                    cfg = load_config(config)
                publisher = actions = None  # embedded mode: rank tables in memory, at GET /ranktables/{ns}/{job}
                if cluster is not None:
                    state, binder = embedded_state(cluster, cfg, toleration, reservation_ttl)
                else:
                    state, binder = real_state(kubeconfig, cfg, toleration, reservation_ttl, policy,
                                               start_cache=leader is None)
                    publisher, actions = kube_rank_table_publisher(binder), kube_actions(binder)
                direct = kube_direct_binding(state, binder, bind_fence_seconds, bind_workers, bind_backlog,
                                             always_nominate) \
                    if cluster is None and direct_bind else None
                scheduler, metrics = build_scheduler(state, binder, policy, publisher, actions,
                                                     completion_timeout=completion_timeout, preemption=preemption,
                                                     direct_binding=direct, backfill=backfill)
                if group_cycle:
                    from plugins.gangs.workload_api import NAME as WORKLOAD_API
                    scheduler.lifecycle.admission.group_cycle_sources = frozenset({WORKLOAD_API})
                from scheduler.service.lifecycle.failures import install_failure_handling

                scheduler.failures = install_failure_handling(scheduler, metrics, failure_options)
                if metrics_port:  # the same registry as /metrics on --port; a standby serves it too
                    metrics_server = start_metrics_server(metrics.registry, host, metrics_port)
                    log.info("metrics: plain HTTP on %s:%d (GET only, no verbs)", host, metrics_port,
                             extra={"metrics_port": metrics_port})
                grpc_server = _start_grpc(scheduler, grpc_port, host, tls, verb_auth) if grpc_port and not leader else None
                if grpc_port and leader:  # a standby has no gRPC listener; check the port now, start it when leading
                    from scheduler.service.ops.server import check_free

                    check_free(host, grpc_port, "gRPC")
            except (ValueError, OSError, ImportError) as exc:
                fail(str(exc))
            # The loaded cluster is long-lived: freeze it out of every later collection, and again after each
            # rebuild / every few minutes (GcPolicy, driven by the sweeper; the reasoning is in gcpolicy.py).
            gc_policy = GcPolicy(state)
            gc_policy.freeze_now()
            metrics.track_gc_pauses()  # meshfit_gc_pause_seconds{generation}
            ready = (lambda: True) if cluster is not None else (lambda: kube_state_fresh(state))
            app = create_app(scheduler, metrics, ready, gc_policy=gc_policy, max_body_bytes=max_body_bytes,
                             authorize=verb_auth)
            log_started("embedded" if cluster is not None else "kubernetes", host, http_socket.getsockname()[1],
                        grpc_server, state, policy)
            if tls is not None or verb_auth is not None:
                log.info("transport: %s; verbs need %s",
                         "HTTPS (TLS >= 1.2) and gRPC over TLS" if tls is not None else "plain HTTP and gRPC",
                         "nothing" if verb_auth is None else
                         "a bearer token" if verb_auth.mode == "token" else
                         "a client certificate " + ("named " + ", ".join(sorted(verb_auth.allowed_names))
                                                    if verb_auth.allowed_names else "signed by --client-ca-file"))
            elector = None
            if leader is not None:  # stand by for the Lease: verbs and /readyz 503 until won and re-listed
                from scheduler.kube.leader import StandbyGate, start_leader_election

                elector = start_leader_election(state, binder.api_client, leader, grpc_start=(
                    (lambda: _start_grpc(scheduler, grpc_port, host, tls, verb_auth)) if grpc_port else None))
                app = StandbyGate(app, elector)
                metrics.watch_leadership(elector.serving)  # meshfit_leader: 1 on the serving leader only
            if cluster is None and kueue:  # Kueue admission checks: reserve a job's gang before Kueue admits it
                from scheduler.cli.serve_kueue import start_kueue_checks

                start_kueue_checks(scheduler, binder, elector)
            server = serve_http(app, http_socket, tls=tls)
            if elector is not None:
                elector.shutdown()  # drained: stop gRPC, release the Lease so a standby takes over at once
        finally:
            if grpc_server is not None:
                grpc_server.stop(grace=5).wait(10)
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            http_socket.close()
        log_stopped(server.stop_signal())
