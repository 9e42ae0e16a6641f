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
SHARED_FIXTURE_MODULES = (
    "runtime/test_local_runtime.py",      # `uninterrupted`: a multi-process torch training run, tens of seconds
    "usability/test_sim_metrics.py",      # `run`: a simulation with plots
    "bench/test_policy_speed_bench.py",   # `hgx_16k`: a 16k-GPU cluster
    "bench/test_preemption_bench.py",     # `full_10k`: a full 10k-GPU cluster
    "bench/test_topology_bench.py",       # `nodelist_items`: a 2,048-node NodeList
)
"""Modules whose tests share an expensive module-scoped fixture: each runs on one worker, so it is built once."""
_TESTS = Path(__file__).resolve().parent


def xdist_group_for(path: Path) -> str | None:
    """The xdist group of a test file: `REAL_CONTROL_PLANE_GROUP` under tests/realk8s or tests/soak, the module's
    own path for `SHARED_FIXTURE_MODULES`, else None (its tests spread over the workers one by one)."""
    try:
        relative = Path(path).resolve().relative_to(_TESTS)
    except ValueError:
        return None
    if relative.parts and relative.parts[0] in SERIAL_FOLDERS:
        return REAL_CONTROL_PLANE_GROUP
    return relative.as_posix() if relative.as_posix() in SHARED_FIXTURE_MODULES else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the group into the test id's `@group`
def pytest_collection_modifyitems(config, items) -> None:
    """Put every real-control-plane test into one xdist group, and each shared-fixture module into its own."""
    for item in items:
        group = xdist_group_for(Path(str(item.fspath)))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for `-n auto`: twice the usable cores, 2 to 6 (most of the suite waits on subprocesses and sockets)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(2 * cores, 6))
