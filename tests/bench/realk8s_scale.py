"""Gangs at scale on the real control plane: kube-scheduler alone against kube-scheduler + meshfit, side by side.

    python tests/bench/realk8s_scale.py --nodes 1000 [--nodes 5000] [--qps default --qps 200]
        [--demand 0.6] [--max-pods 64] [--seed 0] [--versions 1.26,1.35] [--cpu-pods 0.5] [--json out.json]
        [--meshfit-during-burst]

For every Kubernetes version whose binaries are found (`tests.realk8s.binaries`) and every node count: one
etcd + kube-apiserver, N fake 8-GPU Nodes created in bulk (Topograph spine/leaf labels, no kubelet).  For
every client-QPS setting, the same burst -- PyTorchJob-shaped gangs of 1-`max-pods` pods (8- and 4-GPU pods)
totalling `demand` x the GPUs, 2% single-GPU pods and 3% CPU pods, created in shuffled order *before* the
scheduler starts -- is scheduled twice, each in a fresh namespace:

1. by kube-scheduler alone (defaults: sampled nodes, no extender, no gangs);
2. by kube-scheduler with `meshfit serve` as extender, configured as `manifests/kube-scheduler-config.yaml`
   ships it (percentageOfNodesToScore 100, nodeCacheCapable, backoff 1-3 s).

Printed per run: pods bound and pods/s (first to last bind; first bind to 90%), API writes per bound pod
(the API server's own `apiserver_request_total` for POST / PUT / PATCH / DELETE / APPLY, counted from the
moment the scheduler starts, so the driver's pod creation is not in it), for meshfit also gang reserved ->
fully bound p50 / p99 (meshfit's JSON log and a pod watch), meshfit's bind latency (its `/bind` verb and its
own Bindings), partly bound gangs and over-committed nodes at the end, per resource.

`--cpu-pods F` mixes CPU into the burst as a platform team's shared cluster has it: nodes of 16 CPUs and 64 GiB,
members asking 1.25 CPUs and 5 GiB per GPU, and F x the gang pods as CPU-only pods of the default scheduler
(8 CPUs, 30 GiB each) that kube-scheduler places on its own, in the same shuffled burst.  The ratio meshfit / alone of
pods/s and of writes per bound pod closes each block.  A benchmark, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kubernetes import config as kube_config  # noqa: E402
from kubernetes.client import CoreV1Api  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from scheduler.kube.api import iter_lines, open_request, request_bytes  # noqa: E402
from tests.realk8s.binaries import find_installs, missing_reason  # noqa: E402
from tests.realk8s.cluster_builders import bound_gpus, create_nodes, gang_pod_body, gang_status  # noqa: E402
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, free_port  # noqa: E402
from tests.realk8s.scenario import GangShape  # noqa: E402
from tests.bench.scale_readings import (api_writes, count_bound, diff, meshfit_histograms, nodes_total,  # noqa: E402
                                        overcommitted, p99_by_size, rate, reserved_times, scheduler_breakdown,
                                        tail_by_kind, waiting_reason)

MANIFEST_CONFIG = Path(__file__).resolve().parents[2] / "manifests" / "kube-scheduler-config.yaml"


class _PodMeta(msgspec.Struct, frozen=True):
    name: str = ""
    resourceVersion: str = ""


class _PodSpec(msgspec.Struct, frozen=True):
    nodeName: str = ""


class _Pod(msgspec.Struct, frozen=True):
    metadata: _PodMeta = _PodMeta()
    spec: _PodSpec = _PodSpec()


class _PodList(msgspec.Struct):
    items: list[_Pod] = msgspec.field(default_factory=list)
    metadata: _PodMeta = _PodMeta()


class _PodEvent(msgspec.Struct):
    type: str = ""
    object: _Pod = _Pod()


class BindWatch:
    """The wall-clock time each pod of a namespace was first seen bound.

    Reads the raw watch stream and decodes only name and nodeName: the official client's full `V1Pod` models fell
    behind a 9,000-pod burst on a 2-core machine, so bind times were when the watcher got to them, and a backlog of
    other events longer than the quiet period ended a phase while kube-scheduler was still binding."""

    def __init__(self, core: CoreV1Api, namespace: str) -> None:
        self.api_client, self.namespace = core.api_client, namespace
        self.bound_at: dict[str, float] = {}
        self._stopped = False
        self._response = None
        threading.Thread(target=self._run, daemon=True).start()

    def _seen(self, pod: _Pod) -> None:
        if pod.spec.nodeName and pod.metadata.name not in self.bound_at:
            self.bound_at[pod.metadata.name] = time.time()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        lists, events = msgspec.json.Decoder(_PodList), msgspec.json.Decoder(_PodEvent)
        while not self._stopped:
            try:
                listed = lists.decode(request_bytes(self.api_client, "GET", path, timeout=(10, 120)))
                for pod in listed.items:  # (re)start: whatever is bound already counts from now
                    self._seen(pod)
                self._response = open_request(self.api_client, "GET", path, [
                    ("watch", "true"), ("resourceVersion", listed.metadata.resourceVersion),
                    ("timeoutSeconds", 600)], timeout=(10, 660))
                for line in iter_lines(self._response):
                    event = events.decode(line)
                    if event.type == "ERROR":
                        break  # expired: list again
                    self._seen(event.object)
            except Exception as exc:  # noqa: BLE001 - an expired or broken watch: list again and go on
                if not self._stopped:
                    print(f"# pod watch of {self.namespace} restarted: {exc!r}"[:200], file=sys.stderr)
                    time.sleep(0.2)

    def stop(self) -> None:
        """Stop watching."""
        self._stopped = True
        if self._response is not None:
            try:  # shutdown, not close: close waits for the reading thread's lock
                self._response.shutdown() if hasattr(self._response, "shutdown") else self._response.close()
            except Exception:  # noqa: BLE001 - already closed
                pass


def shapes_for(seed: int, gpus: int, demand: float, max_pods: int) -> list[GangShape]:
    """Gang shapes (1-`max_pods` pods, mostly whole-node) totalling about `demand` x `gpus`."""
    rng = random.Random(seed)
    sizes = [p for p in (1, 2, 2, 4, 4, 8, 8, 16, 32, 64) if p <= max_pods]
    shapes, total = [], 0
    while total < demand * gpus:
        per = rng.choice([8, 8, 8, 4])
        pods = rng.choice(sizes)
        shapes.append(GangShape(f"g{len(shapes):04d}", pods, per))
        total += pods * per
    return shapes


def plain_body(namespace: str, name: str, requests: dict) -> dict:
    """A pod that is not in a gang."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "meshfit", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}}


