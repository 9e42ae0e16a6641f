"""Rank layout matches Megatron's RankGenerator formula and groups partition the world."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement.jobs import AXES, Parallelism, parse_rank_order
from scheduler.placement.layout import SUPPORTED_RANK_ORDERS, axis_groups, coords_to_rank, group_of, rank_to_coords

degrees = st.sampled_from([1, 2, 3, 4])
parallelisms = st.builds(Parallelism, degrees, degrees, degrees, degrees, degrees)


def megatron_rank(c: dict[str, int], p: Parallelism, order: str) -> int:
    """Independent formula: tp-cp-ep-dp-pp -> tp + tp*(cp + cp*(ep + ep*(dp + dp*pp)))."""
    if order == "tp-cp-ep-dp-pp":
        return c["tp"] + p.tp * (c["cp"] + p.cp * (c["ep"] + p.ep * (c["dp"] + p.dp * c["pp"])))
    return c["tp"] + p.tp * (c["cp"] + p.cp * (c["ep"] + p.ep * (c["pp"] + p.pp * c["dp"])))


@settings(max_examples=60, deadline=None)
@given(parallelisms, st.sampled_from(SUPPORTED_RANK_ORDERS))
def test_coords_follow_megatron_formula(par: Parallelism, order_text: str) -> None:
    order = parse_rank_order(order_text)
    seen = set()
    for rank in range(par.world_size):
        coords = rank_to_coords(rank, par, order)
        assert all(0 <= coords[a] < par.degree(a) for a in AXES)
        assert megatron_rank(coords, par, order_text) == rank
        assert coords_to_rank(coords, par, order) == rank
        seen.add(tuple(coords[a] for a in AXES))
    assert len(seen) == par.world_size


@settings(max_examples=60, deadline=None)
@given(parallelisms, st.sampled_from(SUPPORTED_RANK_ORDERS), st.sampled_from(AXES))
def test_axis_groups_partition_world_and_vary_one_axis(par: Parallelism, order_text: str, axis: str) -> None:
    order = parse_rank_order(order_text)
    groups = axis_groups(axis, par, order)
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(par.world_size))
    for group in groups:
        assert len(group) == par.degree(axis)
        coords = [rank_to_coords(r, par, order) for r in group]
        for other in AXES:
            values = {c[other] for c in coords}
            assert len(values) == (par.degree(axis) if other == axis else 1)
        assert group_of(group[-1], axis, par, order) == list(group)


def test_known_megatron_groups() -> None:
    par = Parallelism(tp=2, pp=2, dp=2)
    assert axis_groups("tp", par, "tp-cp-ep-dp-pp") == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert axis_groups("dp", par, "tp-cp-ep-dp-pp") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert axis_groups("pp", par, "tp-cp-ep-dp-pp") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert axis_groups("pp", par, "tp-cp-ep-pp-dp") == ((0, 2), (1, 3), (4, 6), (5, 7))
