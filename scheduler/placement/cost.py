"""Communication cost model: predicted seconds per training step for a rank layout.

Per axis, every process group's collective runs on the slowest tier it crosses:
t = a + (S / B) * f(n), with f = 2(n-1)/n for all-reduce and (n-1)/n for all-gather,
reduce-scatter and all-to-all (1 for point-to-point).  B is the per-GPU bandwidth of the tier
where the group's smallest common domain sits, divided among this job's GPUs that leave the
same child domain when the tier is oversubscribed (shared uplinks).  The axis time is that of
its slowest group (the slowest rank sets the pace); the step total sums the axes.

Volumes per step (bytes, dtype = 2 for bf16; m micro-batches, Ls = layers / pp per stage):
- tp: 4 all-reduces per layer per micro-batch of mb * (seq/cp) * hidden * dtype;
- cp: 3 all-gathers (K and V) per layer per micro-batch of 2 * mb * seq * (hidden/tp) * dtype;
- ep: 4 all-to-alls per MoE layer per micro-batch of mb * (seq/cp) * hidden * topk * dtype / tp;
- pp: 2 * (m + pp - 2) activation sends on the critical path of mb * (seq/cp) * hidden * dtype / tp;
- dp: one gradient all-reduce of dtype * params / (tp * pp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from scheduler.placement.jobs import AXES, Gang, ModelShape, Parallelism, parse_rank_order
from scheduler.placement.layout import axis_groups
from scheduler.placement.result import CostReport
from topology.model import ClusterTopology, LinkTier

ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, P2P = "all-reduce", "all-gather", "all-to-all", "p2p"
NO_TIER = "none"


@dataclass(frozen=True)
class AxisTraffic:
    """What one axis sends per training step: collective kind, bytes per call, calls per step."""

    collective: str
    bytes_per_call: float
    calls_per_step: float


def collective_factor(collective: str, n: int) -> float:
    """f(n): fraction of S each GPU sends for the collective over n GPUs."""
    if n <= 1:
        return 0.0
    if collective == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if collective == P2P:
        return 1.0
    return (n - 1) / n


def collective_seconds(collective: str, size_bytes: float, n: int, bandwidth_gbps: float, latency_us: float) -> float:
    """t = a + (S/B) f(n) for one collective call; 0 for a group of one."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return latency_us * 1e-6 + size_bytes / (bandwidth_gbps * 1e9) * collective_factor(collective, n)


def axis_traffic(gang: Gang) -> dict[str, AxisTraffic]:
    """Per-axis collective kind and volumes for one training step of `gang` (see module doc; shared, read-only)."""
    return _traffic(gang.parallelism, gang.model)


@lru_cache(maxsize=1024)
def _traffic(par: Parallelism, model: ModelShape) -> dict[str, AxisTraffic]:
    m = model.micro_batches(par.dp)
    layers_per_stage = math.ceil(model.layers / par.pp)
    tokens = model.micro_batch * model.seq / par.cp
    act = tokens * model.hidden * model.dtype_bytes
    return {
        "tp": AxisTraffic(ALL_REDUCE, act, 4 * m * layers_per_stage),
        "cp": AxisTraffic(ALL_GATHER, 2 * model.micro_batch * model.seq * model.hidden / par.tp * model.dtype_bytes,
                          3 * m * layers_per_stage),
        "ep": AxisTraffic(ALL_TO_ALL, act * model.moe_topk / par.tp, 4 * m * layers_per_stage),
        "pp": AxisTraffic(P2P, act / par.tp, 2 * max(m + par.pp - 2, 1)),
        "dp": AxisTraffic(ALL_REDUCE, model.dtype_bytes * model.params / (par.tp * par.pp), 1),
    }


