"""Step time from the job's model and the GPU generation: compute from FLOPs, communication from the cost model.

For a job that gives its model (`ModelShape`: parameters N, layers L, hidden size h, sequence length s, global
batch B, precision), one training step processes `tokens = B * s` tokens and costs

    FLOPs = 6 * N * tokens  +  12 * L * h * s * tokens

the first term the dense matmuls (forward 2N, backward 4N per token), the second self-attention's
score and value products (PaLM, Chowdhery et al. 2022, appendix B; no causal-mask halving).  Compute per
step is

    C = FLOPs / (GPUs * peak * MFU) * (m + pp - 1) / m

the last factor the 1F1B pipeline bubble (Narayanan et al. 2021) with `m` micro-batches per pipeline per step
and `pp` stages (1 without pipelining; interleaved schedules, which shrink it, are not modelled),
`peak` the generation's dense tensor-core rate for the job's precision (BF16 for 2-byte dtypes; FP8 for
1-byte, taken as twice BF16, as every datasheet in `topology.hardware` prints; TF32 for 4-byte, half BF16) and
MFU the share of that peak the kernels reach on compute alone, **0.40 by default** (`DEFAULT_MFU`; exposed
communication is added separately, so this is not the MFU a training log reports, which includes it).

Communication per step `c` is the cost model's (`scheduler.placement.cost`) for the job's layout on the
cluster's links, and an `overlap` share of it (0.5 by default) hides behind compute:

    step = C + (1 - overlap) * c
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.placement.jobs import ModelShape, Parallelism
from topology.hardware import GpuGeneration

DEFAULT_MFU = 0.40
"""Share of the peak dense tensor-core rate reached on compute (overridable per run and per candidate)."""
DEFAULT_OVERLAP = 0.5
"""Share of step communication hidden behind compute (the simulator's `--overlap`)."""
PRECISION_SCALE = {1: 2.0, 2: 1.0, 4: 0.5}
"""Tensor-core rate relative to BF16 by bytes per value (FP8, BF16/FP16, TF32)."""


def flops_per_step(model: ModelShape) -> float:
    """Training FLOPs of one optimizer step: 6 N tokens + 12 L h s tokens (see module doc)."""
    tokens = float(model.global_batch) * model.seq
    return 6.0 * model.params * tokens + 12.0 * model.layers * model.hidden * model.seq * tokens


@dataclass(frozen=True)
class StepTimeModel:
    """Seconds per training step of a job on a GPU generation: compute from FLOPs, plus exposed communication."""

    mfu: float = DEFAULT_MFU
    overlap: float = DEFAULT_OVERLAP

    def __post_init__(self) -> None:
        if not 0.0 < self.mfu <= 1.0:
            raise ValueError("mfu must be in (0, 1]")
        if not 0.0 <= self.overlap < 1.0:
            raise ValueError("overlap must be in [0, 1)")

    def peak_flops(self, generation: GpuGeneration, dtype_bytes: int = 2) -> float:
        """Peak dense tensor-core FLOP/s of one GPU for values of `dtype_bytes` bytes."""
        return generation.dense_bf16_tflops * 1e12 * PRECISION_SCALE.get(dtype_bytes, 1.0)

    def compute_seconds(self, model: ModelShape, parallelism: Parallelism, generation: GpuGeneration) -> float:
        """C = FLOPs / (GPUs * peak * MFU), stretched by the pipeline bubble, for one step."""
        gpus = parallelism.world_size
        micro = model.micro_batches(parallelism.dp)
        bubble = (micro + parallelism.pp - 1) / micro
        return flops_per_step(model) / (gpus * self.peak_flops(generation, model.dtype_bytes) * self.mfu) * bubble

    def step_seconds(self, compute: float, comm: float) -> float:
        """C + (1 - overlap) * c."""
        return compute + (1.0 - self.overlap) * comm
