"""`meshfit serve`: the extender / Volcano / gRPC service, embedded (`--cluster`) or real (`--kubeconfig`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

import typer

from scheduler.cli.common import fail


def split_objects(objects: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """(nodes, pods, other objects) of a flattened List."""
    nodes = [o for o in objects if o.get("kind") == "Node"]
    pods = [o for o in objects if o.get("kind") == "Pod"]
    others = [o for o in objects if o.get("kind") not in ("Node", "Pod")]
    return nodes, pods, others


def embedded_state(cluster: Path, config: Any, tolerations: list[str], ttl: float):
    """A `ClusterState` loaded from a NodeList / List file, plus the in-memory binder."""
    from scheduler.service.binder_memory import MemoryBinder
    from scheduler.state import ClusterState
    from topology.loaders import read_objects

    state = ClusterState(config, tolerations, ttl)
    nodes, pods, others = split_objects([dict(o) for o in read_objects(cluster)])
    if not nodes:
        raise ValueError(f"{cluster}: no Node objects found (expected a NodeList, or a List containing Nodes)")
    state.replace_all(nodes, pods, others)
    return state, MemoryBinder()


def real_state(kubeconfig: Optional[Path], config: Any, tolerations: list[str], ttl: float, policy: str):
    """A `ClusterState` fed by the list+watch cache, plus the API-server binder (kubernetes imported here only)."""
    import kubernetes

    from scheduler.state import ClusterState

    if kubeconfig is not None:
        kubernetes.config.load_kube_config(config_file=str(kubeconfig))
    else:
        kubernetes.config.load_incluster_config()
    api_client = kubernetes.client.ApiClient()
    from scheduler.kube import run_cache
    from scheduler.kube.binder import KubeBinder

    state = ClusterState(config, tolerations, ttl)
    threading.Thread(target=run_cache, args=(state, api_client), name="meshfit-cache", daemon=True).start()
    return state, KubeBinder(api_client)


def kube_rank_table_publisher(binder: Any):
    """Real mode's rank-table publisher, sharing the binder's API client."""
    from scheduler.kube.configmap import KubeRankTablePublisher

    return KubeRankTablePublisher(binder.api_client)


def _start_grpc(scheduler, port: int, host: str):
    try:
        from scheduler.service.grpc_service import serve_grpc
    except ImportError as exc:  # grpc stubs missing from a slim install
        typer.echo(f"warning: gRPC disabled ({exc})", err=True)
        return None
    return serve_grpc(scheduler, f"{host}:{port}")


def register(app: typer.Typer) -> None:
    """Add `meshfit serve` to the CLI."""

    @app.command("serve")
    def serve(
        host: str = typer.Option("0.0.0.0", "--host", help="Address to listen on."),
        port: int = typer.Option(8888, "--port", help="HTTP port (extender, Volcano, metrics)."),
        grpc_port: int = typer.Option(9090, "--grpc-port", help="gRPC port (0 disables gRPC)."),
        cluster: Optional[Path] = typer.Option(None, "--cluster", help="Embedded mode: NodeList/List file."),
        kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Real mode: kubeconfig file."),
        policy: str = typer.Option("meshfit", "--policy", help="Placement policy."),
        reservation_ttl: float = typer.Option(120.0, "--reservation-ttl", help="Seconds a gang reservation lives."),
        config: Optional[Path] = typer.Option(None, "--config", help="Topology config file (levels, links)."),
        toleration: list[str] = typer.Option([], "--toleration", help="Taint to tolerate (key[=value][:Effect])."),
    ) -> None:
        """Serve the kube-scheduler extender, Volcano extender, gRPC placement API and metrics."""
        import uvicorn

        from scheduler.service.app import build_scheduler, create_app
        from scheduler.service.gcpolicy import GcPolicy

        if cluster is not None and kubeconfig is not None:
            fail("use either --cluster (embedded mode) or --kubeconfig (real mode), not both")
        if reservation_ttl <= 0:
            fail(f"--reservation-ttl must be > 0, got {reservation_ttl}")
        try:
            cfg = None
            if config is not None:
                from topology.config import load_config

                cfg = load_config(config)
            publisher = None  # embedded mode: rank tables in memory, at GET /ranktables/{namespace}/{job}
            if cluster is not None:
                state, binder = embedded_state(cluster, cfg, toleration, reservation_ttl)
            else:
                state, binder = real_state(kubeconfig, cfg, toleration, reservation_ttl, policy)
                publisher = kube_rank_table_publisher(binder)
            scheduler, metrics = build_scheduler(state, binder, policy, publisher)
        except (ValueError, OSError, ImportError) as exc:
            fail(str(exc))
        # The loaded cluster is long-lived: freeze it out of every later collection, and again after each
        # rebuild / every few minutes (GcPolicy, driven by the sweeper; the reasoning is in gcpolicy.py).
        gc_policy = GcPolicy(state)
        gc_policy.freeze_now()
        metrics.track_gc_pauses()  # meshfit_gc_pause_seconds{generation}
        grpc_server = _start_grpc(scheduler, grpc_port, host) if grpc_port else None
        ready = (lambda: True) if cluster is not None else (lambda: state.generation > 0)
        try:
            # No access log and no X-Forwarded-* rewriting: kube-scheduler calls every verb for every pod,
            # and neither is read by anything here.
            uvicorn.run(create_app(scheduler, metrics, ready, gc_policy=gc_policy), host=host, port=port,
                        log_level="warning", access_log=False, proxy_headers=False)
        finally:
            if grpc_server is not None:
                grpc_server.stop(grace=1)
