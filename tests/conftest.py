"""Shared pytest setup: `from tests.builders import ...` under plain `pytest`; which tests share an xdist worker."""

import os
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


# ----- parallel runs (pytest-xdist: `-n auto --dist loadgroup` in pyproject's addopts) -------------------------
# Tests that start a real control plane (etcd, kube-apiserver, kube-scheduler, Kueue) are timing sensitive and
# share session-scoped control planes: they all run in one group, i.e. one after the other on one worker, as in a
# serial run, while the other workers take the rest.  The group is chosen by folder, so tests added there later
# join it without a marker of their own.  The grouping is done by the scheduler below, from each test's path:
# xdist's own `xdist_group` marks are silently ignored with pytest >= 9.2 (pytest-xdist issue #1386, the `@group`
# suffix it writes into the node id no longer takes effect).
SERIAL_FOLDERS = ("realk8s", "soak")
"""Folders under tests/ whose tests run in one group (`REAL_CONTROL_PLANE_GROUP`), on one worker."""
REAL_CONTROL_PLANE_GROUP = "real-control-plane"
"""The group of every test under `SERIAL_FOLDERS`."""
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
    """The group of a test file: `REAL_CONTROL_PLANE_GROUP` under tests/realk8s or tests/soak, the module's own
    path for `SHARED_FIXTURE_MODULES`, else None (its tests spread over the workers one by one)."""
    try:
        relative = Path(path).resolve().relative_to(_TESTS)
    except ValueError:
        return None
    if relative.parts and relative.parts[0] in SERIAL_FOLDERS:
        return REAL_CONTROL_PLANE_GROUP
    return relative.as_posix() if relative.as_posix() in SHARED_FIXTURE_MODULES else None


def work_unit(nodeid: str, rootdir: Path) -> str:
    """The unit of work a test id belongs to: an explicit xdist `@group` suffix, else `xdist_group_for` its file,
    else the test itself."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    return xdist_group_for(rootdir / nodeid.split("::", 1)[0]) or nodeid


def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadgroup`: load scheduling, one test at a time, except the groups of `work_unit`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    rootdir = Path(config.rootpath)

    class PathGroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with `work_unit` as the scope (largest units are handed out first)."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, rootdir)

    return PathGroupScheduling(config, log)


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for `-n auto`: twice the usable cores, 2 to 6 (most of the suite waits on subprocesses and sockets)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(2 * cores, 6))


# ----- CI never passes by skipping the real control plane ------------------------------------------------------
def pytest_sessionstart(session) -> None:
    """Under `CI=true`, a run that would collect the real-control-plane tests stops at once, in one line, when no
    Kubernetes binaries are installed (`tests.realk8s.binaries`): it would otherwise fail each of them alike."""
    from tests.realk8s.binaries import BUILD_COMMAND, find_installs, in_ci
    if not in_ci() or getattr(session.config, "workerinput", None) is not None:
        return
    args = [str(a) for a in session.config.args] or ["tests"]
    if not any(folder in arg or arg.rstrip("/").endswith("tests") for arg in args for folder in SERIAL_FOLDERS):
        return
    installs, problems = find_installs()
    if not installs:
        import pytest
        pytest.exit(f"CI=true and no real Kubernetes control plane ({'; '.join(problems) or 'nothing in the cache'}): "
                    f"build it with {BUILD_COMMAND} 1.37", returncode=1)


# ----- the end of a run: one line of skip reasons (pytest shows them only with -rs) ------------------------------
def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Print the skip reasons grouped into short categories with counts (tests/skip_summary.py), on one line."""
    from tests.skip_summary import SkipSummary, missing_supported_minors, reason_of

    skipped = [r for r in terminalreporter.stats.get("skipped", []) if getattr(r, "longrepr", None) is not None]
    line = SkipSummary(missing_supported_minors).add(reason_of(r.longrepr) for r in skipped).line()
    if line:
        terminalreporter.write_line(line)
