"""Run many simulations: (policy x cluster x seed) in a local process pool, or on Dask with an address.

Each run is a picklable `RunSpec`; workers build their own topology (so runs never share state),
replay the workload and return a `RunResult`.  Results come back in the order of the specs whatever
the execution order, so outputs are deterministic.  Dask (`pip install meshfit[sweep]`) is imported
only when `dask_address` is given.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Callable

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import SimConfig
from simulations.metrics import RunResult
from simulations.simulator import Simulator
from simulations.workload import Workload

RunProgress = Callable[[int, int, int], None]
"""progress(run index, jobs finished, jobs total)."""


class SweepError(RuntimeError):
    """A sweep could not run (e.g. Dask missing or unreachable)."""


@dataclass(frozen=True)
class RunSpec:
    """One simulation to run: cluster, policy, settings (the seed lives in `config`)."""

    cluster: ClusterSpec
    policy: str
    config: SimConfig


def run_one(spec: RunSpec, workload: Workload, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Build the cluster and replay the workload under one policy."""
    topo = build_cluster(spec.cluster)
    return Simulator(topo, workload, spec.policy, spec.config, spec.cluster.label(), progress,
                     spec.cluster.hardware(topo), spec.cluster.mfu).run()


def _run_in_worker(index: int, spec: RunSpec, workload: Workload, queue: object | None) -> tuple[int, RunResult]:
    def report(done: int, total: int) -> None:
        if queue is not None:
            queue.put((index, done, total))  # type: ignore[attr-defined]

    return index, run_one(spec, workload, report if queue is not None else None)


def sweep_specs(clusters: list[ClusterSpec], policies: list[str], seeds: list[int], config: SimConfig) -> list[RunSpec]:
    """Every (cluster, policy, seed) combination, in that nesting order."""
    return [RunSpec(cluster, policy, replace(config, seed=seed))
            for cluster in clusters for policy in policies for seed in seeds]


def run_many(specs: list[RunSpec], workload: Workload, workers: int | None = None,
             dask_address: str | None = None, progress: RunProgress | None = None) -> list[RunResult]:
    """Run every spec (in-process when one worker, else a process pool, or Dask); results in spec order."""
    if dask_address:
        return _run_dask(specs, workload, dask_address, progress)
    workers = workers or min(len(specs), os.cpu_count() or 1)
    if workers <= 1 or len(specs) == 1:
        results = []
        for index, spec in enumerate(specs):
            callback = (lambda done, total, i=index: progress(i, done, total)) if progress else None
            results.append(run_one(spec, workload, callback))
        return results
    return _run_pool(specs, workload, workers, progress)


def _run_pool(specs: list[RunSpec], workload: Workload, workers: int, progress: RunProgress | None) -> list[RunResult]:
    import multiprocessing
    import queue as queue_module

    results: list[RunResult | None] = [None] * len(specs)
    with multiprocessing.Manager() as manager:
        updates = manager.Queue() if progress else None
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_run_in_worker, i, spec, workload, updates) for i, spec in enumerate(specs)]
            pending = set(futures)
            while pending:
                finished = {f for f in pending if f.done()}
                for future in finished:
                    index, result = future.result()
                    results[index] = result
                pending -= finished
                if updates is None:
                    if pending:
                        next(as_completed(pending))
                    continue
                try:
                    progress(*updates.get(timeout=0.2))  # type: ignore[misc]
                except queue_module.Empty:
                    pass
    return [r for r in results if r is not None]


def _run_dask(specs: list[RunSpec], workload: Workload, address: str, progress: RunProgress | None) -> list[RunResult]:
    try:
        from dask.distributed import Client, as_completed as dask_completed
    except ImportError:
        raise SweepError("--dask needs dask.distributed: pip install 'meshfit[sweep]'") from None
    try:
        client = Client(address, timeout="5s")
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        scattered = client.scatter(workload, broadcast=True)
        futures = [client.submit(_run_in_worker, i, spec, scattered, None, pure=False) for i, spec in enumerate(specs)]
        results: list[RunResult | None] = [None] * len(specs)
        for future in dask_completed(futures):
            index, result = future.result()
            results[index] = result
            if progress:
                progress(index, len(result.jobs), len(result.jobs))
        return [r for r in results if r is not None]
    finally:
        client.close()