class _Geometry:
    """Numpy views of the topology used to price layouts quickly (paths, domain sizes, links)."""

    def __init__(self, topo: ClusterTopology) -> None:
        self.paths = np.array([n.path for n in topo.nodes], dtype=np.int64).reshape(len(topo.nodes), len(topo.levels))
        self.paths_by_level = np.ascontiguousarray(self.paths.T)
        """`paths` transposed: (levels, nodes)."""
        self.domain_gpus = np.array([d.gpus_total for d in topo.domains], dtype=np.float64)
        self.links: list[LinkTier] = [topo.tier_link(lvl) for lvl in range(-1, len(topo.levels))]
        self.latency_s = np.array([link.latency_us * 1e-6 for link in self.links])
        self.host = len(topo.levels) - 1
        self.largest_by_level = [0] * len(topo.levels)
        for d in topo.domains:
            self.largest_by_level[d.level] = max(self.largest_by_level[d.level], d.gpus_total)
        self.shared_levels = [lvl for lvl in range(-1, self.host) if self.link(lvl).oversubscription > 1.0]
        """Tiers whose uplinks are shared (oversubscribed): only there does contention depend on the layout."""
        self.dedicated_bandwidth = self._dedicated_bandwidth()
        self.bounds: dict[tuple, float] = {}
        """(parallelism, model) -> lower bound seconds: they depend only on the job shape and the links."""

    def link(self, level: int) -> LinkTier:
        """Link of the tier at `level` (-1 = cluster)."""
        return self.links[level + 1]

    def _dedicated_bandwidth(self) -> np.ndarray:
        """Indexed by common level + 1: the slowest non-oversubscribed tier a group of that common level
        crosses (inf if none).  On such a tier a GPU never has less than the link's bandwidth: its child
        domain's uplink capacity (GPUs x bandwidth) is shared by at most that many of the job's GPUs."""
        table = np.full(self.host + 2, np.inf)
        for common in range(-1, self.host + 1):
            tiers = [self.link(lvl).bandwidth_gbps for lvl in range(common, self.host)
                     if self.link(lvl).oversubscription <= 1.0]
            table[common + 1] = min(tiers, default=np.inf)
        return table


def geometry(topo: ClusterTopology) -> _Geometry:
    """The cached pricing geometry of `topo` (rebuilt if nodes or domains changed)."""
    geo = getattr(topo, "_cost_geometry", None)
    if geo is None or geo.paths.shape[0] != len(topo.nodes) or geo.domain_gpus.shape[0] != len(topo.domains):
        geo = _Geometry(topo)
        topo._cost_geometry = geo  # type: ignore[attr-defined]
    return geo


def _group_levels(member_paths: np.ndarray) -> np.ndarray:
    """Deepest common level per group from paths shaped (groups, members, levels); -1 if none."""
    same = (member_paths == member_paths[:, :1, :]).all(axis=1)
    return np.cumprod(same, axis=1).sum(axis=1) - 1


