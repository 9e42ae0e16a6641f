"""The numpy `kueue-tas`, `volcano-hypernode` and `first-fit` make exactly the decisions of their
list-based originals (`fast_reference.py`) on many random cluster states and gangs."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugins.policies import get_policy
from scheduler.placement.jobs import TopologyConstraint
from simulations.cluster import make_fast
from tests.placement.fast_reference import (
    first_fit_reference,
    kueue_tas_reference,
    volcano_reference,
)
from tests.placement.placement_builders import (
    CLUSTER_LINK,
    HOST_LINK,
    RACK_LINK,
    SPINE_LINK,
    make_cluster,
    make_gang,
)
from topology.builder import LevelSpec, NodeRecord, build_topology

REFERENCES = {"kueue-tas": kueue_tas_reference, "volcano-hypernode": volcano_reference,
              "first-fit": first_fit_reference}
LEVEL_NAMES = [None, None, None, "spine", "rack", "nvlink", "host", "volcano-tier-1", "volcano-tier-2",
               "volcano-tier-0", "no-such-level"]


def mixed_cluster(rng: random.Random):
    """Nodes of 2, 4 or 8 GPUs with names out of index order, random racks and some unlabelled nodes."""
    records = []
    for i in range(rng.randint(2, 24)):
        labels = {"test/spine": f"s{rng.randint(0, 1)}"}
        if rng.random() < 0.85:
            labels["test/rack"] = f"{labels['test/spine']}-r{rng.randint(0, 2)}"
        records.append(NodeRecord(f"n{rng.randrange(1000):03d}-{i}", rng.choice([2, 4, 8]), labels,
                                  rng.random() > 0.1))
    specs = [LevelSpec("spine", ("test/spine",), SPINE_LINK, "spine"), LevelSpec("rack", ("test/rack",), RACK_LINK, "leaf")]
    topo = build_topology(records, specs, HOST_LINK, CLUSTER_LINK)
    for node in topo.nodes:
        if node.gpus_free and rng.random() < 0.5:
            topo.add_pod(f"busy/{node.index}", node.name, rng.randint(1, node.gpus_free))
    return topo


def random_cluster(rng: random.Random, clash_names: bool = False):
    """A small spine/rack[/nvlink]/host cluster with random usage, cordoned nodes and (optionally) clashing names."""
    if rng.random() < 0.3:
        topo = mixed_cluster(rng)
        return topo if rng.random() < 0.5 else make_fast(topo)
    spines, racks, nodes = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 6)
    gpus = rng.choice([4, 8])
    count = spines * racks * nodes
    used = {i: rng.choice([0, 0, 1, 2, gpus // 2, gpus]) for i in range(count) if rng.random() < 0.6}
    down = tuple(i for i in range(count) if rng.random() < 0.1)
    topo = make_cluster(spines, racks, nodes, gpus, used, down, nvlink_nodes=rng.choice([0, 0, 2, 3]))
    if clash_names:  # equal names across parents and a name order unrelated to ids
        for domain in topo.domains:
            if rng.random() < 0.5:
                domain.name = rng.choice(["a", "b", "c", "zz"])
    return topo if rng.random() < 0.5 else make_fast(topo)


def random_gang(rng: random.Random, topo, index: int):
    """A gang of 1..(2 x nodes) pods of a random size, with random constraints and pre-assigned domains."""
    gpus = max(n.gpus_total for n in topo.nodes)
    per_pod = rng.choice([g for g in (1, 2, 3, 4, 8) if g <= gpus])
    pods = rng.randint(1, max(2 * len(topo.nodes), 1))
    gang = make_gang(dp=pods * per_pod, gpus_per_pod=per_pod, name=f"job{index}")
    assigned: tuple[str, ...] = ()
    if rng.random() < 0.2:
        assigned = tuple(rng.sample([d.name for d in topo.domains], rng.randint(1, 3)))
    required = rng.choice(LEVEL_NAMES) if rng.random() < 0.4 else None
    preferred = rng.choice(LEVEL_NAMES) if required is None else None
    return replace(gang, constraint=TopologyConstraint(required, preferred, assigned))


def outcome(policy: str, assignment, topo) -> str:
    """A coarse label of an assignment, to check that the random cases cover every branch."""
    if assignment.pod_nodes is None:
        return "topology-error" if "topology constraint" in (assignment.reason or "") else "unschedulable"
    spread = {topo.nodes[n].path[0] for n in assignment.pod_nodes}
    return "multi-top-domain" if len(spread) > 1 else "placed"


def replay(seed: int, policy: str, steps: int = 14, clash_names: bool = False) -> set[str]:
    """Compare new and reference decisions over an evolving random cluster; returns the outcomes seen."""
    rng = random.Random(seed)
    topo = random_cluster(rng, clash_names)
    fast, reference = get_policy(policy), REFERENCES[policy]
    seen: set[str] = set()
    for index in range(steps):
        gang = random_gang(rng, topo, index)
        got, expected = fast.assign(gang, topo), reference(gang, topo)
        assert got == expected, f"seed {seed} step {index}: {gang.constraint} {len(gang.pods)}x{gang.gpus_per_pod}"
        assert all(type(n) is int for n in got.pod_nodes or ())
        seen.add(outcome(policy, got, topo))
        if got.pod_nodes is not None and rng.random() < 0.7:
            for pod, node in zip(gang.pods, got.pod_nodes):
                topo.add_pod(f"{gang.key}/{pod.index}", topo.nodes[node].name, pod.gpus)
        if rng.random() < 0.3 and topo.pods:
            topo.remove_pod(rng.choice(sorted(topo.pods)))
    return seen


@pytest.mark.parametrize("policy", sorted(REFERENCES), ids=str)
@pytest.mark.parametrize("clash_names", [False, True], ids=["unique-names", "clashing-names"])
def test_seeded_random_states_give_identical_decisions(policy, clash_names):
    seen: set[str] = set()
    for seed in range(60):
        seen |= replay(seed, policy, clash_names=clash_names)
    expected = {"placed", "unschedulable", "multi-top-domain"}
    if policy != "first-fit":  # first-fit ignores topology constraints
        expected.add("topology-error")
    assert expected <= seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), policy=st.sampled_from(sorted(REFERENCES)),
       clash_names=st.booleans())
def test_any_random_state_gives_identical_decisions(seed, policy, clash_names):
    replay(seed, policy, steps=6, clash_names=clash_names)


CASES = [
    # (policy, cluster kwargs, gang kwargs, assigned domains)
    ("kueue-tas", {"racks": 3, "nodes": 4, "used": {4: 8}}, {"tp": 8, "dp": 3, "preferred": "rack"}, ()),
    ("kueue-tas", {"spines": 2, "racks": 2, "nodes": 2}, {"tp": 8, "dp": 7}, ()),
    ("kueue-tas", {"spines": 2, "racks": 2, "nodes": 2, "used": {0: 4, 5: 4}}, {"dp": 13, "gpus_per_pod": 4}, ()),
    ("kueue-tas", {"racks": 2, "nodes": 2}, {"tp": 8, "dp": 3, "required": "rack"}, ()),
    ("kueue-tas", {"racks": 2, "nodes": 4}, {"tp": 8, "dp": 2}, ("s0-r1",)),
    ("volcano-hypernode", {"racks": 2, "nodes": 4, "used": {5: 4}}, {"dp": 8, "gpus_per_pod": 4}, ()),
    ("volcano-hypernode", {"spines": 2, "racks": 2, "nodes": 2}, {"tp": 8, "dp": 6}, ()),
    ("volcano-hypernode", {"racks": 2, "nodes": 2}, {"tp": 8, "dp": 3, "required": "volcano-tier-1"}, ()),
    ("first-fit", {"racks": 2, "nodes": 3, "used": {0: 6, 2: 8}, "down": (1,)}, {"dp": 7, "gpus_per_pod": 2}, ()),
    ("first-fit", {"racks": 1, "nodes": 2}, {"tp": 8, "dp": 3}, ()),
]


@pytest.mark.parametrize(("policy", "cluster", "job", "assigned"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hand_made_cases_match_the_reference(policy, cluster, job, assigned):
    topo = make_cluster(**cluster)
    gang = make_gang(**job)
    gang = replace(gang, constraint=replace(gang.constraint, assigned_domains=assigned))
    assert get_policy(policy).assign(gang, topo) == REFERENCES[policy](gang, topo)
