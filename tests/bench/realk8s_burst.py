"""The issue-7 burst on the real control plane: gang latency and pods/s, meshfit against kube-scheduler alone.

    python tests/bench/realk8s_burst.py [--nodes 128] [--seed 0] [--json out.json]

One etcd + kube-apiserver (../shared/k8s/bin), 128 nodes x 8 GPUs with Topograph spine/leaf labels.
The same burst -- PyTorchJob-style gangs of 2-32 pods (8- and 4-GPU pods) totalling 1.5x the GPUs,
plus 12 single-GPU pods and 40 CPU pods, created at once in shuffled order -- is scheduled twice:

1. by kube-scheduler 1.26.7 alone (no extender; it knows no gangs), for the pods/s baseline;
2. by kube-scheduler with `meshfit serve --kubeconfig` as filter/prioritize/bind/preempt extender.
   After it settles a third of the whole gangs are deleted (jobs finish) and waiting gangs get the room.

The burst is created before kube-scheduler starts, so pods/s measures scheduling, not pod creation.
Measured from a pod watch (wall clock of each pod's first bound state) and meshfit's JSON log (the
time each gang was reserved): pods/s over the burst (first to last bind, and first bind to 90% of the
pods bound, which the retry tail does not dominate), and per gang the
seconds from being reserved (it fits) to its last member bound.  Partly bound gangs at settled points
are counted (must be 0).  Not a timed test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kubernetes import config as kube_config, watch  # noqa: E402
from kubernetes.client import CoreV1Api  # noqa: E402

from tests.realk8s.cluster_builders import create_nodes, gang_status  # noqa: E402
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, free_port  # noqa: E402
from tests.realk8s.scenario import burst_shapes, create_burst, delete_gang, whole  # noqa: E402
from tests.bench.scale_readings import reserved_times  # noqa: E402


class BindWatch:
    """Records the wall-clock time each pod of a namespace was first seen bound."""

    def __init__(self, core: CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.bound_at: dict[str, float] = {}
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "BindWatch":
        """Start watching."""
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=3600):
                pod = event["object"]
                if pod.spec.node_name and pod.metadata.name not in self.bound_at:
                    self.bound_at[pod.metadata.name] = time.time()
        except Exception:  # noqa: BLE001 - the stream breaks when the API server stops at the end
            return

    def stop(self) -> None:
        """Stop watching."""
        self._watch.stop()


def plain_bodies(namespace: str) -> list[dict]:
    """12 single-GPU pods and 40 CPU pods, not gangs."""
    def body(name: str, requests: dict) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": {"schedulerName": "meshfit", "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}}
    return ([body(f"single-{i}", {"nvidia.com/gpu": "1"}) for i in range(12)]
            + [body(f"cpu-{i}", {"cpu": "100m"}) for i in range(40)])


def namespace(core: CoreV1Api, name: str) -> str:
    """Create a namespace and its default ServiceAccount."""
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    core.create_namespaced_service_account(name, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "default"}})
    return name


def wait_quiet(watcher: BindWatch, quiet: float, timeout: float) -> None:
    """Wait until pods bind and then none has been bound for `quiet` seconds."""
    deadline, last_count, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(watcher.bound_at)
        if count == 0:  # the scheduler is still starting
            since = time.monotonic()
        elif count != last_count:
            last_count, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.2)


def partly_bound(core: CoreV1Api, ns: str) -> dict:
    """Gangs with some but not all members bound."""
    return {n: s for n, s in gang_status(core, ns).items() if 0 < s[0] < s[1]}


def alone(plane: ControlPlane, core: CoreV1Api, shapes, seed: int) -> dict:
    """kube-scheduler without extender on the burst: pods/s."""
    ns = namespace(core, "alone")
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
           "clientConnection": {"kubeconfig": str(plane.scheduler_kubeconfig)},
           "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": "meshfit"}]}
    path = plane.run_dir / "alone.yaml"
    path.write_text(json.dumps(cfg))
    port = free_port()
    watcher = BindWatch(core, ns).start()
    created = create_burst(core, ns, shapes, seed, extra=plain_bodies(ns))  # queued before the scheduler starts
    scheduler = ManagedProcess("kube-scheduler-alone", [str(plane.bin_dir / "kube-scheduler"), f"--config={path}",
                                                         "--bind-address=127.0.0.1", f"--secure-port={port}"],
                               plane.logs / "alone.log").start()
    wait_quiet(watcher, 3.0, 120)
    watcher.stop()
    scheduler.stop()
    result = {"pods": created, "bound": len(watcher.bound_at), **rate(watcher.bound_at.values()),
              "partly_bound_gangs": len(partly_bound(core, ns))}
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    return result


def rate(bound_at) -> dict:
    """Pods bound per second between the first and the last bind of a burst."""
    times = sorted(bound_at)
    span = (times[-1] - times[0]) if len(times) > 1 else 0.0
    k = int(0.9 * (len(times) - 1))
    span90 = times[k] - times[0] if times else 0.0
    return {"seconds": round(span, 2), "pods_per_second": round((len(times) - 1) / span, 1) if span else None,
            "seconds_to_90pct": round(span90, 2), "pods_per_second_to_90pct": round(k / span90, 1) if span90 else None}



def through_meshfit(plane: ControlPlane, core: CoreV1Api, shapes, seed: int) -> dict:
    """kube-scheduler + meshfit on the same burst, then completions: pods/s and fit-to-bound latencies."""
    ns = namespace(core, "meshfit")
    log = plane.logs / "meshfit-bench.log"
    meshfit = MeshfitProcess(plane.kubeconfig, log, ["--log-format", "json"]).start()
    watcher = BindWatch(core, ns).start()
    created = create_burst(core, ns, shapes, seed, extra=plain_bodies(ns))  # queued before the scheduler starts
    plane.start_scheduler(meshfit.url)
    wait_quiet(watcher, 4.0, 180)
    burst = rate(watcher.bound_at.values())
    burst_bound = len(watcher.bound_at)
    partial_after_burst = partly_bound(core, ns)
    status = gang_status(core, ns)
    finished = sorted(whole(status))[: max(1, len(whole(status)) // 3)]
    for name in finished:
        delete_gang(core, ns, name)
    for name in finished:
        for pod in [p for p in watcher.bound_at if p.startswith(f"{name}-worker-")]:
            del watcher.bound_at[pod]
    wait_quiet(watcher, 6.0, 180)
    watcher.stop()
    partial_after_completions = partly_bound(core, ns)
    reserved = reserved_times(log)
    latencies = []
    for shape in shapes:
        members = [watcher.bound_at.get(f"{shape.name}-worker-{i}") for i in range(shape.pods)]
        if shape.name in reserved and all(members):
            latencies.append(max(members) - reserved[shape.name])
    plane.stop_scheduler()
    meshfit.stop()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))] if latencies else None
    return {"pods": created, "bound_in_burst": burst_bound, **burst,
            "partly_bound_after_burst": partial_after_burst, "gangs_finished": finished,
            "partly_bound_after_completions": partial_after_completions,
            "gangs_timed": len(latencies), "fit_to_bound_p50": round(statistics.median(latencies), 2) if latencies else None,
            "fit_to_bound_p99": round(p99, 2) if p99 is not None else None,
            "fit_to_bound_max": round(latencies[-1], 2) if latencies else None}


def main() -> None:
    """Run both phases and print the summary JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    plane = ControlPlane().start()
    try:
        client = kube_config.new_client_from_config(config_file=str(plane.kubeconfig))
        core = CoreV1Api(client)
        create_nodes(core, args.nodes, gpus=8, leaf_size=16)
        shapes = burst_shapes(args.seed, args.nodes * 8, demand=1.5, max_pods=32)
        summary = {"nodes": args.nodes, "gpus": args.nodes * 8, "gangs": len(shapes),
                   "gang_gpus": sum(s.gpus_total for s in shapes),
                   "kube_scheduler_alone": alone(plane, core, shapes, args.seed),
                   "meshfit": through_meshfit(plane, core, shapes, args.seed)}
        for key in ("pods_per_second", "pods_per_second_to_90pct"):
            summary[f"ratio_{key}"] = round(summary["meshfit"][key] / max(summary["kube_scheduler_alone"][key], 1e-9), 2)
    finally:
        plane.stop()
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
