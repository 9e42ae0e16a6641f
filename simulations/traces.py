"""Trace loaders: Gavel's Philly-derived `.trace` files and the generic CSV of DESIGN.md.

Philly-derived traces (stanford-futuredata/gavel, `traces/msr/seed=0`) give job lengths in
training *steps*.  They are turned into seconds by **per-job-type quantile matching** to the Philly
runtime distribution (`data/philly_runtime_quantiles.csv`, from the 83,152 non-zero runtimes in
alibaba/clusterdata's `philly_runtime.csv`): within each job type (model and batch size) jobs are
ranked by steps, and the k-th of n gets the runtime at quantile (k + 0.5) / n.  Gavel drew its
durations from the Philly distribution independently of the job type and converted them to steps
with that type's throughput, so ranking within a type recovers the order and the match restores the
distribution.  Philly-era jobs are data-parallel CNN / RNN / recommendation models, so their
parallelism is `dp = GPUs`, with approximate parameter counts per model family for gradient volume.

Generic CSV: header `job_id,submit_time,duration_seconds,gpus`, optional `parallelism`
(`tp=8,pp=2,dp=4`), `model` (annotation syntax), `priority` and `steps` columns; `duration_seconds` is the
runtime under an ideal placement on the trace's GPU (`--trace-gpu`, default H100 SXM).  A row with a `model` and
`steps` is timed from its FLOPs on each cluster's GPU (`simulations.speed`); its `duration_seconds` may be left
empty (it is then the compute-only estimate on an H100 at the default MFU, used for reports such as the sampling
span).  Any problem raises `TraceError` naming the file and line.
"""

from __future__ import annotations

import bisect
import csv
import io
from functools import lru_cache
from pathlib import Path

from scheduler.placement.jobs import JobSpecError, ModelShape, Parallelism
from simulations.workload import SimJob, Workload
from topology.textfile import read_text

DATA_DIR = Path(__file__).parent / "data"
QUANTILE_FILE = DATA_DIR / "philly_runtime_quantiles.csv"
REQUIRED_COLUMNS = ("job_id", "submit_time", "duration_seconds", "gpus")
OPTIONAL_COLUMNS = ("parallelism", "model", "priority", "steps")
PHILLY_METHOD = "per-job-type quantile matching of steps to the Philly runtime distribution"
GAVEL_PARAMS = {
    "ResNet-18": 11.2e6, "ResNet-50": 25.6e6, "Transformer": 52e6, "LM": 66e6,
    "Recommendation": 12e6, "CycleGAN": 28e6, "A3C": 1.2e6,
}
"""Approximate parameter counts of Gavel's model families (gradient all-reduce volume only)."""


class TraceError(ValueError):
    """A trace that cannot be read: missing file, bad header, bad value (one line, with location)."""


@lru_cache(maxsize=1)
def philly_quantiles() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(quantile levels, runtimes in seconds) of the bundled Philly runtime distribution."""
    levels, runtimes = [], []
    with QUANTILE_FILE.open(encoding="utf-8") as handle:
        rows = csv.reader(line for line in handle if not line.startswith("#"))
        next(rows)
        for level, runtime in rows:
            levels.append(float(level))
            runtimes.append(float(runtime))
    return tuple(levels), tuple(runtimes)


def philly_runtime_at(quantile: float) -> float:
    """Philly runtime (seconds) at `quantile` in [0, 1], linearly interpolated."""
    levels, runtimes = philly_quantiles()
    q = min(max(quantile, 0.0), 1.0)
    i = bisect.bisect_left(levels, q)
    if i == 0:
        return runtimes[0]
    lo, hi = levels[i - 1], levels[min(i, len(levels) - 1)]
    weight = 0.0 if hi == lo else (q - lo) / (hi - lo)
    return runtimes[i - 1] + weight * (runtimes[min(i, len(runtimes) - 1)] - runtimes[i - 1])


def _number(text: str, what: str, where: str, integer: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {what} must be a number, got {text!r}") from None
    if value != value or value < 0 or (integer and (value != int(value) or value < 1)):
        kind = "a positive integer" if integer else "a non-negative number"
        raise TraceError(f"{where}: {what} must be {kind}, got {text!r}")
    return int(value) if integer else value


def _gavel_family(job_type: str) -> str:
    return job_type.split(" (", 1)[0].strip()


def _gavel_rows(path: Path, prefix: str) -> list[tuple[SimJob, float]]:
    """(job with duration unset, steps) for every line of one Gavel trace file."""
    rows = []
    for number, line in enumerate(read_text(path, "trace", TraceError).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        cols = line.split("\t")
        if len(cols) != 7:
            raise TraceError(f"{where}: expected 7 tab-separated columns, got {len(cols)}")
        steps = _number(cols[4], "total steps", where)
        submit = _number(cols[5], "arrival time", where)
        gpus = int(_number(cols[6], "scale factor (GPUs)", where, integer=True))
        family = _gavel_family(cols[0])
        params = GAVEL_PARAMS.get(family, 25e6)
        job = SimJob(f"{prefix}{number - 1:05d}", submit, 0.0, gpus, Parallelism(dp=gpus),
                     ModelShape(params=params, layers=1, hidden=1024, seq=1, global_batch=gpus), kind=cols[0])
        rows.append((job, steps))
    return rows


def _match_durations(rows: list[tuple[SimJob, float]]) -> None:
    """Set each job's duration by quantile matching its steps within its job type."""
    by_type: dict[str, list[tuple[float, int]]] = {}
    for index, (job, steps) in enumerate(rows):
        by_type.setdefault(job.kind, []).append((steps, index))
    for members in by_type.values():
        members.sort()
        for rank, (_steps, index) in enumerate(members):
            rows[index][0].duration = philly_runtime_at((rank + 0.5) / len(members))


