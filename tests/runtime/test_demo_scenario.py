"""The demo's scenario without training (no torch needed): the cluster is chosen on the cluster alone (the job must
span hosts), and on every cluster that rule picks for start seeds 0-59 meshfit's predicted step communication is
at most either baseline's -- strictly below both on the default one, tied with volcano-hypernode on one (seed 34,
as README says)."""

from __future__ import annotations

from scheduler.cli.demo_cmd import demo_gang, place_with_each_policy, spanning_cluster


def _clusters(last_start: int) -> dict[int, dict[str, float]]:
    """Predicted step communication per policy on each cluster the demo picks for start seeds 0..last_start."""
    found, start = {}, 0
    while start <= last_start:
        seed, topo = spanning_cluster(start, demo_gang().world_size)
        if seed > last_start:
            break
        placements, notes = place_with_each_policy(demo_gang(), topo)
        assert not notes and all(p.placed for p in placements.values())
        found[seed] = {name: p.cost.step_comm_seconds for name, p in placements.items()}
        start = seed + 1
    return found


def test_the_default_cluster_must_be_spanned_and_meshfit_is_ahead_of_both():
    seed, topo = spanning_cluster(0, 8)
    assert max(node.gpus_free for node in topo.nodes) < 8 <= topo.gpus_free
    comm = _clusters(seed)[seed]
    assert comm["meshfit"] < comm["kueue-tas"] and comm["meshfit"] < comm["volcano-hypernode"], comm


def test_meshfit_is_never_behind_on_the_clusters_the_demo_picks():
    clusters = _clusters(59)
    assert len(clusters) >= 5
    for seed, comm in clusters.items():
        assert comm["meshfit"] <= min(comm["kueue-tas"], comm["volcano-hypernode"]) * (1 + 1e-9), (seed, comm)
    ahead_of_both = [s for s, c in clusters.items() if c["meshfit"] < min(c["kueue-tas"], c["volcano-hypernode"])]
    assert len(ahead_of_both) == len(clusters) - 1 and 34 not in ahead_of_both, clusters
