"""Test sizes: quick by default, the full sizes with `MESHFIT_FULL_TESTS=1` (benchmarks, studies, property runs).

The default suite (README's `python -m pytest`) must answer in minutes, so the slow studies, the
benchmarks and the property tests run smaller instances and fewer examples by default; each still
checks what it claims.  `MESHFIT_FULL_TESTS=1` restores the sizes they were written with.
"""

from __future__ import annotations

import os
from typing import TypeVar

FULL_ENV = "MESHFIT_FULL_TESTS"
"""Environment variable: `1` runs every sized test at its full size."""

T = TypeVar("T")


def full_tests() -> bool:
    """True when `MESHFIT_FULL_TESTS` asks for the full sizes (`1`, `true`, `yes`)."""
    return os.environ.get(FULL_ENV, "").strip().lower() in {"1", "true", "yes"}


def pick(quick: T, full: T) -> T:
    """`full` under `MESHFIT_FULL_TESTS=1`, else `quick`."""
    return full if full_tests() else quick


def examples(full: int, quick: int | None = None) -> int:
    """Hypothesis `max_examples`: `full` under `MESHFIT_FULL_TESTS=1`, else `quick` (default a quarter, at least 10)."""
    return pick(quick if quick is not None else max(10, full // 4), full)
