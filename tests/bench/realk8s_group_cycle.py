"""kube-scheduler's group cycle (1.36, 1.37), three ways, on one control plane: the same PodGroup burst placed by

1. `in-tree`: stock kube-scheduler, its `TopologyPlacementGenerator` (one placement per domain of the key);
2. `plugin`: kube-scheduler built with `kubeplugin/` (MeshfitPlacement) + `meshfit serve --group-cycle` (gRPC);
3. `extender`: stock kube-scheduler + `meshfit serve` as extender (the shipped profile; meshfit's direct binder
   leaves PodGroup members to kube-scheduler's `/bind`, so kube-scheduler asks meshfit to bind them).

    python tests/bench/realk8s_group_cycle.py [--minor 1.37] [--nodes 64] [--gangs 16] [--pods 4] [--used 0.0]
        [--json out.json]

Each gang: a Workload + PodGroup (gang minCount = its size, required key: the leaf, or the spine for a gang
larger than a leaf's free room can hold) and index-less pods of `--gpus-per-pod` GPUs (8) with `spec.schedulingGroup`.  `--used 0.6`
first binds filler pods straight to nodes (0-8 GPUs each, about that fraction in all: a fragmented cluster), and
mixes gang sizes (`--pods` is then the largest).  The burst is created before any scheduler starts; numbers
count from the moment kube-scheduler starts (meshfit, where it takes part, is up and synced before):

`--backfill easy|best-effort` overrides meshfit's queue rule (`meshfit serve --backfill`; its default is best-effort
with `--group-cycle`, where kube-scheduler's queue orders the groups, and EASY backfill as extender, which holds
small gangs behind a waiting big one).
`--no-key` drops the topology key in every mode; the mode `gang-only` (`--modes gang-only,in-tree,plugin`) is
stock kube-scheduler with the same gangs and no key: the gang-scheduling-alone baseline.

- pods/s between the first and the last bind; start -> gang bound p50 / p99 (gangs bound whole);
- API writes per bound pod (the API server's own counts of write requests from before meshfit starts, the burst's
  creation excluded);
- gangs bound whole, partly bound gangs, over-committed nodes at the end;
- each bound gang's predicted step communication time under meshfit's cost model (`estimate_cost`, pod i with
  ranks i*8..i*8+7: meshfit's `meshfit.io/pod-index` when the pod has one, else the order of the pod names).

Binaries: the control plane of `--minor` (default: the newest that has a plugin build) and its plugin build, found
as tests/realk8s/test_placement_plugin.py finds them (`k8sbuild/build.sh <minor>` makes both).  The Workload API
version is the one that minor serves (1.36 `v1alpha2`, 1.37 `v1beta1`).  A benchmark, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kubernetes import config as kube_config  # noqa: E402
from kubernetes.client import CoreV1Api, CustomObjectsApi  # noqa: E402

from scheduler.cache.state import ClusterState  # noqa: E402
from scheduler.placement.cost import estimate_cost  # noqa: E402
from scheduler.placement.jobs import Gang, Parallelism, PodSlot  # noqa: E402
from tests.bench.realk8s_scale import (  # noqa: E402
    BindWatch, api_writes, diff, namespace, overcommitted, rate, scheduler_config, wait_quiet,
)
from tests.realk8s.cluster_builders import LEAF_LABEL, SPINE_LABEL, create_nodes  # noqa: E402
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, free_port  # noqa: E402
from tests.realk8s.overcommit import raw_list  # noqa: E402
from tests.realk8s.test_placement_plugin import BUILDS, GROUP, NO_BUILD, plugin_scheduler_config  # noqa: E402
from tests.realk8s.workload_api import api_version_for, gated_plane_options, template_ref  # noqa: E402

GPU, GPUS, LEAF_SIZE = "nvidia.com/gpu", 8, 16
MODES = ("in-tree", "plugin", "extender")
"""The default modes; `gang-only` (stock kube-scheduler, the same gangs with no topology key) may be added."""


def shapes(args: argparse.Namespace) -> list[int]:
    """Gang sizes: `--gangs` of `--pods` on an empty cluster; mixed `--min-pods`..`--pods` (powers of two) when used."""
    if not args.used:
        return [args.pods] * args.gangs
    rng = random.Random(args.seed)
    sizes = [p for p in (1, 2, 4, 8, 16, 32, 64) if args.min_pods <= p <= args.pods]
    return [rng.choice(sizes) for _ in range(args.gangs)]


def fill(core: CoreV1Api, nodes: list[str], used: float, seed: int) -> int:
    """Filler pods bound straight to nodes (no scheduler): about `used` of the GPUs, fragmented; returns GPUs."""
    if not used:
        return 0
    ns, rng, total = namespace(core, "filler"), random.Random(seed), 0
    choices = [0, 2, 4, 6, 8, 8] if used >= 0.5 else [0, 0, 2, 4]
    bodies = []
    for node in nodes:
        gpus = rng.choice(choices)
        if gpus:
            total += gpus
            bodies.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"fill-{node}"},
                           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {
                               "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}})
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(ns, body), bodies))
    return total


def create_burst(core: CoreV1Api, custom: CustomObjectsApi, ns: str, sizes: list[int], spine_from: int | None,
                 gpus: int, api: str) -> None:
    """Every gang's Workload + PodGroup (no topology key when `spine_from` is None), then all members (16 threads)."""
    for g, size in enumerate(sizes):
        name = f"g{g:03d}"
        key = (SPINE_LABEL if size >= spine_from else LEAF_LABEL) if spine_from else None
        policy, constraints = {"gang": {"minCount": size}}, ({"schedulingConstraints": {"topology": [{"key": key}]}}
                                                             if key else {})
        custom.create_namespaced_custom_object(GROUP, api, ns, "workloads", {
            "apiVersion": f"{GROUP}/{api}", "kind": "Workload", "metadata": {"name": name},
            "spec": {"podGroupTemplates": [{"name": "w", "schedulingPolicy": policy, **constraints}]}})
        custom.create_namespaced_custom_object(GROUP, api, ns, "podgroups", {
            "apiVersion": f"{GROUP}/{api}", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {**template_ref(api, name, "w"), "schedulingPolicy": policy, **constraints}})
    bodies = [{"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"g{g:03d}-{i:02d}", "labels": {"bench.meshfit.io/gang": f"g{g:03d}"},
                            "annotations": {"meshfit.io/parallelism": f"tp={gpus},dp={size}"}},
               "spec": {"schedulerName": "meshfit", "schedulingGroup": {"podGroupName": f"g{g:03d}"},
                        "containers": [{"name": "main", "image": "busybox", "resources": {
                            "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}
              for g, size in enumerate(sizes) for i in range(size)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(ns, body), bodies))  # a dict: sent as is


def start_mode(plane: ControlPlane, mode: str, tag: str, qps: float | None = None,
               backfill: str | None = None) -> tuple[list, float]:
    """The processes of one mode (meshfit first, ready, where it takes part) and when kube-scheduler started."""
    processes: list = []
    gates = [f"--feature-gates={plane.feature_gates}"]
    if mode not in ("in-tree", "gang-only"):
        grpc_port = free_port()
        meshfit = MeshfitProcess(plane.kubeconfig, plane.logs / f"meshfit-{tag}.log",
                                 extra_args=["--grpc-port", str(grpc_port),
                                             *(["--backfill", backfill] if backfill else []),
                                             *(["--group-cycle"] if mode == "plugin" else [])],
                                 ready_timeout=120).start()
        processes.append(meshfit)
    if mode == "plugin":
        config = plugin_scheduler_config(plane.scheduler_kubeconfig, f"127.0.0.1:{grpc_port}")
        binary = str(plane.plugin_binary)
    elif mode == "extender":
        config, binary = scheduler_config(plane, None, meshfit.url), str(plane.bin_dir / "kube-scheduler")
    else:
        config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                  "clientConnection": {"kubeconfig": str(plane.scheduler_kubeconfig)},
                  "leaderElection": {"leaderElect": False}, "podInitialBackoffSeconds": 1,
                  "podMaxBackoffSeconds": 5, "profiles": [{"schedulerName": "meshfit"}]}
        binary = str(plane.bin_dir / "kube-scheduler")
    if qps:  # kube-scheduler's API client limits (default qps 50, burst 100) cap every mode alike
        config["clientConnection"].update({"qps": qps, "burst": int(2 * qps)})
    path = plane.run_dir / f"scheduler-{tag}.json"
    path.write_text(json.dumps(config))
    started = time.time()
    processes.append(ManagedProcess(f"kube-scheduler-{tag}", [
        binary, f"--config={path}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--v=1", *gates],
        plane.logs / f"scheduler-{tag}.log").start())
    return processes, started


def gang_costs(core: CoreV1Api, ns: str, state: ClusterState, gpus: int) -> dict[str, float]:
    """Predicted step communication seconds of every gang bound whole."""
    by_gang: dict[str, list[dict]] = {}
    for pod in raw_list(core, "pods"):
        if pod["metadata"].get("namespace") == ns:
            by_gang.setdefault(pod["metadata"]["labels"]["bench.meshfit.io/gang"], []).append(pod)
    costs = {}
    for gang, pods in by_gang.items():
        if not all(p["spec"].get("nodeName") for p in pods):
            continue

        def index(pod: dict) -> tuple:
            given = (pod["metadata"].get("annotations") or {}).get("meshfit.io/pod-index")
            return (int(given), "") if given is not None else (0, pod["metadata"]["name"])

        ordered = sorted(pods, key=index)
        job = Gang(ns, gang, tuple(PodSlot(i, p["metadata"]["name"], gpus) for i, p in enumerate(ordered)),
                   Parallelism(tp=gpus, dp=len(ordered)))
        nodes = [state.topology.node_by_name[p["spec"]["nodeName"]].index for p in ordered]
        costs[gang] = estimate_cost(job, nodes, state.topology).step_comm_seconds
    return costs


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def run_mode(plane: ControlPlane, core: CoreV1Api, custom: CustomObjectsApi, mode: str, sizes: list[int],
             spine_from: int, state: ClusterState, args: argparse.Namespace) -> dict:
    """One mode, in a fresh namespace: burst, schedule, measure, clean up."""
    ns = namespace(core, f"{mode}-{int(time.time()) % 100000}")
    no_key = args.no_key or mode == "gang-only"
    create_burst(core, custom, ns, sizes, None if no_key else spine_from, args.gpus_per_pod,
                 api_version_for(plane.install))
    watcher = BindWatch(core, ns)
    before = api_writes(plane)
    processes, started = start_mode(plane, mode, ns, args.qps, args.backfill)
    try:
        wait_quiet(watcher, args.quiet, args.timeout)
        writes = diff(api_writes(plane), before)
        bound_at = dict(watcher.bound_at)
        members: dict[str, list[str]] = {}
        for g, size in enumerate(sizes):
            members[f"g{g:03d}"] = [f"g{g:03d}-{i:02d}" for i in range(size)]
        whole = {g: max(bound_at[p] for p in pods) - started for g, pods in members.items()
                 if all(p in bound_at for p in pods)}
        partly = sum(1 for pods in members.values() if 0 < sum(p in bound_at for p in pods) < len(pods))
        costs = gang_costs(core, ns, state, args.gpus_per_pod)
        waiting = {}
        for pod in core.list_namespaced_pod(ns).items:
            gang = pod.metadata.labels["bench.meshfit.io/gang"]
            if gang not in whole and gang not in waiting:
                why = [c.message for c in (pod.status.conditions or []) if c.type == "PodScheduled" and c.message]
                waiting[gang] = f"size {len(members[gang])}: " + (why[0][:240] if why else "no condition")
        total_writes = sum(writes.values())
        result = {
            "mode": mode, "pods": sum(sizes), "bound": len(bound_at), **rate(bound_at.values()),
            "gangs": len(sizes), "gangs_bound_whole": len(whole), "partly_bound_gangs": partly,
            "start_to_gang_bound_p50_s": quantile(list(whole.values()), 0.5),
            "start_to_gang_bound_p99_s": quantile(list(whole.values()), 0.99),
            "writes_per_bound_pod": round(total_writes / len(bound_at), 2) if bound_at else None,
            "writes": writes, "overcommitted_nodes": overcommitted(core),
            "step_comm_seconds": costs, "waiting": waiting,
            "step_comm_mean_s": round(statistics.fmean(costs.values()), 4) if costs else None,
        }
    finally:
        watcher.stop()
        for process in reversed(processes):
            process.stop()
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        deadline = time.monotonic() + 60
        while core.list_namespaced_pod(ns).items and time.monotonic() < deadline:
            time.sleep(0.5)
    return result


def main() -> None:
    """Parse flags, start the 1.36 control plane, run the three modes, print the table (and JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gangs", type=int, default=16)
    parser.add_argument("--pods", type=int, default=4, help="pods per gang (the largest, with --used)")
    parser.add_argument("--min-pods", type=int, default=1, help="the smallest gang size, with --used")
    parser.add_argument("--gpus-per-pod", type=int, default=GPUS, choices=(1, 2, 4, 8))
    parser.add_argument("--used", type=float, default=0.0, help="fraction of GPUs taken by filler pods first")
    parser.add_argument("--no-key", action="store_true", help="gangs with no topology key (gang scheduling only)")
    parser.add_argument("--qps", type=float, help="kube-scheduler's clientConnection qps (burst 2x) in every mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", type=float, default=6.0, help="seconds without a new bind that end a run")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--backfill", choices=("easy", "best-effort"),
                        help="meshfit serve --backfill in the plugin and extender modes (default: meshfit's own: "
                             "best-effort with --group-cycle, easy as extender)")
    parser.add_argument("--minor", help="Kubernetes minor, e.g. 1.37 (default: the newest with a plugin build)")
    args = parser.parse_args()
    builds = {install.minor: (install, binary) for install, binary in BUILDS}
    if not builds or (args.minor and args.minor not in builds):
        sys.exit(f"error: {NO_BUILD or f'no plugin build for {args.minor} (have: {sorted(builds)})'}")
    install, binary = builds[args.minor] if args.minor else BUILDS[-1]
    plane = ControlPlane(install, **gated_plane_options(install)).start()
    plane.plugin_binary = binary
    results = []
    try:
        kube_config.load_kube_config(str(plane.kubeconfig))
        core, custom = CoreV1Api(), CustomObjectsApi()
        names = []
        for start in range(0, args.nodes, 16):
            names += create_nodes(core, min(16, args.nodes - start), gpus=GPUS, leaf_size=LEAF_SIZE, start=start)
        filled = fill(core, names, args.used, args.seed)
        state = ClusterState()
        state.replace_all(raw_list(core, "nodes"), [], [])
        sizes = shapes(args)
        spine_from = (LEAF_SIZE // 2) if args.used else LEAF_SIZE + 1
        print(f"# {install.minor} group cycle ({api_version_for(install)}): {args.nodes} nodes x {GPUS} GPUs, {filled} GPUs filled, {len(sizes)} gangs "
              f"({sum(sizes)} pods of {args.gpus_per_pod} GPUs, sizes {sorted(set(sizes))}), kube-apiserver {install.full}", flush=True)
        for mode in args.modes.split(","):
            result = run_mode(plane, core, custom, mode, sizes, spine_from, state, args)
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k not in ("writes", "step_comm_seconds", "waiting")}),
                  flush=True)
    finally:
        plane.stop()
    head = ("mode", "bound", "pods_per_second", "start_to_gang_bound_p50_s", "start_to_gang_bound_p99_s",
            "writes_per_bound_pod", "gangs_bound_whole", "partly_bound_gangs", "overcommitted_nodes",
            "step_comm_mean_s")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in results:
        print("| " + " | ".join(str(r[h]) for h in head) + " |")
    for line in against_in_tree(results):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def against_in_tree(results: list[dict], tolerance: float = 1e-6) -> list[str]:
    """One line per mode beside `in-tree`: gangs bound whole by each, and for gangs both bound, how many of the
    mode's placements predict a longer / shorter step communication time than the in-tree generator's."""
    base = next((r for r in results if r["mode"] == "in-tree"), None)
    if base is None:
        return []
    lines = []
    for r in results:
        if r is base or r["mode"] == "gang-only":
            continue
        both = set(r["step_comm_seconds"]) & set(base["step_comm_seconds"])
        worse = sum(1 for g in both if r["step_comm_seconds"][g] > base["step_comm_seconds"][g] * (1 + tolerance))
        better = sum(1 for g in both if r["step_comm_seconds"][g] < base["step_comm_seconds"][g] * (1 - tolerance))
        lines.append(f"# {r['mode']} vs in-tree: gangs bound whole {r['gangs_bound_whole']} vs "
                     f"{base['gangs_bound_whole']}; of {len(both)} gangs both bound, predicted step communication "
                     f"time worse for {worse}, better for {better}")
    return lines


if __name__ == "__main__":
    main()
