"""What the `simulate` and `plan` commands do, minus option parsing: inputs, runs, outputs (tables: `simulations.tables`).

Every input problem is raised as `InputError` (one line) so the CLI can exit 2 without a traceback.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from simulations.cluster import ClusterSpec, build_cluster
from simulations.config import SimConfig
from simulations.metrics import RunResult
from simulations.runner import RunSpec, SweepError, run_many
from simulations.workload import DEFAULT_MAX_TP, Workload, infer_parallelism
from topology.strict import did_you_mean, unknown_name_message


LINK_FIELDS = ("bandwidth_gbps", "latency_us", "oversubscription")
"""What `--link LEVEL.FIELD=VALUE` may set (the fields of `topology.config.LinkOverride`)."""


class InputError(ValueError):
    """Bad command-line input: unknown policy, unreadable trace, invalid cluster (one line)."""


def parse_links(items: list[str]) -> dict[str, dict[str, float]]:
    """`["spine.oversubscription=4"]` -> `{"spine": {"oversubscription": 4.0}}`."""
    links: dict[str, dict[str, float]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        level, dot, field = key.strip().rpartition(".")
        if not sep or not dot or field not in LINK_FIELDS:
            hint = did_you_mean(field, LINK_FIELDS) if sep and dot else ""
            raise InputError(f"--link expects LEVEL.FIELD=VALUE with FIELD one of {', '.join(LINK_FIELDS)}; "
                             f"got {item!r}{hint}")
        try:
            links.setdefault(level, {})[field] = float(value)
        except ValueError:
            raise InputError(f"--link {item!r}: {value!r} is not a number") from None
    return links


def check_policies(policies: list[str]) -> list[str]:
    """The policies, de-duplicated in order; InputError naming the known ones if one is unknown."""
    from plugins.policies import POLICIES

    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise InputError(unknown_name_message("policy", unknown[0], POLICIES))
    return list(dict.fromkeys(policies))


def cluster_spec(cluster: Path | None, preset: str | None, nodes: int, links: dict) -> ClusterSpec:
    """The cluster spec from `--cluster` or `--preset/--nodes`, validated by building it once."""
    from topology.model import TopologyError

    if (cluster is None) == (preset is None):
        raise InputError("give exactly one of --cluster FILE or --preset NAME")
    spec = ClusterSpec(preset, nodes, str(cluster) if cluster else None, links)
    try:
        build_cluster(spec, fast=False)
    except TopologyError as exc:
        raise InputError(str(exc)) from None
    return spec


def load_workload(trace: Path | None, synthetic: int | None, cluster_gpus: int, seed: int, load: float,
                  arrival_scale: float = 1.0, max_jobs: int | None = None,
                  max_tp: int = DEFAULT_MAX_TP) -> Workload:
    """The workload from `--trace` or `--synthetic N` (scaled / truncated as asked; tp inferred up to `max_tp`)."""
    from simulations.synthetic import generate
    from simulations.traces import TraceError, load_trace

    if (trace is None) == (synthetic is None):
        raise InputError("give exactly one of --trace FILE or --synthetic N")
    if arrival_scale <= 0:
        raise InputError("--arrival-scale must be > 0")
    if max_tp < 1:
        raise InputError("--max-tp must be at least 1")
    try:
        workload = (load_trace(trace) if trace is not None
                    else generate(synthetic or 0, cluster_gpus, seed, load, max_tp=max_tp))
    except TraceError as exc:
        raise InputError(str(exc)) from None
    jobs = workload.jobs[:max_jobs] if max_jobs else workload.jobs
    jobs = [job if job.parallelism else replace(job, parallelism=infer_parallelism(job.gpus, max_tp=max_tp))
            for job in jobs]
    if arrival_scale != 1.0:
        jobs = [replace(job, submit=job.submit * arrival_scale) for job in jobs]
    notes = workload.notes + ([f"arrival times x {arrival_scale:g}"] if arrival_scale != 1.0 else [])
    return Workload(list(jobs), workload.source, workload.method, notes)


@contextmanager
def progress_bar(enabled: bool, runs: list[str]) -> Iterator[Any]:
    """A rich progress bar with one task per run (a no-op callback when disabled)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as progress:
        tasks = [progress.add_task(name, total=None) for name in runs]

        def update(index: int, done: int, total: int) -> None:
            progress.update(tasks[index], completed=done, total=total)

        yield update


def execute(specs: list[RunSpec], workload: Workload, workers: int | None, dask: str | None,
            show_progress: bool) -> tuple[list[RunResult], float]:
    """Run the specs with a progress bar when asked; (results, wall seconds)."""
    names = [f"{s.policy} on {s.cluster.label()} (seed {s.config.seed})" for s in specs]
    started = time.perf_counter()
    try:
        with progress_bar(show_progress, names) as update:
            results = run_many(specs, workload, workers, dask, update)
    except SweepError as exc:
        raise InputError(str(exc)) from None
    return results, time.perf_counter() - started


def stdout_is_tty() -> bool:
    """True when a human is watching (progress bars on)."""
    return sys.stdout.isatty()


def _trace_gpu(name: str) -> str:
    """`name` if it is a GPU generation meshfit knows; InputError with a did-you-mean hint otherwise."""
    from topology.hardware import get_generation
    from topology.model import TopologyError

    try:
        return get_generation(name).name
    except TopologyError as exc:
        raise InputError(f"--trace-gpu: {exc}") from None


def base_config(seed: int, **settings: Any) -> SimConfig:
    """A `SimConfig` from CLI settings (ValueError from the models becomes InputError)."""
    from simulations.config import FailureModel, RuntimeModel

    try:
        runtime = RuntimeModel(settings.pop("comm_fraction"), settings.pop("overlap"), settings.pop("mfu", 0.4),
                               _trace_gpu(settings.pop("trace_gpu", "h100-sxm")))
        failures = FailureModel(settings.pop("node_mtbf_hours"), settings.pop("repair_hours"),
                                settings.pop("checkpoint_minutes"), settings.pop("restart_minutes"),
                                settings.pop("recovery", "restart"), settings.pop("spares", 0.0),
                                settings.pop("replace_minutes", 3.0))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    horizon = settings.pop("horizon_hours", None)
    limit = settings.get("max_comm_ratio")
    if limit is not None and not 1.0 <= limit < float("inf"):
        raise InputError(f"--max-comm-ratio must be a finite number >= 1, got {limit}")
    return SimConfig(runtime=runtime, failures=failures, seed=seed,
                     horizon_seconds=horizon * 3600.0 if horizon else None, **settings)