def create_burst(core: CoreV1Api, namespace: str, shapes: list[GangShape], seed: int, cpu_pods: float = 0.0) -> int:
    """Every gang member plus the plain pods, created in shuffled order by 16 threads; returns the pod count.
    `cpu_pods` > 0: members ask CPU and memory too, and that fraction of CPU-only default-scheduler pods joins."""
    gang_pods = sum(s.pods for s in shapes)
    bodies = [gang_pod_body(namespace, s.name, i, s.pods, s.gpus, f"tp={s.gpus},dp={s.pods}")
              for s in shapes for i in range(s.pods)]
    if cpu_pods:
        for body in bodies:
            gpus = int(body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
            body["spec"]["containers"][0]["resources"]["requests"].update({"cpu": f"{gpus * 1250}m",
                                                                           "memory": f"{gpus * 5}Gi"})
    bodies += [plain_body(namespace, f"single-{i}", {"nvidia.com/gpu": "1"}) for i in range(max(1, gang_pods // 50))]
    bodies += [plain_body(namespace, f"cpu-{i}", {"cpu": "100m"}) for i in range(max(1, gang_pods // 33))]
    for i in range(int(gang_pods * cpu_pods)):
        body = plain_body(namespace, f"cpu-mix-{i}", {"cpu": "8", "memory": "30Gi"})
        body["spec"]["schedulerName"] = "default-scheduler"
        bodies.append(body)
    random.Random(seed).shuffle(bodies)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
    return len(bodies)


def create_nodes_bulk(core: CoreV1Api, count: int, cpu: str = "64", memory: str = "512Gi") -> None:
    """`count` 8-GPU Nodes (16 per leaf) with `cpu` and `memory`, created by 16 threads."""
    chunk = max(1, count // 16)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda start: create_nodes(core, min(chunk, count - start), start=start, leaf_size=16,
                                                 cpu=cpu, memory=memory), range(0, count, chunk)))


def wait_quiet(watcher: BindWatch, quiet: float, timeout: float) -> None:
    """Until pods bind and then none binds for `quiet` seconds (or `timeout`)."""
    deadline, last, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(watcher.bound_at)
        if count == 0:
            since = time.monotonic()
        elif count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.25)


def namespace(core: CoreV1Api, name: str) -> str:
    """A fresh namespace with its default ServiceAccount."""
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    core.create_namespaced_service_account(name, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "default"}})
    return name


def scheduler_config(plane: ControlPlane, qps: float | None, extender_url: str | None, guard: bool = True,
                     profile: dict | None = None) -> dict:
    """kube-scheduler's configuration: defaults alone, or the shipped meshfit profile pointed at `extender_url` (with
    the shipped `/guard` entry unless `guard` is False; `profile`'s keys replace the meshfit profile's)."""
    import yaml

    connection: dict = {"kubeconfig": str(plane.scheduler_kubeconfig)}
    if qps is not None:
        connection.update({"qps": qps, "burst": int(qps * 2)})
    config: dict = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                    "clientConnection": connection, "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": "meshfit"}, {"schedulerName": "default-scheduler"}]}
    if extender_url is not None:
        shipped = yaml.safe_load(MANIFEST_CONFIG.read_text())
        config.update({k: shipped[k] for k in ("podInitialBackoffSeconds", "podMaxBackoffSeconds")})
        config["profiles"] = shipped["profiles"] + [{"schedulerName": "default-scheduler"}]
        config["profiles"][0] = {**config["profiles"][0], **(profile or {})}
        config["extenders"] = []
        for shipped_extender in shipped["extenders"][:None if guard else 1]:  # the main extender and `/guard`
            extender = {**shipped_extender, "urlPrefix": f"{extender_url}/scheduler", "enableHTTPS": False}
            extender.pop("tlsConfig", None)  # the bench's meshfit serves plain HTTP on loopback
            config["extenders"].append(extender)
    return config


