"""The example model: pre-norm residual MLP blocks (transformer-style), deterministic from a seed.

Weights and data depend only on the seed and the step, never on the parallel layout, so a
sharded run and the single-process reference (`reference_losses`) train the very same model.
Each block is h + W2 gelu(W1 LN(h) + b1) + b2 with W1 column-parallel and W2 row-parallel
over the tensor-parallel group (Megatron's MLP split).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plugins.handoffs.local_runtime.tensor_parallel import copy_to_tp, reduce_from_tp
from plugins.handoffs.local_runtime import RuntimeUnavailable
from scheduler.placement.jobs import Parallelism


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and optimiser settings of the example model for one parallel layout."""

    hidden: int = 32
    ffn: int = 64
    layers: int = 4
    micro_batch: int = 4
    micro_batches: int = 2
    dp: int = 1
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0

    @property
    def global_batch(self) -> int:
        """Samples per step over all data-parallel replicas."""
        return self.micro_batch * self.micro_batches * self.dp

    @classmethod
    def for_parallelism(cls, par: Parallelism, seed: int = 0) -> "ModelConfig":
        """Smallest config whose layers split over pp stages and whose ffn splits over tp ranks."""
        if par.cp > 1 or par.ep > 1:
            raise RuntimeUnavailable(f"the local example model trains tp, pp and dp only; got {par}")
        layers = max(4, par.pp) + (-max(4, par.pp)) % par.pp
        ffn = max(64, 8 * par.tp) + (-max(64, 8 * par.tp)) % par.tp
        return cls(ffn=ffn, layers=layers, dp=par.dp, seed=seed)

    def as_dict(self) -> dict:
        """Plain dict (stored in checkpoints to refuse resuming a different model)."""
        return asdict(self)


def full_layer_weights(config: ModelConfig, layer: int) -> dict[str, torch.Tensor]:
    """Unsharded weights of `layer`, drawn from a generator seeded by (seed, layer)."""
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + layer)
    scale1, scale2 = config.hidden ** -0.5, config.ffn ** -0.5
    return {
        "ln_weight": 1.0 + 0.1 * torch.randn(config.hidden, generator=gen),
        "ln_bias": 0.1 * torch.randn(config.hidden, generator=gen),
        "w1": scale1 * torch.randn(config.ffn, config.hidden, generator=gen),
        "b1": 0.1 * torch.randn(config.ffn, generator=gen),
        "w2": scale2 * torch.randn(config.hidden, config.ffn, generator=gen),
        "b2": 0.1 * torch.randn(config.hidden, generator=gen),
    }


def batch_for_step(config: ModelConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch (inputs, targets) of `step`: targets come from a fixed random teacher."""
    teacher = torch.Generator().manual_seed(config.seed * 7_919 + 17)
    weights = torch.randn(config.hidden, config.hidden, generator=teacher) * config.hidden ** -0.5
    gen = torch.Generator().manual_seed(config.seed * 1_000_033 + 100_000 + step)
    inputs = torch.randn(config.global_batch, config.hidden, generator=gen)
    return inputs, torch.tanh(inputs @ weights)


class MLPBlock(nn.Module):
    """One residual MLP block holding this tensor-parallel rank's shard of W1 (rows) and W2 (columns)."""

    def __init__(self, full: dict[str, torch.Tensor], tp_rank: int = 0, tp_size: int = 1, tp_group=None):
        super().__init__()
        shard = full["w1"].shape[0] // tp_size
        rows = slice(tp_rank * shard, (tp_rank + 1) * shard)
        self.norm = nn.LayerNorm(full["w1"].shape[1])
        with torch.no_grad():
            self.norm.weight.copy_(full["ln_weight"])
            self.norm.bias.copy_(full["ln_bias"])
        self.w1 = nn.Parameter(full["w1"][rows].clone())
        self.b1 = nn.Parameter(full["b1"][rows].clone())
        self.w2 = nn.Parameter(full["w2"][:, rows].clone())
        self.b2 = nn.Parameter(full["b2"].clone())
        self.tp_group = tp_group

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """h + row_parallel(gelu(column_parallel(LN(h)))) with the TP all-reduce after W2."""
        normed = copy_to_tp(self.norm(hidden), self.tp_group)
        partial = F.linear(F.gelu(F.linear(normed, self.w1, self.b1)), self.w2)
        return hidden + reduce_from_tp(partial, self.tp_group) + self.b2


def stage_layers(config: ModelConfig, pp_rank: int, pp_size: int) -> range:
    """Layer indices held by pipeline stage `pp_rank` (contiguous, equal split)."""
    per_stage = config.layers // pp_size
    return range(pp_rank * per_stage, (pp_rank + 1) * per_stage)


def build_stage(config: ModelConfig, pp_rank: int, pp_size: int, tp_rank: int, tp_size: int,
                tp_group=None) -> nn.Sequential:
    """This rank's pipeline stage: its layers, each holding its tensor-parallel shard."""
    return nn.Sequential(*(MLPBlock(full_layer_weights(config, layer), tp_rank, tp_size, tp_group)
                           for layer in stage_layers(config, pp_rank, pp_size)))


def make_optimizer(module: nn.Module, config: ModelConfig) -> torch.optim.Optimizer:
    """SGD with momentum (its state is checkpointed with the model)."""
    return torch.optim.SGD(module.parameters(), lr=config.lr, momentum=config.momentum)


def reference_losses(config: ModelConfig, steps: int) -> tuple[list[float], nn.Module]:
    """Train the unsharded model in one process for `steps` steps; the losses and the final model."""
    model = build_stage(config, 0, 1, 0, 1)
    optimizer = make_optimizer(model, config)
    losses = []
    for step in range(steps):
        inputs, targets = batch_for_step(config, step)
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model
