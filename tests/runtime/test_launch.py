"""`meshfit launch` against a realistic downward-API annotations file: environment, fail-fast errors, gang wait."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.handoff.fabric import FabricConfigError, load_fabric_config, transport_env
from scheduler.handoff.assignment import AssignmentError, annotations_for_pod
from scheduler.handoff.launch import launch_environment, parse_downward_annotations, wait_for_gang
from scheduler.placement.layout import rank_to_coords
from scheduler.handoff.rank_table import rank_table_document
from tests.runtime.test_handoff import make_placement

FIXTURE = Path(__file__).parent / "fixtures" / "podinfo-annotations"
runner = CliRunner()


def go_quote(text: str) -> str:
    """Quote like Go's %q for the characters the fixtures use."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def write_downward(path: Path, annotations: dict[str, str]) -> Path:
    """Write annotations the way kubelet does: sorted `key="value"` lines, no trailing newline."""
    path.write_text("\n".join(f"{key}={go_quote(annotations[key])}" for key in sorted(annotations)))
    return path


def test_fixture_parses_go_quoted_values():
    annotations = parse_downward_annotations(FIXTURE.read_text())
    assert annotations["example.com/note"] == "tab\there, unicode \u00fc, bell \x07"
    assert json.loads(annotations["kubectl.kubernetes.io/last-applied-configuration"])["kind"] == "PyTorchJob"
    assert annotations["meshfit.io/ranks"] == "8,9,10,11,12,13,14,15"


@pytest.mark.parametrize("local_rank", [None, 0, 5], ids=["torchrun-style", "first-rank", "sixth-rank"])
def test_environment_from_fixture(local_rank):
    assignment, env = launch_environment(FIXTURE.read_text(), local_rank)
    rank = assignment.ranks[local_rank or 0]
    coords = rank_to_coords(rank, assignment.parallelism, assignment.order)
    assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(local_rank or 0)
    assert env["WORLD_SIZE"] == "32" and env["LOCAL_WORLD_SIZE"] == "8"
    assert env["NODE_RANK"] == env["PET_NODE_RANK"] == "1" and env["PET_NNODES"] == "4"
    assert env["MASTER_ADDR"] == "llama-70b-master-0.llama-70b.research.svc" and env["MASTER_PORT"] == "29500"
    assert env["MESHFIT_RANK_ORDER"] == "tp-cp-ep-dp-pp"
    for axis, value in coords.items():
        assert env[f"MESHFIT_{axis.upper()}_RANK"] == str(value)
        assert env[f"MESHFIT_{axis.upper()}_SIZE"] == str(assignment.parallelism.degree(axis))


def test_cli_execs_the_command_with_the_environment(tmp_path):
    out = tmp_path / "env.json"
    command = ["python", "-c", f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"]
    result = subprocess.run([sys.executable, "-c", "from scheduler.cli import main; main()", "launch", "--annotations-file", str(FIXTURE),
                             "--local-rank", "2", "--", *command], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(out.read_text())
    assert seen["RANK"] == "10" and seen["MESHFIT_TP_RANK"] == "2" and seen["MESHFIT_DP_RANK"] == "1"


def _broken(tmp_path: Path, change: dict) -> Path:
    annotations = parse_downward_annotations(FIXTURE.read_text())
    annotations.update(change)
    return write_downward(tmp_path / "annotations", {k: v for k, v in annotations.items() if v is not None})


FAILURES = [
    ("missing-file", None, "cannot read"),
    ("not-downward-format", "just text", "expected key=\"value\""),
    ("no-assignment", {"meshfit.io/ranks": None}, "missing annotation meshfit.io/ranks"),
    ("inconsistent-ranks", {"meshfit.io/ranks": "0,1,2,3,4,5,6,7"}, "must hold ranks 8..15"),
    ("local-rank-out-of-range", {}, "local rank 9 out of range"),
]


@pytest.mark.parametrize("change,message", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_missing_or_inconsistent_assignment_exits_2_fast(tmp_path, change, message):
    if change is None:
        path = tmp_path / "absent"
    elif isinstance(change, str):
        path = tmp_path / "annotations"
        path.write_text(change)
    else:
        path = _broken(tmp_path, change)
    started = time.monotonic()
    result = runner.invoke(app, ["launch", "--annotations-file", str(path), "--local-rank", "9",
                                 "--wait-timeout", "600", "--", "true"])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert time.monotonic() - started < 10  # fails before any rendezvous wait


def test_waits_for_the_rank_table_then_times_out_with_progress(tmp_path):
    placement = make_placement()
    annotations = annotations_for_pod(placement, 1, "job-0")
    assignment, _ = launch_environment("\n".join(f"{k}={go_quote(v)}" for k, v in annotations.items()))
    table = tmp_path / "ranks.json"
    table.write_text(json.dumps(rank_table_document(placement, "job-0", bound_pods={0, 1})))
    naps = []
    with pytest.raises(AssignmentError, match=r"not complete after 0.5s \(2 of 4 pods bound\)"):
        wait_for_gang(assignment, table, timeout=0.5, poll=0.4, sleep=naps.append)
    assert naps  # it polled instead of failing at once
    table.write_text(json.dumps(rank_table_document(placement, "job-0")))
    wait_for_gang(assignment, table, timeout=0, sleep=naps.append)
    table.write_text(json.dumps(rank_table_document(placement, "other-master")))
    with pytest.raises(AssignmentError, match="disagree on master address"):
        wait_for_gang(assignment, table, timeout=60, sleep=naps.append)


def test_fabric_config_chooses_nccl_settings(tmp_path):
    config_path = tmp_path / "fabrics.yaml"
    config_path.write_text(
        "fabrics:\n"
        "  - name: ib\n    match: {feature.node.kubernetes.io/rdma.available: 'true'}\n"
        "    env: {NCCL_IB_HCA: mlx5, NCCL_IB_DISABLE: '0', NCCL_SOCKET_IFNAME: eth0}\n"
        "  - name: tcp\n    match: {}\n    env: {NCCL_IB_DISABLE: '1'}\n")
    config = load_fabric_config(config_path)
    assert transport_env({"feature.node.kubernetes.io/rdma.available": "true"}, config)["NCCL_IB_HCA"] == "mlx5"
    assert transport_env({}, config) == {"NCCL_IB_DISABLE": "1", "MESHFIT_FABRIC": "tcp"}
    assert transport_env({"topology.k8s.aws/network-node-layer-1": "nn-1"})["FI_PROVIDER"] == "efa"
    config_path.write_text("fabrics:\n  - name: x\n    env: {'bad name': '1'}\n")
    with pytest.raises(FabricConfigError, match="not an environment variable name"):
        load_fabric_config(config_path)