def _group_bandwidth(geo: _Geometry, member_paths: np.ndarray, weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Per-group effective bandwidth (GB/s per GPU) including shared-uplink contention.

    `weights[g, m]` is how many of the group's ranks sit on member m's node (members are distinct pods)."""
    bandwidth = geo.dedicated_bandwidth[levels + 1]
    for lvl in geo.shared_levels:
        link = geo.link(lvl)
        crossing = levels <= lvl
        if not crossing.any():
            continue
        child = member_paths[:, :, lvl + 1]
        leaving = np.broadcast_to(crossing[:, None], child.shape)
        counts = np.bincount(child[leaving], weights=weights[leaving], minlength=geo.domain_gpus.shape[0])
        capacity = geo.domain_gpus[child] * link.bandwidth_gbps / link.oversubscription
        per_gpu = np.minimum(link.bandwidth_gbps, capacity / np.maximum(counts[child], 1.0))
        per_group = per_gpu.min(axis=1)
        bandwidth = np.where(crossing, np.minimum(bandwidth, per_group), bandwidth)
    host_link = geo.link(geo.host)
    return np.where(np.isinf(bandwidth), host_link.bandwidth_gbps, bandwidth)


@dataclass(frozen=True)
class _PodGroups:
    """One axis's process groups at pod granularity: distinct pods per group and ranks on each."""

    pods: np.ndarray
    """(groups, members) pod indices."""
    weights: np.ndarray
    """(groups, members) ranks of the group in that pod."""
    ranks: int
    """Ranks per group (the collective's n)."""


def pod_groups(groups: np.ndarray, gpus_per_pod: int) -> _PodGroups:
    """Collapse rank groups to the distinct pods they touch (ranks in one pod share its node)."""
    pods = groups // max(gpus_per_pod, 1)
    n = groups.shape[1]
    if pods.shape[0] and (pods == pods[:, :1]).all(axis=1).all():
        return _PodGroups(pods[:, :1].copy(), np.full((pods.shape[0], 1), float(n)), n)
    distinct = [np.unique(row, return_counts=True) for row in pods]
    if len({u.shape[0] for u, _ in distinct}) == 1 and distinct:
        return _PodGroups(np.stack([u for u, _ in distinct]), np.stack([c for _, c in distinct]).astype(np.float64), n)
    return _PodGroups(pods, np.ones(pods.shape, dtype=np.float64), n)


def _axis_cost(geo: _Geometry, traffic: AxisTraffic, groups: _PodGroups, pod_nodes: np.ndarray) -> tuple[float, int]:
    """(seconds per step, widest level crossed) for one axis."""
    member_paths = geo.paths[pod_nodes[groups.pods]]
    levels = _group_levels(member_paths)
    bandwidth = _group_bandwidth(geo, member_paths, groups.weights, levels)
    seconds = (geo.latency_s[levels + 1]
               + traffic.bytes_per_call / (bandwidth * 1e9) * collective_factor(traffic.collective, groups.ranks))
    return float(seconds.max()) * traffic.calls_per_step, int(levels.min())


def lower_bound_seconds(gang: Gang, topo: ClusterTopology) -> float:
    """Sum over axes of the time if every group sat alone on the best tier big enough for it (cached per
    job shape on the topology's geometry)."""
    geo = geometry(topo)
    key = (gang.parallelism, gang.model)
    if key not in geo.bounds:
        geo.bounds[key] = _lower_bound(gang, topo, axis_traffic(gang), geo.largest_by_level)
    return geo.bounds[key]


def _lower_bound(gang: Gang, topo: ClusterTopology, traffic: dict[str, AxisTraffic], largest: list[int]) -> float:
    total = 0.0
    for axis in AXES:
        n = gang.parallelism.degree(axis)
        if n <= 1:
            continue
        fits = [lvl for lvl in range(len(topo.levels)) if largest[lvl] >= n]
        deepest = max(fits, default=-1)
        t = traffic[axis]
        total += min(
            collective_seconds(t.collective, t.bytes_per_call, n, topo.tier_link(lvl).bandwidth_gbps,
                               topo.tier_link(lvl).latency_us)
            for lvl in range(-1, deepest + 1)) * t.calls_per_step
    return total


@lru_cache(maxsize=512)
def _rank_groups(par: Parallelism, order: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per axis of degree > 1, its groups of ranks as a (groups, members) array (cached per job shape)."""
    return {axis: np.asarray(axis_groups(axis, par, order), dtype=np.int64) for axis in AXES if par.degree(axis) > 1}


@lru_cache(maxsize=512)
def _pod_groups(par: Parallelism, order: tuple[str, ...], gpus_per_pod: int) -> dict[str, _PodGroups]:
    """Per axis of degree > 1, its groups at pod granularity (cached per job shape)."""
    return {axis: pod_groups(groups, gpus_per_pod) for axis, groups in _rank_groups(par, order).items()}


class LayoutPricer:
    """Prices many candidate layouts of one gang under one rank order (groups and volumes computed once)."""

    def __init__(self, gang: Gang, topo: ClusterTopology, rank_order: str | None = None) -> None:
        self.gang, self.topo = gang, topo
        self.order = parse_rank_order(rank_order or gang.rank_order)
        self.geo = geometry(topo)
        self.traffic = axis_traffic(gang)
        self.groups = _rank_groups(gang.parallelism, self.order)
        """Axis -> (groups, members) ranks (shared, read-only)."""
        self.pod_groups = _pod_groups(gang.parallelism, self.order, gang.gpus_per_pod)
        self._inside_pods: dict[str, tuple[float, int]] = {}
        """Cost of axes whose every group sits inside one pod: the same for any layout."""
        self._memo: dict[bytes, float] = {}
        self._reports: dict[bytes, tuple[float, dict[str, float], dict[str, int]]] = {}
        """Layout bytes -> `price` of that layout, for layouts priced in full (see `report`)."""

    def step_seconds(self, pod_nodes: np.ndarray) -> float:
        """`price(pod_nodes)[0]`, remembered per layout (searches often propose one layout several times)."""
        key = np.ascontiguousarray(pod_nodes, dtype=np.int64).tobytes()
        seconds = self._memo.get(key)
        if seconds is None:
            seconds = self._memo[key] = self.price(pod_nodes)[0]
        return seconds

    def price(self, pod_nodes: Sequence[int] | np.ndarray) -> tuple[float, dict[str, float], dict[str, int]]:
        """(step seconds, seconds per axis, widest level crossed per axis) for pod i on `pod_nodes[i]`."""
        nodes = np.asarray(pod_nodes, dtype=np.int64)
        by_axis = {axis: 0.0 for axis in AXES}
        widest: dict[str, int] = {}
        for axis, groups in self.pod_groups.items():
            if groups.pods.shape[1] == 1:
                if axis not in self._inside_pods:
                    self._inside_pods[axis] = _axis_cost(self.geo, self.traffic[axis], groups, nodes)
                by_axis[axis], widest[axis] = self._inside_pods[axis]
            else:
                by_axis[axis], widest[axis] = _axis_cost(self.geo, self.traffic[axis], groups, nodes)
        return sum(by_axis.values()), by_axis, widest


    def lower_bound(self) -> float:
        """`lower_bound_seconds` of the priced gang's shape (cached on the pricer)."""
        found = self.__dict__.get("_lower_bound")
        if found is None:
            found = self.__dict__["_lower_bound"] = lower_bound_seconds(self.gang, self.topo)
        return found

    def report(self, pod_nodes: Sequence[int] | np.ndarray) -> tuple[float, dict[str, float], dict[str, int]]:
        """`price(pod_nodes)`, remembered per layout (fresh dicts on every call)."""
        key = np.ascontiguousarray(pod_nodes, dtype=np.int64).tobytes()
        found = self._reports.get(key)
        if found is None:
            found = self._reports[key] = self.price(pod_nodes)
        total, by_axis, widest = found
        return total, dict(by_axis), dict(widest)


MEMO_LIMIT = 4096
"""Layouts remembered per shared pricer before its memos are cleared."""
SHAPES_LIMIT = 512
"""Job shapes with a shared pricer kept per topology before they are all dropped (a long-running service)."""


def shared_pricer(gang: Gang, topo: ClusterTopology, rank_order: str) -> LayoutPricer:
    """A `LayoutPricer` for `gang`'s shape (parallelism, model, GPUs per pod) under `rank_order`, kept on the
    topology's geometry: prices depend only on the shape, the layout and the static links, so layouts priced
    for one gang are remembered for the next gang of the same shape (and by `estimate_cost`)."""
    geo = geometry(topo)
    last = geo.__dict__.get("last_pricer")
    if last is not None and last[0] is gang and last[1] == rank_order:
        return last[2]  # the engine prices the gang a policy just placed: skip hashing its shape again
    cache = geo.__dict__.setdefault("shared_pricers", {})
    key = (gang.parallelism, gang.model, gang.gpus_per_pod, rank_order)
    pricer = cache.get(key)
    if pricer is None:
        if len(cache) >= SHAPES_LIMIT:
            cache.clear()
        pricer = cache[key] = LayoutPricer(gang, topo, rank_order)
    elif len(pricer._memo) > MEMO_LIMIT or len(pricer._reports) > MEMO_LIMIT:
        pricer._memo.clear()
        pricer._reports.clear()
    geo.__dict__["last_pricer"] = (gang, rank_order, pricer)
    return pricer


def estimate_cost(gang: Gang, pod_nodes: Sequence[int], topo: ClusterTopology, rank_order: str | None = None) -> CostReport:
    """Predicted per-step communication cost of `gang` with pod i on node `pod_nodes[i]`."""
    pricer = shared_pricer(gang, topo, rank_order or gang.rank_order)
    total, by_axis, widest = pricer.report(pod_nodes)
    tier_by_axis = {axis: topo.tier_name(widest[axis]) if axis in widest else NO_TIER for axis in AXES}
    return CostReport(total, pricer.lower_bound(), by_axis, tier_by_axis)
