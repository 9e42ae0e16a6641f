"""`SkipSummary`: the skip reasons of a run, grouped into a few short categories with counts, on one line.

pytest prints skip reasons only with `-rs`; a run that skips dozens of tests for want of Kubernetes binaries, a GPU
or a tool then looks broken.  tests/conftest.py's `pytest_terminal_summary` prints this line at the end instead,
e.g. `91 skipped: 80 no Kubernetes binaries (build them with k8sbuild/build.sh 1.37), 11 no GPU`.  Each category
that has a fix names it; a reason no category knows is shown by its first words.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

SUPPORTED_MINORS = ("1.34", "1.35", "1.36", "1.37")
"""The Kubernetes minors meshfit supports (docs/compatibility.md), each built by `k8sbuild/build.sh <minor>`."""
OTHER_WIDTH = 60
"""Characters of a reason no category knows."""


@dataclass(frozen=True)
class Category:
    """A group of skip reasons: the pattern that recognises them and the short text the summary shows."""

    pattern: str
    text: str

    def matches(self, reason: str) -> bool:
        """True when `reason` belongs here."""
        return re.search(self.pattern, reason, re.IGNORECASE) is not None


NO_BINARIES = "no Kubernetes binaries"
"""The category of real-cluster tests skipped for want of binaries (its text gets the build command)."""
CATEGORIES = (
    Category(r"no (real )?Kubernetes binaries|no installed Kubernetes version|no kube-controller-manager", NO_BINARIES),
    Category(r"version-independent: runs on the newest", "version-independent, run on the newest Kubernetes only"),
    Category(r"needs Kubernetes \S+ or newer|Kubernetes \S+ and older only|these binaries are",
             "not for this Kubernetes version"),
    Category(r"\bno helm\b", "no helm (build it with k8sbuild/build_helm.sh)"),
    Category(r"kueue", "no Kueue"),
    Category(r"kubectl", "no kubectl"),
    Category(r"promtool", "no promtool"),
    Category(r"openssl", "no openssl"),
    Category(r"\bGPU\b|CUDA|nvidia-smi", "no GPU"),
    Category(r"could not import 'torch'|\btorch\b", "no torch"),
    Category(r"could not import", "a Python module missing"),
    Category(r"docker", "no Docker"),
)
"""The categories, first match wins."""


def reason_of(longrepr: object) -> str:
    """The reason text of a skip report's `longrepr` (a (path, line, reason) tuple, or text)."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return re.sub(r"^Skipped: ", "", str(text)).strip()


@dataclass
class SkipSummary:
    """Skip reasons counted by category; `line()` is the summary (None without skips)."""

    missing_minors: Callable[[], list[str]] = field(default=lambda: list(SUPPORTED_MINORS))
    counts: Counter = field(default_factory=Counter)

    def add(self, reasons: Iterable[str]) -> "SkipSummary":
        """Count each reason under its category."""
        for reason in reasons:
            self.counts[self.category(reason)] += 1
        return self

    def category(self, reason: str) -> str:
        """The short text of the category of `reason`."""
        for category in CATEGORIES:
            if category.matches(reason):
                return self.with_fix(category.text)
        first = " ".join(reason.split())
        return first if len(first) <= OTHER_WIDTH else first[:OTHER_WIDTH - 3].rstrip() + "..."

    def with_fix(self, text: str) -> str:
        """`text`, with the build command for missing Kubernetes binaries."""
        if text != NO_BINARIES:
            return text
        minors = self.missing_minors() or [SUPPORTED_MINORS[-1]]
        return f"{NO_BINARIES} (build them with k8sbuild/build.sh {' '.join(minors)})"

    def line(self) -> str | None:
        """`N skipped: n1 category, n2 category, ...`, most frequent first."""
        total = sum(self.counts.values())
        if not total:
            return None
        parts = ", ".join(f"{count} {text}" for text, count in sorted(self.counts.items(), key=lambda i: (-i[1], i[0])))
        return f"{total} skipped: {parts}"


def missing_supported_minors() -> list[str]:
    """The supported minors no Kubernetes binaries were found for (tests/realk8s/binaries.py's lookup)."""
    from tests.realk8s.binaries import find_installs

    found = {install.minor for install in find_installs()[0]}
    return [minor for minor in SUPPORTED_MINORS if minor not in found]
