"""Rank layout: rank <-> coordinates for a rank order, and the process groups of each axis.

A rank order lists axes innermost first (`tp-cp-ep-dp-pp` is Megatron's default): for that
order rank = tp_rank + tp*(cp_rank + cp*(ep_rank + ep*(dp_rank + dp*pp_rank))), exactly as
Megatron-LM's RankGenerator builds its groups.  torchtitan's DeviceMesh `[pp, dp, cp, tp]`
(last dimension innermost) is the order `tp-cp-dp-pp`.
"""

from __future__ import annotations

from functools import lru_cache

from scheduler.placement.jobs import AXES, Parallelism, parse_rank_order

SUPPORTED_RANK_ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
"""Orders frameworks support and `rank-order: auto` chooses among (Megatron default and
`--use-tp-pp-dp-mapping`)."""


def rank_to_coords(rank: int, par: Parallelism, order: tuple[str, ...]) -> dict[str, int]:
    """Coordinates of `rank` along every axis (mixed-radix decode, innermost axis first)."""
    coords: dict[str, int] = {}
    rest = rank
    for axis in order:
        size = par.degree(axis)
        coords[axis] = rest % size
        rest //= size
    return {axis: coords[axis] for axis in AXES}


@lru_cache(maxsize=256)
def rank_coords_table(par: Parallelism, order: tuple[str, ...]) -> tuple[dict[str, int], ...]:
    """`rank_to_coords` of every rank of `par` under `order`, computed once per (parallelism, order).

    The dicts are shared between callers: treat them as read-only (copy before changing one)."""
    return tuple(rank_to_coords(rank, par, order) for rank in range(par.world_size))


def coords_to_rank(coords: dict[str, int], par: Parallelism, order: tuple[str, ...]) -> int:
    """Inverse of `rank_to_coords`."""
    rank = 0
    for axis in reversed(order):
        rank = rank * par.degree(axis) + coords[axis]
    return rank


def axis_stride(axis: str, par: Parallelism, order: tuple[str, ...]) -> int:
    """Distance in rank between neighbours along `axis`."""
    stride = 1
    for name in order:
        if name == axis:
            return stride
        stride *= par.degree(name)
    raise ValueError(f"axis {axis!r} not in rank order {order}")


@lru_cache(maxsize=256)
def _groups_cached(axis: str, par: Parallelism, order: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    size = par.degree(axis)
    stride = axis_stride(axis, par, order)
    world = par.world_size
    groups = []
    for rank in range(world):
        if (rank // stride) % size == 0:
            groups.append(tuple(rank + i * stride for i in range(size)))
    return tuple(groups)


def axis_groups(axis: str, par: Parallelism, order: tuple[str, ...] | str) -> tuple[tuple[int, ...], ...]:
    """Every process group of `axis`: ranks that differ only in that axis's coordinate, sorted."""
    if isinstance(order, str):
        order = parse_rank_order(order)
    return _groups_cached(axis, par, order)


def group_of(rank: int, axis: str, par: Parallelism, order: tuple[str, ...]) -> list[int]:
    """The `axis` group containing `rank`."""
    stride = axis_stride(axis, par, order)
    size = par.degree(axis)
    base = rank - ((rank // stride) % size) * stride
    return [base + i * stride for i in range(size)]
