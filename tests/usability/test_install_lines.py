"""Issue 26 item 9: install lines that are right anywhere.

- CI (`.ci/run`) runs exactly README's two set-up commands, and installs the `[sweep]` extra so the Dask
  sweep tests run against a real local Dask cluster instead of skipping.
- torch is only in the `[runtime]` extra: the CLI and the extender work without it, and the two commands
  that need it (`run`, `demo`) stop with one line naming the extra, exit 2.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.usability.docs_blocks import ROOT, blocks, commands

WITHOUT_TORCH = [sys.executable, "-c",
                 "import sys; sys.modules['torch'] = None\n"  # `import torch` now raises ImportError, as when absent
                 "from scheduler.cli import main; main()"]


CI_TOOL_BUILDS = "k8sbuild/"
"""Commands `.ci/run` may run besides README's: builds of the test tools (`k8sbuild/ci_tools.sh`: Kubernetes binaries
for the real-cluster tests, Kueue, helm for the chart tests), into the per-user cache."""


def _ci_commands(script: str | None = None) -> list[list[str]]:
    """The commands `.ci/run` runs after moving to the repository root, `--quiet` dropped, tool builds left out."""
    script = (ROOT / ".ci" / "run").read_text() if script is None else script
    body = script.split('cd "$(dirname "$0")/.."', 1)[1]
    return [[arg for arg in argv if arg != "--quiet"] for argv in commands(body)
            if not argv[0].startswith(CI_TOOL_BUILDS)]


def _readme_ci_commands() -> list[list[str]]:
    found = [b for b in blocks(ROOT / "README.md") if b.needs == "ci"]
    assert len(found) == 2, "README has its two set-up commands marked needs=ci"
    return [argv for block in found for argv in commands(block.text)]


def test_ci_runs_exactly_readmes_two_commands():
    assert _ci_commands() == _readme_ci_commands()


def test_ci_builds_the_test_tools_before_readmes_commands():
    """.ci/run builds the control plane, Kueue and helm (k8sbuild/ci_tools.sh) before README's two commands, and
    that changes nothing README's reader runs."""
    script = (ROOT / ".ci" / "run").read_text()
    body = script.split('cd "$(dirname "$0")/.."', 1)[1]
    assert commands(body)[0] == ["k8sbuild/ci_tools.sh"]
    tools = (ROOT / "k8sbuild" / "ci_tools.sh").read_text()
    assert all(name in tools for name in ("build.sh", "build_kueue.sh", "build_helm.sh", "go vet", "go test"))
    with_ci_true = script.replace("\npython -m pytest", "\nCI=true python -m pytest")
    assert _ci_commands(with_ci_true) == _ci_commands() == _readme_ci_commands()


def test_ci_installs_the_runtime_and_sweep_extras():
    installs = [argv for argv in _ci_commands() if argv[:2] == ["pip", "install"] and "-e" in argv]
    assert len(installs) == 1, installs
    target = installs[0][installs[0].index("-e") + 1]
    extras = set(target.partition("[")[2].rstrip("]").split(","))
    assert {"runtime", "sweep", "dev"} <= extras, target


def test_torch_is_only_in_the_runtime_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("torch")]
    extras = project["optional-dependencies"]
    assert [name for name, deps in extras.items() if any(d.lower().startswith("torch") for d in deps)] == ["runtime"]
    assert any(d.startswith("dask[distributed]") for d in extras["sweep"])


def _without_torch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*WITHOUT_TORCH, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["submit", "--help"],
                                  ["cluster", "generate", "--preset", "hgx-h100", "--nodes", "2"]])
def test_cli_and_extender_work_without_torch(args):
    result = _without_torch(*args)
    assert result.returncode == 0, result.stderr


def test_place_works_without_torch(tmp_path):
    cluster = tmp_path / "cluster.json"
    generated = _without_torch("cluster", "generate", "--preset", "hgx-h100", "--nodes", "4", "--to", str(cluster))
    assert generated.returncode == 0, generated.stderr
    placed = _without_torch("place", "--cluster", str(cluster), "--job", str(ROOT / "manifests/examples/indexed-job.yaml"))
    assert placed.returncode == 0, placed.stderr
    assert "placed by meshfit" in placed.stdout


@pytest.mark.parametrize("args", [["demo", "--steps", "1"],
                                  ["run", "--cluster", "CLUSTER", "--job", str(ROOT / "tests/fixtures/jobs/pytorchjob.yaml")]])
def test_run_and_demo_without_torch_name_the_extra_in_one_line(args, tmp_path):
    cluster = tmp_path / "cluster.json"
    assert _without_torch("cluster", "generate", "--preset", "hgx-h100", "--nodes", "4", "--to", str(cluster)).returncode == 0
    result = _without_torch(*[str(cluster) if a == "CLUSTER" else a for a in args], cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "meshfit[runtime]" in lines[0], result.stderr
    assert not list(tmp_path.glob("*.png")), "nothing is written before the check"
