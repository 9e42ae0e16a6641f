"""`--out-dir DIR` of `meshfit simulate` and `meshfit plan`: one run's files per folder, never two runs mixed.

A run writes into a new or empty folder.  A folder that holds anything is refused (one line, exit 2) unless
`--overwrite` is given; then every file a previous simulate or plan run writes there is removed first, so no
CSV, plot or JSON of the old run (another policy, seed or candidate) survives next to the new ones.  Files
meshfit never writes are left alone.
"""

from __future__ import annotations

from pathlib import Path

from simulations.session import InputError

RUN_OUTPUTS = ("summary.json", "details.json", "runs.csv", "timeseries-*.csv", "jobs-*.csv", "plan.json",
               "plan.png", "jct_cdf.png", "gpu_allocation.png", "useful_work.png", "queue_length.png")
"""What simulate (`simulations.report.write_outputs`) and plan (`simulations.planner.run_plan`) write."""
NAMES_SHOWN = 3


def previous_outputs(out_dir: Path) -> list[Path]:
    """The files in `out_dir` a simulate or plan run writes, sorted."""
    return sorted({path for pattern in RUN_OUTPUTS for path in out_dir.glob(pattern) if path.is_file()})


def prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Check (before any simulation runs) that `out_dir` can take this run's files; with `overwrite`, remove a
    previous run's.  InputError, one line, for a file in the way, or a used folder without `overwrite`."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out-dir {out_dir} is a file, not a folder")
    if not out_dir.exists():
        return
    entries = sorted(p.name for p in out_dir.iterdir())
    if entries and not overwrite:
        shown = ", ".join(entries[:NAMES_SHOWN]) + (f" and {len(entries) - NAMES_SHOWN} more"
                                                    if len(entries) > NAMES_SHOWN else "")
        raise InputError(f"--out-dir {out_dir} is not empty ({shown}): give a new or empty folder, or "
                         f"--overwrite to replace a previous run's files there")
    if overwrite:
        for path in previous_outputs(out_dir):
            try:
                path.unlink()
            except OSError as exc:
                raise InputError(f"--overwrite: cannot remove {path}: {exc.strerror or exc}") from None
