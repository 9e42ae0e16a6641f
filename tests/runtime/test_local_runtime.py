"""World size 8 (tp=2, pp=2, dp=2) on CPU over gloo: loss, observed groups, reference match, kill and resume."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from plugins.handoffs.local import LocalRunError, local_environments, run_local  # noqa: E402
from plugins.handoffs.local_runtime.model import ModelConfig, reference_losses  # noqa: E402
from plugins.handoffs.local_runtime.worker import TrainOptions  # noqa: E402
from scheduler.placement.engine import place  # noqa: E402
from scheduler.placement.jobs import AXES, Gang, Parallelism, PodSlot  # noqa: E402
from tests.builders import make_cluster  # noqa: E402

STEPS = 12


def make_gang(parallelism: str = "tp=2,pp=2,dp=2", pods: int = 4, gpus: int = 2,
              rank_order: str = "tp-cp-ep-dp-pp") -> Gang:
    """A gang of `pods` pods x `gpus` GPUs with the given parallelism."""
    return Gang("default", "mlp", tuple(PodSlot(i, f"mlp-{i}", gpus) for i in range(pods)),
                Parallelism.parse(parallelism), rank_order)


def expected_groups(placement) -> dict[int, dict[str, list[int]]]:
    """Each rank's group per axis derived from the placement's coords: ranks differing only on that axis."""
    coords = {r.rank: r.coords for r in placement.ranks}
    return {rank: {axis: sorted(other for other, c in coords.items()
                                if all(c[a] == mine[a] for a in AXES if a != axis))
                   for axis in AXES}
            for rank, mine in coords.items()}


@pytest.fixture(scope="module")
def placement():
    """The 3D job placed by the default policy on four 8-GPU nodes."""
    return place(make_gang(), make_cluster(nodes=4), "meshfit")


@pytest.fixture(scope="module")
def uninterrupted(placement, tmp_path_factory):
    """One full run with a checkpoint at the end (the baseline for the resume test)."""
    root = tmp_path_factory.mktemp("uninterrupted")
    return run_local(placement, TrainOptions(steps=STEPS, checkpoint_dir=str(root))), root


def test_loss_goes_down(uninterrupted):
    result, _ = uninterrupted
    assert result.status == "completed"
    assert len(result.losses) == STEPS
    assert result.losses[-1] < 0.5 * result.losses[0]


def test_observed_groups_equal_the_placement_coords(uninterrupted, placement):
    result, _ = uninterrupted
    observed = {entry["rank"]: entry["groups"] for entry in result.ranks}
    assert observed == expected_groups(placement)
    assert result.coords == {r.rank: r.coords for r in placement.ranks}


def test_matches_single_process_reference(uninterrupted, placement):
    result, _ = uninterrupted
    reference, _ = reference_losses(ModelConfig.for_parallelism(placement.gang.parallelism), STEPS)
    assert result.losses == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_each_process_gets_the_launch_environment(placement):
    environments = local_environments(placement, 29999)
    assert [int(env["RANK"]) for env in environments] == list(range(8))
    for env, info in zip(environments, placement.ranks):
        assert {axis: int(env[f"MESHFIT_{axis.upper()}_RANK"]) for axis in AXES} == info.coords
        assert env["LOCAL_RANK"] == str(info.local_rank)
        assert env["NODE_RANK"] == str(info.pod_index)


def _load_shards(step_dir: Path) -> dict[str, dict]:
    return {path.name: torch.load(path, weights_only=False)["model"] for path in sorted(step_dir.glob("rank-*.pt"))}


def test_sigterm_then_resume_reaches_the_same_weights(placement, uninterrupted, tmp_path):
    baseline, baseline_root = uninterrupted
    options = TrainOptions(steps=STEPS, checkpoint_dir=str(tmp_path), checkpoint_every=4)

    def terminate_at_step_five(step: int, loss: float) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # the runner forwards it to every rank, as kubelet would

    stopped = run_local(placement, options, terminate_at_step_five)
    assert stopped.status == "interrupted"
    assert 5 <= stopped.steps < STEPS
    assert stopped.checkpoint == str(tmp_path / f"step-{stopped.steps:08d}")
    assert (tmp_path / "latest").read_text() == f"step-{stopped.steps:08d}"

    resumed = run_local(placement, TrainOptions(steps=STEPS, checkpoint_dir=str(tmp_path), resume=True))
    assert resumed.status == "completed" and resumed.start_step == stopped.steps
    assert resumed.losses == baseline.losses[stopped.steps:]
    final, expected = _load_shards(tmp_path / f"step-{STEPS:08d}"), _load_shards(baseline_root / f"step-{STEPS:08d}")
    assert final.keys() == expected.keys() and len(final) == 8
    for name in expected:
        for key, tensor in expected[name].items():
            assert torch.equal(final[name][key], tensor), f"{name} {key}"


def test_resume_with_another_layout_fails_with_one_line(tmp_path, uninterrupted):
    _, root = uninterrupted
    other = place(make_gang("tp=2,pp=1,dp=4"), make_cluster(nodes=4), "meshfit")
    with pytest.raises(LocalRunError, match="checkpoint was written with world_size|parallelism"):
        run_local(other, TrainOptions(steps=STEPS + 1, checkpoint_dir=str(root), resume=True))
