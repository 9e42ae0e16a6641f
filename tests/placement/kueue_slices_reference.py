"""A plain-Python transliteration of Kueue's two-level TAS (podset slices, BestFit, no leader pods).

It follows `findTopologyAssignment` in kueue `pkg/cache/scheduler/tas_flavor_snapshot.go` step by
step (fillInCounts' sliceState, sortedDomains, findBestFitDomainBy, findLevelWithFitDomains,
updateSliceCountsToMinimum, updateCountsToMinimum, buildAssignment) over Python lists, so
`test_kueue_slices.py` can check the numpy `kueue-tas` slice path against it.  Tests only.
"""

from __future__ import annotations

from typing import Callable

from plugins.policies.meshfit_search import SlotView, slot_view
from scheduler.placement.capacity import constraint_levels, slice_level
from scheduler.placement.jobs import Gang
from topology.model import ClusterTopology, TopologyError


class _Snapshot:
    """Per-domain free pods (`state`) and whole slices (`sliceState`) for one gang."""

    def __init__(self, topo: ClusterTopology, view: SlotView, level: int, size: int) -> None:
        self.topo, self.view = topo, view
        self.slices: dict[int, int] = {}
        for root in (d.id for d in topo.domains if d.level == 0):
            self._fill(root, level, size)

    def _fill(self, domain: int, level: int, size: int) -> int:
        dom = self.topo.domains[domain]
        if dom.level == level:
            count = self.view.slots(domain) // size
        elif dom.level < level:
            count = sum(self._fill(child, level, size) for child in dom.children)
        else:
            count = 0
        self.slices[domain] = count
        return count

    def pods(self, domain: int) -> int:
        """Free pods of the gang in `domain`."""
        return self.view.slots(domain)

    def sorted(self, domains: list[int]) -> list[int]:
        """sortedDomains (BestFit): sliceState descending, state ascending, name."""
        return sorted(domains, key=lambda d: (-self.slices.get(d, 0), self.pods(d), self.topo.domains[d].name))


def _best_fit(domains: list[int], needed: int, state: Callable[[int], int]) -> int:
    best = domains[0]
    for domain in domains:
        if needed <= state(domain) < state(best):
            best = domain
    return best


def _counts_to_minimum(domains: list[int], count: int, state: Callable[[int], int]) -> list[tuple[int, int]]:
    """updateSliceCountsToMinimum / updateCountsToMinimum: (domain, units) with a BestFit last domain."""
    result: list[tuple[int, int]] = []
    remaining = count
    for i, domain in enumerate(domains):
        if state(domain) >= remaining:
            result.append((_best_fit(domains[i:], remaining, state), remaining))
            return result
        result.append((domain, state(domain)))
        remaining -= state(domain)
    raise AssertionError("not enough capacity below a chosen domain")


def _find_level(snap: _Snapshot, level: int, required: bool, count: int) -> tuple[int, list[int]] | None:
    """findLevelWithFitDomains for slices: (level, domains) or None when it does not fit."""
    topo = snap.topo
    while True:
        ordered = snap.sorted([d.id for d in topo.domains if d.level == level])
        top = ordered[0]
        if snap.slices[top] >= count:
            return level, [_best_fit(ordered, count, snap.slices.__getitem__)]
        if required:
            return None
        if level > 0:
            level -= 1
            continue
        results, remaining = [], count
        for idx in range(len(ordered)):
            if remaining <= 0 or snap.slices[ordered[idx]] <= 0:
                break
            domain = ordered[idx]
            if snap.slices[domain] >= remaining:
                domain = _best_fit(ordered[idx:], remaining, snap.slices.__getitem__)
            results.append(domain)
            remaining -= snap.slices[domain]
        return (level, results) if remaining <= 0 else None


def kueue_slices_reference(gang: Gang, topo: ClusterTopology) -> tuple[int, ...] | None:
    """Node per pod as Kueue's two-level BestFit would assign it, or None when it does not place it."""
    view = slot_view(gang, topo)
    try:
        required, preferred = constraint_levels(gang, topo)
        level_s = slice_level(gang, topo)
    except TopologyError:
        return None
    start = required if required is not None else preferred if preferred is not None else 0
    size = gang.constraint.slice_size or 1
    if level_s is None or start > level_s or view.total < len(gang.pods):
        return None
    snap = _Snapshot(topo, view, level_s, size)
    count = len(gang.pods) // size
    found = _find_level(snap, start, required is not None, count)
    if found is None:
        return None
    level, fit = found
    chosen = [(d, n * size) for d, n in _counts_to_minimum(fit, count, snap.slices.__getitem__)]
    while level < topo.host_level:
        if level < level_s:
            children = snap.sorted([c for d, _ in chosen for c in topo.domains[d].children])
            chosen = [(d, n * size) for d, n in _counts_to_minimum(children, count, snap.slices.__getitem__)]
        else:
            chosen = [pair for d, pods in chosen
                      for pair in _counts_to_minimum(snap.sorted(list(topo.domains[d].children)), pods, snap.pods)]
        level += 1
    hosts = sorted((item for item in chosen if item[1] > 0), key=lambda item: tuple(
        (topo.domains[d].name, d) for d in topo.nodes[topo.domains[item[0]].nodes[0]].path))
    return tuple(topo.domains[host].nodes[0] for host, count in hosts for _ in range(count))
