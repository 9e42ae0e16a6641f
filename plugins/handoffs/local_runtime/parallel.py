"""Process groups from the rank order (Megatron RankGenerator semantics), the GPipe schedule and DP gradient sync."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from scheduler.placement.jobs import AXES, Parallelism, parse_rank_order
from scheduler.placement.layout import axis_groups, rank_to_coords


@dataclass
class ParallelState:
    """This rank's coordinates, its group on every axis (None when the axis has degree 1) and their members."""

    rank: int
    parallelism: Parallelism
    coords: dict[str, int]
    groups: dict[str, object] = field(default_factory=dict)
    members: dict[str, list[int]] = field(default_factory=dict)

    def size(self, axis: str) -> int:
        """Degree of `axis`."""
        return self.parallelism.degree(axis)

    def observed_groups(self) -> dict[str, list[int]]:
        """Each axis's group as torch.distributed reports it (global ranks), singleton when not created."""
        observed = {}
        for axis in AXES:
            group = self.groups.get(axis)
            observed[axis] = sorted(dist.get_process_group_ranks(group)) if group is not None else [self.rank]
        return observed

    def pp_neighbour(self, offset: int) -> int | None:
        """Global rank of the previous (-1) or next (+1) pipeline stage in this rank's PP group."""
        index = self.coords["pp"] + offset
        if not 0 <= index < self.size("pp"):
            return None
        return self.members["pp"][index]


def build_parallel_state(rank: int, par: Parallelism, rank_order: str) -> ParallelState:
    """Create every group of every axis (all ranks, same order, as new_group requires) and keep this rank's."""
    order = parse_rank_order(rank_order)
    state = ParallelState(rank, par, rank_to_coords(rank, par, order))
    for axis in AXES:
        if par.degree(axis) == 1:
            state.members[axis] = [rank]
            continue
        for ranks in axis_groups(axis, par, order):
            group = dist.new_group(list(ranks))
            if rank in ranks:
                state.groups[axis] = group
                state.members[axis] = list(ranks)
    return state


def _forward_micro_batch(stage: nn.Module, state: ParallelState, inputs: torch.Tensor | None,
                         shape: tuple[int, int]) -> tuple[torch.Tensor | None, torch.Tensor]:
    previous, following = state.pp_neighbour(-1), state.pp_neighbour(+1)
    if previous is None:
        received = None
        output = stage(inputs)
    else:
        received = torch.empty(shape)
        dist.recv(received, src=previous)
        received.requires_grad_()
        output = stage(received)
    if following is not None:
        dist.send(output.detach().contiguous(), dst=following)
    return received, output


def pipeline_train_step(stage: nn.Module, state: ParallelState, micro_inputs: list[torch.Tensor],
                        micro_targets: list[torch.Tensor]) -> float:
    """One GPipe step: all micro-batch forwards, then all backwards; returns this stage's summed loss (last stage)."""
    shape = tuple(micro_inputs[0].shape)
    count = len(micro_inputs)
    previous, following = state.pp_neighbour(-1), state.pp_neighbour(+1)
    saved = []
    loss_sum = 0.0
    for index in range(count):
        received, output = _forward_micro_batch(stage, state, micro_inputs[index], shape)
        if following is None:
            output = F.mse_loss(output, micro_targets[index]) / count
            loss_sum += output.item()
        saved.append((received, output))
    for received, output in saved:
        if following is None:
            output.backward()
        else:
            grad = torch.empty(shape)
            dist.recv(grad, src=following)
            output.backward(grad)
        if previous is not None:
            dist.send(received.grad.contiguous(), dst=previous)
    return loss_sum


def all_reduce_data_parallel_grads(stage: nn.Module, state: ParallelState) -> None:
    """Average gradients over the data-parallel group (one flattened all-reduce)."""
    group = state.groups.get("dp")
    if group is None:
        return
    grads = [p.grad for p in stage.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= state.size("dp")
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def global_step_loss(stage_loss: float, state: ParallelState) -> float:
    """The step's loss over all DP replicas, known on the last pipeline stage (mean of the replicas' losses)."""
    value = torch.tensor([stage_loss], dtype=torch.float64)
    group = state.groups.get("dp")
    if group is not None:
        dist.all_reduce(value, group=group)
        value /= state.size("dp")
    return float(value.item())


def agree_to_stop(stop_requested: bool) -> bool:
    """True on every rank when any rank asked to stop (SIGTERM); a MAX all-reduce over the world."""
    flag = torch.tensor([1 if stop_requested else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
