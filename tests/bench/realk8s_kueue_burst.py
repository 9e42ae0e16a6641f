"""Issue 20's burst with a real Kueue: meshfit (TAS + its admission check + extender) against Kueue TAS alone.

    python tests/bench/realk8s_kueue_burst.py [--nodes 64] [--seed 0] [--json out.json]

Each mode runs on a fresh loopback control plane (1.35: etcd, kube-apiserver, kube-controller-manager with the
real Job controller, kube-scheduler) with a real Kueue (tests.realk8s.kueue_manager) over `--nodes` nodes x 8
GPUs (leaves of 8 nodes, 4 leaves per spine); Kueue TAS over spine / leaf / kubernetes.io/hostname, a
ClusterQueue whose GPU quota is the whole cluster.  The same burst -- Indexed Jobs of 1-8 pods (8- and 4-GPU
pods, podset-required-topology leaf) totalling 1.5x the GPUs -- is created at once:

1. `kueue-tas`: Kueue alone; pods use the default scheduler, which binds each to the host Kueue pinned it to;
2. `meshfit`: the AdmissionCheck meshfit.io/topology on the ClusterQueue, pods use the `meshfit` profile
   (kube-scheduler with meshfit as extender);
3. `meshfit-leaf` (only with `--modes`): the same, Kueue's Topology without the hostname level, so Kueue
   picks the leaf and meshfit the hosts.

Measured from a pod poll (every 0.25 s) and a Workload poll (every 0.3 s): jobs admitted, seconds from Job creation to all its pods bound
and from admission to all bound (p50 / p99), gangs partly bound at the settled point; then half the bound jobs
are deleted (they finish) and the next wave is measured the same way.  Not a timed test: it prints numbers.

Last run (64 nodes, seed 0, busy 2-core machine; seconds p50 / p99): every mode admitted 512 GPUs of jobs in
the first wave and bound every admitted job whole, none partly bound.  Job created -> all bound: Kueue TAS
alone 4.9 / 7.3, meshfit 5.9 / 8.1, meshfit with TAS spine / leaf 5.0 / 7.1; admitted -> all bound, second
wave: 2.9 / 3.5, 1.6 / 2.5, 1.9 / 2.2.  Table and reading in docs/deployment.md ("With Kueue").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kubernetes import config as kube_config  # noqa: E402
from kubernetes.client import BatchV1Api, CoreV1Api  # noqa: E402

from tests.realk8s.binaries import find_installs  # noqa: E402
from tests.realk8s.cluster_builders import LEAF_LABEL, create_nodes  # noqa: E402
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, free_port  # noqa: E402
from tests.realk8s.kueue_manager import KueueManager, find_kueue_installs  # noqa: E402
from tests.realk8s.kueue_objects import KueueObjects, indexed_job, is_admitted  # noqa: E402
from tests.realk8s.kueue_scenario import JOB_LABEL, LEVELS, POOL, make_queue, wait_queue_active  # noqa: E402
from tests.realk8s.scenario import burst_shapes  # noqa: E402


class BindWatch:
    """Polls the namespace's pods and records when each was first seen bound (a list every `interval` seconds:
    unlike a watch stream, nothing is lost when the API server drops a connection under load)."""

    def __init__(self, core: CoreV1Api, namespace: str, interval: float = 0.25) -> None:
        self.core, self.namespace, self.interval = core, namespace, interval
        self.bound_at: dict[str, float] = {}
        self.gone: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "BindWatch":
        """Start polling."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                pods = self.core.list_namespaced_pod(self.namespace).items
            except Exception:  # noqa: BLE001 - busy or going away: try again
                continue
            now = time.time()
            for pod in pods:
                name = pod.metadata.name
                if pod.spec.node_name and name not in self.bound_at and name not in self.gone:
                    self.bound_at[name] = now

    def forget(self, names: list[str]) -> None:
        """Pods of finished jobs: no longer counted, never counted again."""
        self.gone.update(names)
        for name in names:
            self.bound_at.pop(name, None)

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()


