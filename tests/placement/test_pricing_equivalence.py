"""Fast paths decide exactly as the straightforward code they replaced.

The fast pricer (pod-granular groups, contention only on oversubscribed tiers) prices exactly as the
straightforward rank-granular model it replaced: every rank's node, every tier checked for contention.

Layouts are valid ones (no node holds more of the job's GPUs than it has): that is what makes a
non-oversubscribed tier contention-free, the fact the fast pricer relies on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.policies.meshfit import RELATIVE_TIE, MeshfitPolicy
from plugins.policies.meshfit_search import ROOT, _pack, candidate_domains, slot_view
from scheduler.placement.cost import LayoutPricer, collective_factor, geometry, lower_bound_seconds, shared_pricer
from scheduler.placement.jobs import AXES
from tests.placement.placement_builders import make_cluster, make_gang
from topology.generator import generate_cluster


def reference_price(pricer: LayoutPricer, pod_nodes: list[int]) -> tuple[float, dict[str, int]]:
    """Rank-level pricing with the contention loop over every tier (the model as documented in scheduler.placement.cost)."""
    geo = geometry(pricer.topo)
    node_of_rank = np.repeat(np.asarray(pod_nodes, dtype=np.int64), pricer.gang.gpus_per_pod)
    total, widest = 0.0, {}
    for axis, groups in pricer.groups.items():
        paths = geo.paths[node_of_rank[groups]]
        levels = np.cumprod((paths == paths[:, :1, :]).all(axis=1), axis=1).sum(axis=1) - 1
        bandwidth = np.full(groups.shape[0], np.inf)
        for lvl in range(-1, geo.host):
            link = geo.link(lvl)
            crossing = levels <= lvl
            if not crossing.any():
                continue
            child = paths[:, :, lvl + 1]
            leaving = np.broadcast_to(crossing[:, None], child.shape)
            counts = np.bincount(child[leaving], minlength=geo.domain_gpus.shape[0]).astype(np.float64)
            capacity = geo.domain_gpus[child] * link.bandwidth_gbps / max(link.oversubscription, 1.0)
            per_gpu = np.minimum(link.bandwidth_gbps, capacity / np.maximum(counts[child], 1.0)).min(axis=1)
            bandwidth = np.where(crossing, np.minimum(bandwidth, per_gpu), bandwidth)
        bandwidth = np.where(np.isinf(bandwidth), geo.link(geo.host).bandwidth_gbps, bandwidth)
        traffic = pricer.traffic[axis]
        seconds = (geo.latency_s[levels + 1] + traffic.bytes_per_call / (bandwidth * 1e9)
                   * collective_factor(traffic.collective, groups.shape[1]))
        total += float(seconds.max()) * traffic.calls_per_step
        widest[axis] = int(levels.min())
    return total, widest


SHAPES = [  # (tp, pp, dp, cp, ep, gpus per pod)
    (8, 2, 2, 1, 1, 8), (16, 1, 2, 1, 1, 8), (4, 2, 4, 1, 1, 8), (2, 2, 2, 1, 1, 4), (1, 1, 16, 1, 1, 2),
    (2, 4, 2, 1, 1, 1), (4, 1, 2, 2, 1, 8), (2, 1, 4, 1, 2, 4), (8, 4, 1, 1, 1, 4), (1, 2, 8, 1, 1, 8),
]


@settings(max_examples=150, deadline=None)
@given(shape=st.sampled_from(SHAPES), order=st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp"]),
       oversubscription=st.sampled_from([1.0, 2.0, 4.0]), nvlink=st.sampled_from([0, 2]),
       seed=st.integers(0, 10_000))
def test_fast_pricer_matches_rank_level_reference(shape, order, oversubscription, nvlink, seed):
    tp, pp, dp, cp, ep, per_pod = shape
    topo = make_cluster(spines=2, racks=2, nodes=4, spine_oversubscription=oversubscription, nvlink_nodes=nvlink)
    gang = make_gang(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, gpus_per_pod=per_pod, rank_order=order)
    rng = np.random.default_rng(seed)
    slots = [n.index for n in topo.nodes for _ in range(n.gpus_total // per_pod)]  # a valid layout: no node over-committed
    pod_nodes = [int(n) for n in rng.permutation(slots)[: len(gang.pods)]]
    pricer = LayoutPricer(gang, topo)
    total, by_axis, widest = pricer.price(pod_nodes)
    expected_total, expected_widest = reference_price(pricer, pod_nodes)
    assert total == np.float64(expected_total) or abs(total - expected_total) <= 1e-12 * expected_total
    assert widest == expected_widest
    assert set(by_axis) == set(AXES)


def reference_pack(caps: list[int], leftovers: list[int], need: int) -> list[tuple[int, int]]:
    """The quadratic fewest-children cover `_pack` replaced (rescans every child per pick)."""
    available, chosen, remaining = set(range(len(caps))), [], need
    while remaining > 0:
        fits = [j for j in available if caps[j] >= remaining]
        if fits:
            return chosen + [(min(fits, key=lambda j: (caps[j], leftovers[j], j)), remaining)]
        largest = max(available, key=lambda j: (caps[j], -leftovers[j], -j), default=None)
        if largest is None or caps[largest] <= 0:
            raise ValueError("domain cannot hold the requested pods")
        chosen.append((largest, caps[largest]))
        available.discard(largest)
        remaining -= caps[largest]
    return chosen


@settings(max_examples=400, deadline=None)
@given(children=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), max_size=10), need=st.integers(0, 30))
def test_pack_matches_the_quadratic_reference(children, need):
    caps, leftovers = [c for c, _ in children], [lo for _, lo in children]
    try:
        expected = reference_pack(caps, leftovers, need)
    except ValueError:
        with pytest.raises(ValueError):
            _pack(caps, leftovers, need)
        return
    assert _pack(caps, leftovers, need) == expected


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from(["hgx-h100", "gb200-nvl72", "aws-p5"]), used=st.floats(0.0, 0.9),
       gpus=st.sampled_from([1, 2, 4, 8]), order=st.sampled_from(["auto", "tp-cp-ep-pp-dp"]), seed=st.integers(0, 500),
       constraint=st.sampled_from([(None, None), ("spine", None), (None, "leaf"), ("no-such-level", None)]))
def test_single_pod_shortcut_decides_as_the_general_search(preset, used, gpus, order, seed, constraint):
    topo = generate_cluster(preset, 48, seed=seed, used_fraction=used)
    gang = make_gang(tp=gpus, gpus_per_pod=gpus, rank_order=order, required=constraint[0], preferred=constraint[1])
    fast = MeshfitPolicy().assign(gang, topo)
    general = MeshfitPolicy(single_pod_shortcut=False).assign(gang, topo)
    assert (fast.pod_nodes, fast.rank_order, fast.reason) == (general.pod_nodes, general.rank_order, general.reason)


def test_single_pod_shortcut_answers_on_standard_presets():
    """The comparison above means something only if the shortcut is taken (not deferred to the search)."""
    topo = generate_cluster("hgx-h100", 16, seed=1, used_fraction=0.5)
    gang = make_gang(tp=4, gpus_per_pod=4)
    policy = MeshfitPolicy()
    floor = lower_bound_seconds(gang, topo) * (1 + RELATIVE_TIE)
    answer = policy._single_pod(gang, topo, shared_pricer(gang, topo, "tp-cp-ep-dp-pp"), "tp-cp-ep-dp-pp", floor)
    assert answer is not None and answer.pod_nodes is not None
    assert topo.nodes[answer.pod_nodes[0]].gpus_free >= 4


def reference_candidates(view, pods: int, min_level: int, per_level: int) -> list[int]:
    """Candidate domains by a full stable sort per level (what partial selection replaced)."""
    found: list[int] = []
    for level in range(view.tree.levels - 1, min_level - 1, -1):
        if level == ROOT:
            found += [ROOT] if view.total >= pods else []
            continue
        ids = np.flatnonzero((view.tree.domain_level == level) & (view.domain_slots >= pods))
        if ids.size:
            by_fit = ids[np.argsort(view.domain_slots[ids], kind="stable")]
            found.extend(dict.fromkeys(int(d) for d in list(by_fit[: per_level - 1]) + [by_fit[-1]]))
    return found


@settings(max_examples=80, deadline=None)
@given(preset=st.sampled_from(["hgx-h100", "gb200-nvl72", "aws-p5"]), used=st.floats(0.0, 0.95),
       pods=st.integers(1, 12), per_level=st.integers(1, 5), seed=st.integers(0, 500))
def test_candidate_domains_match_a_full_sort(preset, used, pods, per_level, seed):
    topo = generate_cluster(preset, 40, seed=seed, used_fraction=used)
    view = slot_view(make_gang(tp=2, dp=pods, gpus_per_pod=2), topo)
    assert candidate_domains(view, pods, ROOT, per_level) == reference_candidates(view, pods, ROOT, per_level)
