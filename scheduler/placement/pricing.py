"""Fast pricing for searches: shared pricers per job shape, many layouts priced in one call, and cost floors.

`LayoutPricer.price` prices one layout with a few numpy calls per axis; a search proposes a dozen
layouts per candidate domain, so the per-call overhead dominates.  `price_layouts` prices a stack of
layouts with the same numpy calls over one more dimension; every number is computed by the same
operations in the same order as `LayoutPricer.price`, so the results are identical, not just close.
`floor_seconds` is a cheap lower bound on the step seconds of any layout inside one domain (each axis on
the best tier its groups could reach there, without contention), used to skip candidates that cannot win.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from scheduler.placement.cost import (  # noqa: F401  (shared_pricer: re-exported for searches)
    LayoutPricer, _Geometry, _PodGroups, AxisTraffic, collective_factor, shared_pricer,
)
from scheduler.placement.jobs import AXES

FLOOR_SLACK = 1e-12
"""Relative margin taken off a floor so float rounding can never put it above a layout's priced cost."""


def common_levels(geo: _Geometry, member_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(member paths, deepest common level per group) for node indices shaped (..., members): -1 when none."""
    member_paths = geo.paths[member_nodes]
    same = (member_paths == member_paths[..., :1, :]).all(axis=-2)
    return member_paths, np.cumprod(same, axis=-1).sum(axis=-1) - 1


def _common_levels_members_first(geo: _Geometry, member_nodes: np.ndarray) -> np.ndarray:
    """`common_levels(...)[1]` for node indices shaped (layouts, members, groups), members on the middle axis:
    numpy reduces over an outer axis row by row, far faster than over a short inner one.  Members sharing a
    domain share its ancestors too, so the levels where they all agree are the shallowest ones: counting them
    gives the deepest common level + 1."""
    member_paths = np.take(geo.paths_by_level, member_nodes, axis=1)  # (levels, layouts, members, groups)
    same = np.logical_and.reduce(member_paths == member_paths[:, :, :1, :], axis=2)  # the ufunc: no wrapper call
    return np.add.reduce(same, axis=0, dtype=np.int64) - 1


def _seconds_by_level(geo: _Geometry, traffic: AxisTraffic, ranks: int) -> np.ndarray:
    """Seconds of one collective of a group by its common level + 1 when no tier is shared (the bandwidth is then
    fixed per level): the same operations `cost._axis_cost` applies to each group."""
    levels = np.arange(-1, geo.host + 1)
    bandwidth = geo.dedicated_bandwidth[levels + 1]
    bandwidth = np.where(np.isinf(bandwidth), geo.link(geo.host).bandwidth_gbps, bandwidth)
    factor = collective_factor(traffic.collective, ranks)
    return geo.latency_s[levels + 1] + traffic.bytes_per_call / (bandwidth * 1e9) * factor


def _axis_seconds_many(geo: _Geometry, traffic: AxisTraffic, groups: _PodGroups,
                       layouts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layout (rows of `layouts`), the axis's slowest group's seconds per call, and every group's common level
    (layouts, groups): `cost._axis_cost` over a stack of layouts, on topologies with shared (oversubscribed) tiers."""
    member_paths, levels = common_levels(geo, layouts[:, groups.pods])  # (layouts, groups[, members, levels])
    count = layouts.shape[0]
    bandwidth = geo.dedicated_bandwidth[levels + 1]
    domains = geo.domain_gpus.shape[0]
    offsets = (np.arange(count, dtype=np.int64) * domains)[:, None, None]
    weights = np.broadcast_to(groups.weights, member_paths.shape[:3])
    for lvl in geo.shared_levels:
        link = geo.link(lvl)
        crossing = levels <= lvl
        if not crossing.any():
            continue
        child = member_paths[:, :, :, lvl + 1]
        leaving = np.broadcast_to(crossing[:, :, None], child.shape)
        keyed = child + offsets
        counts = np.bincount(keyed[leaving], weights=weights[leaving], minlength=count * domains)
        capacity = geo.domain_gpus[child] * link.bandwidth_gbps / link.oversubscription
        per_gpu = np.minimum(link.bandwidth_gbps, capacity / np.maximum(counts[keyed], 1.0))
        bandwidth = np.where(crossing, np.minimum(bandwidth, per_gpu.min(axis=2)), bandwidth)
    host_link = geo.link(geo.host)
    bandwidth = np.where(np.isinf(bandwidth), host_link.bandwidth_gbps, bandwidth)
    seconds = (geo.latency_s[levels + 1]
               + traffic.bytes_per_call / (bandwidth * 1e9) * collective_factor(traffic.collective, groups.ranks))
    return seconds.max(axis=1), levels


class _Batch:
    """What `price_layouts` needs per shared pricer: constant axes, and every multi-pod axis's groups in one array.

    The distinct groups of all multi-pod axes are stacked (members padded by repeating a group's first pod, which
    changes no common level), so one pass finds every group's common level; without shared tiers a group's seconds then
    only depend on that level (a table per axis) and each axis's worst group is one segment maximum."""

    def __init__(self, pricer: LayoutPricer) -> None:
        self.constant: dict[str, float] = {}
        self.multi: list[str] = []
        stacks, starts, tables = [], [], []
        width = max((g.pods.shape[1] for g in pricer.pod_groups.values()), default=1)
        for axis, groups in pricer.pod_groups.items():
            if groups.pods.shape[1] == 1:
                if axis not in pricer._inside_pods:
                    pricer.price(np.zeros(len(pricer.gang.pods), dtype=np.int64))
                self.constant[axis] = pricer._inside_pods[axis][0]
                continue
            self.multi.append(axis)
            starts.append(sum(stack.shape[0] for stack in stacks))
            distinct = np.unique(groups.pods, axis=0)  # the slowest and widest group of an axis: repeats add nothing
            pad = np.repeat(distinct[:, :1], width - distinct.shape[1], axis=1)
            stacks.append(np.concatenate([distinct, pad], axis=1))
            tables.append(_seconds_by_level(pricer.geo, pricer.traffic[axis], groups.ranks))
        self.calls = [pricer.traffic[axis].calls_per_step for axis in self.multi]
        self.pods = np.concatenate(stacks) if stacks else np.zeros((0, 1), dtype=np.int64)
        self.members_first = np.ascontiguousarray(self.pods.T)
        """(members, groups): members on the outer axis, so reductions over members run over whole rows."""
        self.starts = np.array(starts, dtype=np.int64)
        levels = pricer.geo.host + 2
        self.table = np.concatenate(tables) if tables else np.zeros(0)
        self.table_offset = np.repeat(np.arange(len(tables), dtype=np.int64) * levels,
                                      [stack.shape[0] for stack in stacks]) + 1
        self.axis_offset = np.arange(len(tables), dtype=np.int64) * levels + 1
        self.monotone = all(bool((np.diff(table) <= 0).all()) for table in tables)
        """Whether no axis's seconds grow with a deeper common level: its slowest group is then its widest."""

    def worst_seconds(self, pricer: LayoutPricer, layouts: np.ndarray) -> tuple[list[list[float]], list[list[int]]]:
        """Per multi-pod axis, per layout: the slowest group's seconds per call, and the widest level crossed."""
        geo = pricer.geo
        if geo.shared_levels:
            worst, widest = [], []
            for axis in self.multi:
                seconds, levels = _axis_seconds_many(geo, pricer.traffic[axis], pricer.pod_groups[axis], layouts)
                worst.append(seconds.tolist())
                widest.append(levels.min(axis=1).tolist())
            return worst, widest
        levels = _common_levels_members_first(geo, np.take(layouts, self.members_first, axis=1))
        widest = np.minimum.reduceat(levels, self.starts, axis=1)
        if self.monotone:
            worst = self.table[widest + self.axis_offset]
        else:
            worst = np.maximum.reduceat(self.table[levels + self.table_offset], self.starts, axis=1)
        return worst.T.tolist(), widest.T.tolist()


def price_layouts(pricer: LayoutPricer, layouts: np.ndarray, keys: list[bytes] | None = None) -> list[float]:
    """Step seconds of every layout (row: node per pod), equal to `pricer.price(row)[0]` for each row.

    With `keys` (each layout's bytes), every layout's full `price` is also remembered for `pricer.report`."""
    layouts = np.asarray(layouts, dtype=np.int64)
    batch = pricer.__dict__.get("_batch")
    if batch is None:
        batch = pricer.__dict__["_batch"] = _Batch(pricer)
    count = layouts.shape[0]
    by_axis: dict[str, list[float]] = {axis: [seconds] * count for axis, seconds in batch.constant.items()}
    widest: dict[str, list[int]] = {axis: [pricer._inside_pods[axis][1]] * count for axis in batch.constant}
    if batch.multi:
        worst, levels = batch.worst_seconds(pricer, layouts)
        for axis, calls, seconds, crossed in zip(batch.multi, batch.calls, worst, levels):
            by_axis[axis] = [value * calls for value in seconds]
            widest[axis] = crossed
    columns = [by_axis.get(axis) for axis in AXES]
    totals = [sum(column[row] if column is not None else 0.0 for column in columns) for row in range(count)]
    if keys is not None:
        for row, (key, total) in enumerate(zip(keys, totals)):
            pricer._reports[key] = (total, {axis: by_axis[axis][row] if axis in by_axis else 0.0 for axis in AXES},
                                    {axis: widest[axis][row] for axis in pricer.pod_groups})
    return totals


def tier_seconds(geo: _Geometry, traffic: AxisTraffic, ranks: int) -> np.ndarray:
    """Indexed by common level + 1: the least seconds per call one group of `ranks` ranks can take there
    (the tier's uncontended bandwidth: no layout gets more)."""
    table = np.empty(geo.host + 2)
    factor = collective_factor(traffic.collective, ranks)
    for common in range(-1, geo.host + 1):
        bandwidth = geo.dedicated_bandwidth[common + 1]
        for lvl in geo.shared_levels:
            if lvl >= common:
                bandwidth = min(bandwidth, geo.link(lvl).bandwidth_gbps)
        if np.isinf(bandwidth):
            bandwidth = geo.link(geo.host).bandwidth_gbps
        table[common + 1] = geo.latency_s[common + 1] + traffic.bytes_per_call / (bandwidth * 1e9) * factor
    return table


class _FloorTerms:
    """What `floor_seconds` needs of one pricer (cached on it): the exact seconds of the axes whose groups sit inside
    pods, and per multi-pod axis its distinct groups' size and count and its least seconds per call by level."""

    def __init__(self, pricer: LayoutPricer) -> None:
        self.constant = 0.0
        self.floors: dict[tuple, float] = {}
        """`floor_seconds` by (outer level, per axis the end of its tier range, the lifted axis's end)."""
        self.axes: list[tuple[int, int, list[float], float]] = []
        """(fewest distinct pods per group, disjoint groups (1 when they overlap), seconds by common level + 1,
        calls per step) per multi-pod axis."""
        label = np.arange(len(pricer.gang.pods), dtype=np.int64)
        distinct_groups = []
        for axis, groups in pricer.pod_groups.items():
            traffic = pricer.traffic[axis]
            if groups.pods.shape[1] == 1:
                if axis not in pricer._inside_pods:
                    pricer.price(np.zeros(len(pricer.gang.pods), dtype=np.int64))
                self.constant += pricer._inside_pods[axis][0]
                continue
            rows = {tuple(np.unique(row).tolist()) for row in groups.pods}
            members = min(len(row) for row in rows)
            disjoint = sum(len(row) for row in rows) == len({pod for row in rows for pod in row})
            distinct_groups.append(rows)
            self.axes.append((members, len(rows) if disjoint else 1,
                              tier_seconds(pricer.geo, traffic, groups.ranks).tolist(), traffic.calls_per_step))
        self.connected = bool(self.axes) and _connects(label, distinct_groups)
        """Whether the multi-pod axes' groups chain every pod to every other: then a layout with every axis's
        groups inside domains of one level has all its pods inside one domain of that level."""


def _connects(label: np.ndarray, axes_groups: list[set[tuple[int, ...]]]) -> bool:
    """True when the groups (pod index tuples), taken together, connect all pods labelled in `label`."""
    rows = [np.array(row, dtype=np.int64) for groups in axes_groups for row in groups]
    changed = True
    while changed:
        changed = False
        for row in rows:
            low = label[row].min()
            if (label[row] != low).any():
                label[row] = low
                changed = True
    return bool((label == label[0]).all())


def _floor_terms(pricer: LayoutPricer) -> _FloorTerms:
    """The pricer's `_FloorTerms`, built once."""
    terms = pricer.__dict__.get("_floor_terms")
    if terms is None:
        terms = pricer.__dict__["_floor_terms"] = _FloorTerms(pricer)
    return terms


def floor_seconds(pricer: LayoutPricer, outer_level: int, deepest_fitting: Callable[[int, int], int],
                  deepest_whole: int | None = None) -> float:
    """A lower bound on the step seconds of any layout whose pods all lie in one domain at `outer_level`.

    `deepest_fitting(members, groups)` is a level at or below which no layout fits `groups` disjoint groups of
    `members` pods each inside one domain; every group's common level is at least `outer_level` and an axis whose
    groups cannot all fit at a level has a group, so its slowest group, at a wider level.  `deepest_whole`, when
    given, is a level at or below which no domain holds every pod: if the axes' groups connect all pods, some axis
    then has a group no deeper than it.  Each axis costs at least its best tier in the range left to it."""
    terms = _floor_terms(pricer)
    ends = tuple(max(deepest_fitting(members, groups), outer_level) + 2 for members, groups, _, _ in terms.axes)
    whole = None
    if deepest_whole is not None and terms.connected:
        whole = max(deepest_whole, outer_level) + 2
        if any(end <= whole for end in ends):
            whole = None  # some axis already stops there: the bound adds nothing
    key = (outer_level, ends, whole)
    found = terms.floors.get(key)
    if found is None:
        found = terms.floors[key] = _floor(terms, outer_level + 1, ends, whole)
    return found


def _floor(terms: _FloorTerms, lowest: int, ends: tuple[int, ...], whole: int | None) -> float:
    """`floor_seconds` for axes on tiers [lowest, end) (table indices), one of them on [lowest, whole) if given."""
    axes = [(seconds, calls) for _, _, seconds, calls in terms.axes]
    total = terms.constant + sum(min(seconds[lowest:end]) * calls for (seconds, calls), end in zip(axes, ends))
    if whole is not None:
        total = min(terms.constant + sum(min(seconds[lowest:whole if axis == lifted else end]) * calls
                                         for axis, ((seconds, calls), end) in enumerate(zip(axes, ends)))
                    for lifted in range(len(axes)))
    return total * (1.0 - FLOOR_SLACK)
