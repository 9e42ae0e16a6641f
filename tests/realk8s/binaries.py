"""Where the real control-plane binaries are: `$MESHFIT_K8S_BIN`, else a per-user cache, one folder per version.

Binaries never live in the repository: `k8sbuild/build.sh <minor>` builds them from the Go module proxy into the
cache (`BUILD_COMMAND`).  Under `CI=true` a missing control plane fails the run (`absent`), it is never skipped.
Lookup:

1. `MESHFIT_K8S_BIN`: one folder, or several joined with `:` (one per Kubernetes version);
2. otherwise every `<cache>/k8s/<version>/bin` under the per-user cache (`$MESHFIT_CACHE`, default
   `$XDG_CACHE_HOME/meshfit` or `~/.cache/meshfit`).

A folder counts when it holds `kube-apiserver` and `kube-scheduler`; `kube-controller-manager` is
optional (tests that need the real Job controller skip without it).  etcd is taken from the folder when
present, else from `PATH` (Debian's `etcd-server`).  The version is what `kube-apiserver --version` prints.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

BIN_ENV = "MESHFIT_K8S_BIN"
BUILD_COMMAND = "k8sbuild/build.sh"
"""Builds a minor's control plane (and, from 1.36, the MeshfitPlacement kube-scheduler) into the cache."""
CACHE_ENV = "MESHFIT_CACHE"
REQUIRED = ("kube-apiserver", "kube-scheduler")
_VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def cache_root() -> Path:
    """The per-user cache folder of meshfit's test dependencies (outside any repository)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "meshfit"


@dataclass(frozen=True)
class K8sInstall:
    """One Kubernetes version's binaries: their folder, the etcd to use and the version they report."""

    bin_dir: Path
    etcd: Path
    version: tuple[int, int, int]

    @property
    def minor(self) -> str:
        """`1.35` style."""
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def test_id(self) -> str:
        """Test-id fragment, e.g. `k8s-1.35`."""
        return f"k8s-{self.minor}"

    @property
    def full(self) -> str:
        """`1.35.7` style."""
        return ".".join(map(str, self.version))

    def has(self, binary: str) -> bool:
        """True when `binary` is present and executable in this install's folder."""
        return os.access(self.bin_dir / binary, os.X_OK)

    def at_least(self, major: int, minor: int) -> bool:
        """True for this version or newer."""
        return self.version[:2] >= (major, minor)


@functools.lru_cache(maxsize=None)
def binary_version(path: Path) -> tuple[int, int, int] | None:
    """The `vX.Y.Z` a Kubernetes binary prints for `--version`, or None when it cannot say."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(out)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def _etcd_for(folder: Path) -> Path | None:
    if os.access(folder / "etcd", os.X_OK):
        return folder / "etcd"
    found = shutil.which("etcd")
    return Path(found) if found else None


def candidate_folders() -> list[Path]:
    """Folders to look in, in order: `$MESHFIT_K8S_BIN` entries, else the cache's `k8s/*/bin`."""
    if os.environ.get(BIN_ENV):
        return [Path(p) for p in os.environ[BIN_ENV].split(os.pathsep) if p]
    root = cache_root() / "k8s"
    return sorted(p / "bin" for p in root.iterdir() if (p / "bin").is_dir()) if root.is_dir() else []


def find_installs() -> tuple[list[K8sInstall], list[str]]:
    """(usable installs, one newest per minor version, oldest first; reasons for folders that were not usable)."""
    found: dict[tuple[int, int], K8sInstall] = {}
    problems: list[str] = []
    for folder in candidate_folders():
        missing = [b for b in REQUIRED if not os.access(folder / b, os.X_OK)]
        etcd = _etcd_for(folder)
        version = None if missing else binary_version(folder / "kube-apiserver")
        if missing or etcd is None or version is None:
            what = (f"missing {', '.join(missing)}" if missing else "no etcd (neither there nor on PATH)"
                    if etcd is None else "kube-apiserver --version printed no version")
            problems.append(f"{folder}: {what}")
            continue
        install = K8sInstall(folder, etcd, version)
        if version[:2] not in found or found[version[:2]].version < version:
            found[version[:2]] = install
    return [found[k] for k in sorted(found)], problems


def missing_reason(problems: list[str]) -> str:
    """Why no control plane can start here: the places looked at and what was missing."""
    where = (f"${BIN_ENV}={os.environ[BIN_ENV]}" if os.environ.get(BIN_ENV)
             else f"${BIN_ENV} unset and no {cache_root() / 'k8s' / '<version>' / 'bin'}")
    detail = "; ".join(problems)
    return (f"no real Kubernetes binaries (kube-apiserver, kube-scheduler; etcd from the folder or PATH): {where}"
            + (f" ({detail})" if detail else "") + f"; build them with {BUILD_COMMAND} 1.37 (etcd: apt-get install "
            "etcd-server)")


def in_ci() -> bool:
    """True under CI (`CI=true`), where a missing control plane is a failure, not a skip."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def absent(reason: str) -> NoReturn:
    """Stop a test whose real binaries are missing: a skip with `reason`, or under `CI=true` a failure in one line
    (CI never passes by skipping the control plane)."""
    import pytest
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)
