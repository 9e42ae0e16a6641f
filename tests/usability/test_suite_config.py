"""README's `python -m pytest` answers in minutes: parallel workers, real control planes kept in one worker, and
benchmarks / studies at their quick sizes unless `MESHFIT_FULL_TESTS=1` asks for the full ones."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import (REAL_CONTROL_PLANE_GROUP, SHARED_FIXTURE_MODULES, pytest_xdist_auto_num_workers,
                            work_unit, xdist_group_for)
from tests.sizes import FULL_ENV, examples, full_tests, pick

ROOT = Path(__file__).resolve().parents[2]


def addopts() -> list[str]:
    """pyproject's pytest addopts, split as the shell would."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])


def test_readme_command_runs_in_parallel_with_groups_kept_together():
    options = addopts()
    assert "-n" in options and options[options.index("-n") + 1] == "auto", options
    assert "--dist" in options and options[options.index("--dist") + 1] == "loadgroup", options


@pytest.mark.parametrize("path", ["realk8s/test_harness.py", "realk8s/test_written_next_year.py",
                                  "soak/test_soak.py", "soak/deeper/test_other.py"])
def test_real_control_plane_tests_share_one_group_even_those_not_written_yet(path):
    assert xdist_group_for(ROOT / "tests" / path) == REAL_CONTROL_PLANE_GROUP


@pytest.mark.parametrize("path", ["tests/placement/test_examples.py", "tests/kube/test_leader.py",
                                  "tests/test_realk8s_named.py", "realk8s/test_outside_tests.py"])
def test_other_tests_spread_over_the_workers(path):
    assert xdist_group_for(ROOT / path) is None


def test_modules_with_an_expensive_shared_fixture_stay_on_one_worker():
    assert xdist_group_for(ROOT / "tests/runtime/test_local_runtime.py") == "runtime/test_local_runtime.py"
    for module in SHARED_FIXTURE_MODULES:
        assert (ROOT / "tests" / module).is_file(), module  # a renamed module must not silently lose its group


def test_work_units_are_single_tests_except_the_groups():
    assert work_unit("tests/realk8s/test_harness.py::test_x[k8s-1.35]", ROOT) == REAL_CONTROL_PLANE_GROUP
    assert work_unit("tests/soak/test_soak.py::test_soak[k8s-1.35]", ROOT) == REAL_CONTROL_PLANE_GROUP
    assert work_unit("tests/bench/test_topology_bench.py::test_build", ROOT) == "bench/test_topology_bench.py"
    one_test = "tests/placement/test_examples.py::test_a[x@y]"  # an `@` inside parameters is no group
    assert work_unit(one_test, ROOT) == one_test
    assert work_unit("tests/placement/test_examples.py::test_a@mine", ROOT) == "mine"  # an explicit xdist group


def test_a_parallel_run_keeps_every_real_control_plane_test_on_one_worker(tmp_path):
    """Two realk8s modules (they skip here: an empty binaries cache) on 3 workers: one worker runs them all."""
    env = {**os.environ, "MESHFIT_CACHE": str(tmp_path), "MESHFIT_K8S_BIN": ""}
    env.pop("CI", None)  # skipping is the point here; under CI=true a missing control plane would fail the run
    result = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "-vv", "-p", "no:cacheprovider",
                             "tests/realk8s/test_harness.py", "tests/realk8s/test_tls_real.py"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ran = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("[gw") and "tests/realk8s" in line]
    assert len(ran) >= 4 and len(set(ran)) == 1, result.stdout[-3000:]


def test_auto_workers_stay_between_two_and_six():
    assert 2 <= pytest_xdist_auto_num_workers(None) <= 6


def test_sizes_are_quick_unless_full_tests_are_asked_for(monkeypatch):
    monkeypatch.delenv(FULL_ENV, raising=False)
    assert not full_tests() and pick(3, 30) == 3 and examples(400) == 100 and examples(20) == 10
    monkeypatch.setenv(FULL_ENV, "1")
    assert full_tests() and pick(3, 30) == 30 and examples(400) == 400 and examples(60, quick=15) == 60


def collected_bench_ids(full: bool) -> set[str]:
    """Test ids `pytest --collect-only` lists for the placement benchmarks, with or without MESHFIT_FULL_TESTS=1."""
    env = {k: v for k, v in os.environ.items() if k != FULL_ENV}
    if full:
        env[FULL_ENV] = "1"
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "-n", "0",
                             "tests/bench/test_placement_bench.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {line.strip() for line in result.stdout.splitlines() if "::" in line}


def test_benchmarks_collect_only_smoke_sizes_by_default_and_full_sizes_on_request():
    quick, full = collected_bench_ids(full=False), collected_bench_ids(full=True)
    assert not any("64k-gpus" in test_id for test_id in quick), sorted(quick)
    assert any("64k-gpus" in test_id for test_id in full), sorted(full)
    assert len(quick) == len(full)  # every benchmark still runs by default, smaller