def run_scheduler(plane: ControlPlane, config: dict, name: str) -> tuple[ManagedProcess, int]:
    """Start a kube-scheduler with `config`; (the process, its secure port, whose /metrics needs no authorization)."""
    path = plane.run_dir / f"{name}.json"
    path.write_text(json.dumps(config))
    port = free_port()
    argv = [str(plane.bin_dir / "kube-scheduler"), f"--config={path}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=1"]
    return ManagedProcess(name, argv, plane.logs / f"{name}.log").start(), port


def one_phase(plane: ControlPlane, core: CoreV1Api, shapes, seed: int, qps: float | None, tag: str,
              with_meshfit: bool, settle: float, extra_args: tuple = (), cpu_pods: float = 0.0,
              meshfit_first: bool = False, guard: bool = True, profile: dict | None = None) -> dict:
    """One burst in a fresh namespace, scheduled alone or through meshfit; the numbers of that run.  With
    `meshfit_first`, meshfit runs while the burst is created (kube-scheduler still starts after it)."""
    ns = namespace(core, f"{tag}-{('meshfit' if guard else 'noguard') if with_meshfit else 'alone'}")
    watcher = BindWatch(core, ns)
    meshfit, before = None, api_writes(plane)
    if with_meshfit:
        log = plane.logs / f"meshfit-{ns}.log"
        meshfit = MeshfitProcess(plane.kubeconfig, log, ["--log-format", "json", "--grpc-port", "0", *extra_args],
                                 ready_timeout=300)
        if meshfit_first:
            meshfit.start()
    created = create_burst(core, ns, shapes, seed, cpu_pods)  # queued before kube-scheduler starts: runs start alike
    if not meshfit_first:
        before = api_writes(plane)
        if meshfit is not None:
            meshfit.start()
    config = scheduler_config(plane, qps, meshfit.url if meshfit else None, guard, profile)
    scheduler, scheduler_port = run_scheduler(plane, config, f"ks-{ns}")
    wait_quiet(watcher, settle, 1800)
    if not scheduler.alive():
        raise RuntimeError(f"kube-scheduler exited during the run:\n{scheduler.tail(30)}")
    breakdown = scheduler_breakdown(scheduler_port)
    scheduler.stop()  # nothing binds while the end state is read
    if meshfit is not None:
        meshfit_metrics = meshfit_histograms(meshfit.url)
        meshfit.stop()
    listed = count_bound(core, ns)
    singles = sum(1 for name in watcher.bound_at if name.startswith("single-"))
    bound_cpu = sum(1 for name in watcher.bound_at if name.startswith("cpu-"))
    used = bound_gpus(core)
    result = {"pods": created, "bound": listed, "bound_single_gpu_pods": singles, "bound_cpu_pods": bound_cpu,
              "bound_seen_by_watch": len(watcher.bound_at), "gpus_bound": sum(used.values()),
              "gpus_free": sum(max(0, 8 - u) for u in used.values()) + 8 * (nodes_total(core) - len(used)),
              "nodes_with_free_gpus": nodes_total(core) - sum(1 for u in used.values() if u >= 8),
              "single_gpu_pod_waits_because": waiting_reason(core, ns, "single-"),
              **rate(watcher.bound_at.values()), "tail": tail_by_kind(watcher.bound_at), "kube_scheduler": breakdown}
    writes = diff(api_writes(plane), before)
    result.update({"api_writes": sum(writes.values()), "api_writes_by_kind": writes,
                   "writes_per_bound_pod": round(sum(writes.values()) / max(1, len(watcher.bound_at)), 2),
                   "whole_gangs": sum(1 for b, t in gang_status(core, ns).values() if 0 < b == t),
                   "partly_bound_gangs": sum(1 for b, t in gang_status(core, ns).values() if 0 < b < t),
                   "overcommitted_nodes_by_resource": overcommitted(core)})
    if meshfit is not None:
        reserved = reserved_times(meshfit.log_path)
        timed = sorted((max(watcher.bound_at[f"{s.name}-worker-{i}"] for i in range(s.pods)) - reserved[s.name],
                        s.pods, s.name) for s in shapes if s.name in reserved
                       and all(f"{s.name}-worker-{i}" in watcher.bound_at for i in range(s.pods)))
        latencies = [seconds for seconds, _, _ in timed]
        if latencies:
            result.update({"gangs_timed": len(latencies), "reserved_to_bound_p50": round(statistics.median(latencies), 2),
                           "reserved_to_bound_p99": round(latencies[int(round(0.99 * (len(latencies) - 1)))], 2),
                           "reserved_to_bound_max": round(latencies[-1], 2),
                           "slowest_gangs": [[name, pods, round(seconds, 2)] for seconds, pods, name in timed[-8:]],
                           "reserved_to_bound_p99_by_size": p99_by_size(timed)})
        result["bind_latency"] = meshfit_metrics
    watcher.stop()
    print(f"# phase {ns}: " + json.dumps(result), file=sys.stderr, flush=True)  # a run cut short keeps its phases
    delete_pods(core, ns)
    return result


