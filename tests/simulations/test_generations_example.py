"""The shipped generation example: GB200 NVL72 vs HGX H100 4:1 ranked by time and cost to train, traceably."""

from __future__ import annotations

import pytest

from scheduler.placement.steptime import flops_per_step
from simulations.generations import main
from topology.hardware import GENERATIONS


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("generations")
    return main(["--out-dir", str(out)]), out


def test_both_candidates_ranked_with_time_and_cost_to_train(example):
    document, out = example
    rows = {row["candidate"]: row for row in document["candidates"]}
    assert set(rows) == {"gb200-nvl72", "h100-spine-4to1"}
    assert document["ranked_by"] == "cost_to_train"
    for row in rows.values():
        assert row["completed"] == row["jobs"] == 8
        assert row["cost_to_train"] == pytest.approx(row["price_per_gpu_hour"] * row["gpus"] * row["time_to_train_hours"],
                                                     rel=1e-3)
    assert rows["gb200-nvl72"]["time_to_train_hours"] < rows["h100-spine-4to1"]["time_to_train_hours"]
    assert (out / "generations.png").stat().st_size > 0 and (out / "plan.json").exists()


def test_example_numbers_trace_to_the_hardware_table(example):
    _, out = example
    text = (out / "generations.md").read_text()
    # the 70B job on H100: FLOPs / (GPUs x peak x MFU) x bubble (m = 256 / 8 = 32 micro-batches, pp = 4)
    flops = 6 * 70e9 * 256 * 8192 + 12 * 80 * 8192 * 8192 * 256 * 8192
    compute = flops / (256 * GENERATIONS["h100-sxm"].dense_bf16_tflops * 1e12 * 0.4) * 35 / 32
    assert f"| h100-spine-4to1 | llama70b-pretrain | 256 | 3000 | {flops:.3e} | 989.5 | 0.4 | {compute:.3f} |" in text
    from scheduler.placement.jobs import ModelShape

    assert flops_per_step(ModelShape(params=70e9, layers=80, hidden=8192, seq=8192, global_batch=256)) == flops