class AdmissionWatch:
    """Polls the namespace's Workloads and records when each Job was first seen admitted."""

    def __init__(self, objects: KueueObjects, interval: float = 0.3) -> None:
        self.objects, self.interval = objects, interval
        self.admitted_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "AdmissionWatch":
        """Start polling."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for workload in self.objects.workloads():
                    owner = next((o["name"] for o in workload["metadata"].get("ownerReferences") or ()), None)
                    if owner and owner not in self.admitted_at and is_admitted(workload):
                        self.admitted_at[owner] = time.time()
            except Exception:  # noqa: BLE001 - the API server goes away at the end
                continue

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()


def namespace(core: CoreV1Api, name: str) -> str:
    """Create a namespace and (unless the ServiceAccount controller was first) its default ServiceAccount."""
    from kubernetes.client.exceptions import ApiException

    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        core.create_namespaced_service_account(name, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                      "metadata": {"name": "default"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    return name


def plain_scheduler(plane: ControlPlane) -> ManagedProcess:
    """kube-scheduler with the default profile and no extender."""
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
           "clientConnection": {"kubeconfig": str(plane.scheduler_kubeconfig)}, "leaderElection": {"leaderElect": False}}
    path = plane.run_dir / "plain-scheduler.yaml"
    path.write_text(json.dumps(cfg))
    return ManagedProcess("kube-scheduler", [str(plane.bin_dir / "kube-scheduler"), f"--config={path}",
                                             "--bind-address=127.0.0.1", f"--secure-port={free_port()}"],
                          plane.logs / "plain-scheduler.log").start()


def job_bodies(ns: str, shapes, scheduler_name: str) -> list[dict]:
    """One Indexed Job per gang shape, queued in `training`, required to one leaf."""
    bodies = []
    for shape in shapes:
        body = indexed_job(ns, shape.name, shape.pods, shape.gpus, "training",
                           template_annotations={"kueue.x-k8s.io/podset-required-topology": LEAF_LABEL})
        spec = body["spec"]["template"]["spec"]
        spec["schedulerName"], spec["nodeSelector"] = scheduler_name, {POOL: ns}
        bodies.append(body)
    return bodies


def job_of(pod_name: str, jobs: dict[str, int]) -> str | None:
    """The Job a pod `<job>-<index>-<suffix>` belongs to."""
    job = pod_name.rsplit("-", 2)[0]
    return job if job in jobs else None


def wait_settled(watcher: BindWatch, admissions: AdmissionWatch, jobs: dict[str, int], quiet: float,
                 timeout: float, gone: set[str] = frozenset()) -> None:
    """Until every admitted job (not `gone`) is bound whole and nothing was admitted or bound for `quiet` s."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        bound = bound_by_job(watcher, jobs)
        waiting = [j for j in admissions.admitted_at if j not in gone and len(bound.get(j, ())) < jobs[j]]
        state = (len(watcher.bound_at), len(admissions.admitted_at))
        if state != last:
            last, since = state, time.monotonic()
        elif time.monotonic() - since >= quiet and state[1] > 0 and not waiting:
            return
        time.sleep(0.25)


def bound_by_job(watcher: BindWatch, jobs: dict[str, int]) -> dict[str, list[float]]:
    """Job -> the times its pods were first seen bound."""
    out: dict[str, list[float]] = {}
    for pod, at in watcher.bound_at.items():
        job = job_of(pod, jobs)
        if job:
            out.setdefault(job, []).append(at)
    return out


def percentiles(values: list[float]) -> dict:
    """p50 / p99 / max, seconds."""
    if not values:
        return {"p50": None, "p99": None, "max": None}
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return {"p50": round(statistics.median(values), 2), "p99": round(p99, 2), "max": round(values[-1], 2)}


