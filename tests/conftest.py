"""Shared pytest setup: `from tests.builders import ...` under plain `pytest`, and the xdist grouping of real-cluster tests."""

import os
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


# ----- parallel runs (pytest-xdist: `-n auto --dist loadgroup` in pyproject's addopts) -------------------------
# Tests that start a real control plane (etcd, kube-apiserver, kube-scheduler, Kueue) are timing sensitive and
# share session-scoped control planes: they all run in one xdist group, i.e. one after the other on one worker,
# as in a serial run, while the other workers take the rest.  The group is chosen by folder, so tests added there
# later join it without a marker of their own.
SERIAL_FOLDERS = ("realk8s", "soak")
"""Folders under tests/ whose tests run in one xdist group (`REAL_CONTROL_PLANE_GROUP`)."""
REAL_CONTROL_PLANE_GROUP = "real-control-plane"
"""The xdist group of every test under `SERIAL_FOLDERS`."""
_TESTS = Path(__file__).resolve().parent


def xdist_group_for(path: Path) -> str | None:
    """The xdist group of a test file: `REAL_CONTROL_PLANE_GROUP` under tests/realk8s or tests/soak, else None."""
    try:
        relative = Path(path).resolve().relative_to(_TESTS)
    except ValueError:
        return None
    return REAL_CONTROL_PLANE_GROUP if relative.parts and relative.parts[0] in SERIAL_FOLDERS else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the group into the test id's `@group`
def pytest_collection_modifyitems(config, items) -> None:
    """Put every real-control-plane test into one xdist group (see `xdist_group_for`)."""
    for item in items:
        group = xdist_group_for(Path(str(item.fspath)))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for `-n auto`: twice the usable cores, 2 to 6 (most of the suite waits on subprocesses and sockets)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(2 * cores, 6))
