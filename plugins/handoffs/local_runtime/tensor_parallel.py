"""Megatron's two tensor-parallel communication operators as autograd functions.

`copy_to_tp` is the identity forward and an all-reduce of the gradient backward (before a
column-parallel linear); `reduce_from_tp` all-reduces forward and passes the gradient through
backward (after a row-parallel linear).  With no group (tp = 1) both are the identity.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, group):
        reduced = tensor.contiguous().clone()
        dist.all_reduce(reduced, group=group)
        return reduced

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(tensor: torch.Tensor, group) -> torch.Tensor:
    """Identity forward; all-reduce the gradient over the TP group backward."""
    return tensor if group is None else _CopyToTensorParallel.apply(tensor, group)


def reduce_from_tp(tensor: torch.Tensor, group) -> torch.Tensor:
    """All-reduce (sum) over the TP group forward; identity backward."""
    return tensor if group is None else _ReduceFromTensorParallel.apply(tensor, group)