def load_gavel(path: str | Path) -> Workload:
    """Jobs of one Gavel `.trace` file, or of every `.trace` in a directory (merged, ids per file)."""
    target = Path(path)
    files = sorted(target.glob("*.trace")) if target.is_dir() else [target]
    if not files:
        raise TraceError(f"{target}: no .trace files found")
    rows: list[tuple[SimJob, float]] = []
    for file in files:
        rows.extend(_gavel_rows(file, f"{file.stem}-" if len(files) > 1 else "job-"))
    if not rows:
        raise TraceError(f"{target}: the trace has no jobs")
    _match_durations(rows)
    return Workload([job for job, _ in rows], str(target), PHILLY_METHOD)


def _csv_job(row: dict[str, str], where: str) -> SimJob:
    job_id = (row.get("job_id") or "").strip()
    if not job_id:
        raise TraceError(f"{where}: empty job_id")
    gpus = int(_number(row["gpus"], "gpus", where, integer=True))
    steps_text = (row.get("steps") or "").strip()
    duration_text = (row.get("duration_seconds") or "").strip()
    duration = _number(duration_text, "duration_seconds", where) if duration_text or not steps_text else 0.0
    job = SimJob(job_id, _number(row["submit_time"], "submit_time", where), duration, gpus)
    try:
        if (row.get("parallelism") or "").strip():
            job.parallelism = Parallelism.parse(row["parallelism"])
        if (row.get("model") or "").strip():
            job.model = ModelShape.parse(row["model"])
    except JobSpecError as exc:
        raise TraceError(f"{where}: {exc}") from None
    if job.parallelism is not None and job.parallelism.world_size != gpus:
        raise TraceError(f"{where}: parallelism {job.parallelism} has world size "
                         f"{job.parallelism.world_size} but gpus is {gpus}")
    if steps_text:
        _set_steps(job, steps_text, where, estimate=not duration_text)
    if (row.get("priority") or "").strip():
        try:
            job.priority = int(row["priority"])
        except ValueError:
            raise TraceError(f"{where}: priority must be an integer, got {row['priority']!r}") from None
    return job


def _set_steps(job: SimJob, text: str, where: str, estimate: bool) -> None:
    """Give `job` its training steps (it must have a model); without a duration, estimate one on an H100."""
    if job.model is None:
        raise TraceError(f"{where}: steps needs a model (params, layers, hidden, seq, global-batch)")
    job.steps = _number(text, "steps", where)
    if estimate:
        from scheduler.placement.steptime import StepTimeModel
        from simulations.workload import infer_parallelism
        from topology.hardware import DEFAULT_GENERATION, get_generation

        parallelism = job.parallelism or infer_parallelism(job.gpus)
        compute = StepTimeModel().compute_seconds(job.model, parallelism, get_generation(DEFAULT_GENERATION))
        job.duration = job.steps * compute


def load_csv(path: str | Path) -> Workload:
    """Jobs of a generic CSV trace (see module doc)."""
    target = Path(path)
    reader = csv.DictReader(io.StringIO(read_text(target, "trace", TraceError), newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{target}: missing column(s) {', '.join(missing)} "
                         f"(header must include {','.join(REQUIRED_COLUMNS)})")
    reader.fieldnames = header
    jobs = [_csv_job(row, f"{target.name}:{number}") for number, row in enumerate(reader, 2)]
    if not jobs:
        raise TraceError(f"{target}: the trace has no jobs")
    duplicates = len(jobs) - len({j.job_id for j in jobs})
    if duplicates:
        raise TraceError(f"{target}: {duplicates} duplicate job_id value(s)")
    return Workload(jobs, str(target), "generic CSV (duration_seconds = runtime under an ideal placement)")


def load_trace(path: str | Path) -> Workload:
    """Load a generic CSV, a Gavel `.trace` file, or a directory of `.trace` files."""
    target = Path(path)
    if not target.exists():
        raise TraceError(f"trace {target} does not exist")
    if target.is_dir() or target.suffix == ".trace":
        return load_gavel(target)
    return load_csv(target)


def write_csv(workload: Workload, path: str | Path) -> None:
    """Write a workload as a generic CSV trace (parallelism and model columns included)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS])
        for job in workload.jobs:
            model = job.model
            model_text = (f"params={model.params:g},layers={model.layers},hidden={model.hidden},seq={model.seq},"
                          f"micro-batch={model.micro_batch},global-batch={model.global_batch}") if model else ""
            writer.writerow([job.job_id, f"{job.submit:.3f}", f"{job.duration:.3f}", job.gpus,
                             str(job.parallelism) if job.parallelism else "", model_text, job.priority,
                             "" if job.steps is None else f"{job.steps:g}"])