def delete_pods(core: CoreV1Api, ns: str, tries: int = 5) -> None:
    """Delete every pod of `ns`; a loaded API server may answer a collection delete of ~10,000 pods with 504 (it goes
    on deleting), so ask again until it answers."""
    for attempt in range(tries):
        try:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            return
        except ApiException as exc:
            if exc.status not in (429, 500, 504) or attempt == tries - 1:
                raise
            time.sleep(5)


def run_version(install, nodes: int, qps_settings: list[float | None], args) -> list[dict]:
    """Every QPS setting on one control plane of one version: alone, then through meshfit."""
    plane = ControlPlane(install).start()
    rows = []
    try:
        client = kube_config.new_client_from_config(config_file=str(plane.kubeconfig))
        client.configuration.connection_pool_maxsize = 32
        core = CoreV1Api(client)
        began = time.monotonic()
        create_nodes_bulk(core, nodes, *(("16", "64Gi") if args.cpu_pods else ()))
        print(f"# {install.full}: {nodes} nodes created in {time.monotonic() - began:.0f} s", file=sys.stderr)
        shapes = shapes_for(args.seed, nodes * 8, args.demand, args.max_pods)
        for qps in qps_settings:
            tag = f"q{int(qps) if qps else 'd'}"
            row = {"version": install.full, "nodes": nodes, "qps": qps or "default", "gangs": len(shapes),
                   "gang_pods": sum(s.pods for s in shapes)}
            if "alone" in args.phases:
                row["alone"] = one_phase(plane, core, shapes, args.seed, qps, tag, False, args.settle,
                                         cpu_pods=args.cpu_pods)
            if "meshfit" in args.phases:
                row["meshfit"] = one_phase(plane, core, shapes, args.seed, qps, tag, True, args.settle,
                                           tuple(args.meshfit_arg or ()), cpu_pods=args.cpu_pods,
                                           meshfit_first=args.meshfit_during_burst)
            if args.variant_arg or args.variant_profile:  # other settings, side by side
                row["variant"] = one_phase(plane, core, shapes, args.seed, qps, f"{tag}v", True, args.settle,
                                           tuple((args.meshfit_arg or []) + args.variant_arg), cpu_pods=args.cpu_pods,
                                           meshfit_first=args.meshfit_during_burst,
                                           profile=json.loads(args.variant_profile or "{}"))
            if "noguard" in args.phases:  # before the guard (issue 28): the same burst, no `/guard` entry
                row["noguard"] = one_phase(plane, core, shapes, args.seed, qps, tag, True, args.settle,
                                           tuple(args.meshfit_arg or ()), cpu_pods=args.cpu_pods,
                                           meshfit_first=args.meshfit_during_burst, guard=False)
            for key in ("pods_per_second", "pods_per_second_to_90pct", "writes_per_bound_pod"):
                a, m = row.get("alone", {}).get(key), row.get("meshfit", {}).get(key)
                row[f"ratio_{key}"] = round(m / a, 2) if a and m else None
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        plane.stop()
    return rows