def wave(watcher: BindWatch, admissions: AdmissionWatch, jobs: dict[str, int], started: dict[str, float],
         only: set[str], gone: set[str] = frozenset()) -> dict:
    """Numbers of one wave: the jobs of `only` admitted so far (`gone`: jobs deleted since, not counted)."""
    bound = bound_by_job(watcher, jobs)
    admitted = [j for j in only if j in admissions.admitted_at]
    whole = [j for j in admitted if len(bound.get(j, ())) == jobs[j]]
    partial = [j for j in jobs if j not in gone and 0 < len(bound.get(j, ())) < jobs[j]]
    return {"jobs_admitted": len(admitted), "jobs_bound_whole": len(whole), "partly_bound_jobs": partial,
            "admitted_jobs_not_bound_whole": sorted(set(admitted) - set(whole)),
            "created_to_all_bound_s": percentiles([max(bound[j]) - started[j] for j in whole]),
            "admitted_to_all_bound_s": percentiles([max(bound[j]) - admissions.admitted_at[j] for j in whole])}


def run(mode: str, nodes: int, seed: int) -> dict:
    """One mode on a fresh control plane with a fresh Kueue; returns its numbers."""
    installs = [i for i in find_installs()[0] if i.at_least(1, 31) and i.has("kube-controller-manager")]
    plane = ControlPlane(installs[-1]).start()
    plane.start_controller_manager()
    client = kube_config.new_client_from_config(config_file=str(plane.kubeconfig))
    manager = KueueManager(find_kueue_installs()[0][0], plane, client)
    meshfit = scheduler = None
    try:
        manager.start()
        core = CoreV1Api(client)
        ns = namespace(core, "bench")
        create_nodes(core, nodes, gpus=8, leaf_size=8, labels={POOL: ns})
        objects = KueueObjects(client, ns)
        with_meshfit = mode.startswith("meshfit")
        if with_meshfit:
            meshfit = MeshfitProcess(plane.kubeconfig, plane.logs / "meshfit.log", ["--log-format", "json"]).start()
            plane.start_scheduler(meshfit.url)
        else:
            scheduler = plain_scheduler(plane)
        levels = LEVELS["leaf" if mode == "meshfit-leaf" else "hostname"]
        queue = make_queue(objects, ns, gpus=nodes * 8, levels=levels, meshfit_check=with_meshfit)
        wait_queue_active(queue, timeout=120)
        shapes = burst_shapes(seed, nodes * 8, demand=1.5, max_pods=8)
        jobs = {s.name: s.pods for s in shapes}
        watcher, admissions = BindWatch(core, ns).start(), AdmissionWatch(objects).start()
        batch, started = BatchV1Api(client), {}

        def create(body: dict) -> None:
            started[body["metadata"]["name"]] = time.time()
            batch.create_namespaced_job(ns, body)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, job_bodies(ns, shapes, "meshfit" if with_meshfit else "default-scheduler")))
        wait_settled(watcher, admissions, jobs, 8.0, 300)
        first = wave(watcher, admissions, jobs, started, set(jobs))
        done = sorted(j for j, times in bound_by_job(watcher, jobs).items() if len(times) == jobs[j])
        finished = done[: len(done) // 2]
        rest = set(jobs) - set(admissions.admitted_at)
        for job in finished:
            batch.delete_namespaced_job(job, ns, propagation_policy="Background", grace_period_seconds=0)
            core.delete_collection_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}", grace_period_seconds=0)
        watcher.forget([p for p in watcher.bound_at if job_of(p, jobs) in finished])
        wait_settled(watcher, admissions, jobs, 8.0, 300, set(finished))
        second = wave(watcher, admissions, jobs, started, rest, set(finished))
        watcher.stop()
        admissions.stop()
        return {"jobs": len(jobs), "pods": sum(jobs.values()), "gpus_demanded": sum(s.gpus_total for s in shapes),
                "first_wave": first, "jobs_finished": len(finished), "second_wave": second}
    finally:
        if scheduler is not None:
            scheduler.stop()
        plane.stop_scheduler()
        if meshfit is not None:
            meshfit.stop()
        manager.stop()
        plane.stop()


def main() -> None:
    """Run both modes and print the summary JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="kueue-tas,meshfit")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary: dict = {"nodes": args.nodes, "gpus": args.nodes * 8, "seed": args.seed}
    for mode in args.modes.split(","):
        summary[mode] = run(mode, args.nodes, args.seed)
        print(json.dumps({mode: summary[mode]}, indent=2), flush=True)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