def main() -> None:
    """Parse the flags, run every version x node count x QPS setting, print and save the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, action="append")
    parser.add_argument("--qps", action="append", help="kube-scheduler client QPS: 'default' or a number")
    parser.add_argument("--demand", type=float, default=0.6, help="gang GPUs / cluster GPUs")
    parser.add_argument("--max-pods", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=8.0, help="seconds without a new bind that end a burst")
    parser.add_argument("--versions", default="", help="comma-separated minor versions (default: all found)")
    parser.add_argument("--meshfit-arg", action="append", help="extra `meshfit serve` argument (repeat)")
    parser.add_argument("--cpu-pods", type=float, default=0.0,
                        help="CPU-only default-scheduler pods per gang pod (members then ask CPU and memory too)")
    parser.add_argument("--meshfit-during-burst", action="store_true",
                        help="start meshfit before the burst is created (the bench before 2026-11-25 did)")
    parser.add_argument("--phases", default="alone,meshfit",
                        help="which bursts to run: 'alone,meshfit' (the side-by-side comparison), or one of them to "
                             "look into a single mode (no ratios then); add 'noguard' for meshfit without the `/guard` "
                             "extender entry")
    parser.add_argument("--variant-arg", action="append", default=[],
                        help="a further meshfit phase with these `meshfit serve` arguments added (repeat), e.g. "
                             "--variant-arg=--bind-backlog --variant-arg=128")
    parser.add_argument("--variant-profile",
                        help="a further meshfit phase whose kube-scheduler profile takes these keys (JSON), e.g. "
                             "'{\"percentageOfNodesToScore\": 0}'")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.phases = set(args.phases.split(","))
    installs, problems = find_installs()
    if args.versions:
        installs = [i for i in installs if i.minor in args.versions.split(",")]
    if not installs:
        sys.exit(f"error: {missing_reason(problems)}")
    qps_settings = [None if q == "default" else float(q) for q in (args.qps or ["default"])]
    rows = [row for install in installs for nodes in (args.nodes or [1000])
            for row in run_version(install, nodes, qps_settings, args)]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
