"""The optimised `meshfit` search decides exactly as the search it replaced (issue 21), on random instances.

`meshfit_reference` is the policy as it was before the speed work: per-placement slot arrays, every candidate
domain filled and priced one layout at a time.  Here both place the same random gangs (every shape of the
decision guard, constraints, `rank-order: auto`, assigned domains) one after another on fragmented preset
clusters with and without oversubscription, applying each placement so the next sees a changed cluster; every
answer (nodes per pod, rank order, reason) must be identical, with and without the floors that skip domains.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.policies.meshfit import MeshfitPolicy
from scheduler.placement import engine
from tests.bench.placement_preset_study import fabric_config, fragment
from tests.placement.decision_guard import random_gang
from tests.placement.meshfit_reference import MeshfitPolicy as ReferencePolicy
from tests.sizes import examples
from topology.generator import generate_nodelist
from topology.loaders import topology_from_objects

NODES = {"hgx-h100": 160, "gb200-nvl72": 216, "gke-a3": 96, "aws-p5": 128}


def answer(assignment) -> tuple:
    """What a policy decided, as comparable values."""
    return assignment.pod_nodes, assignment.rank_order, assignment.reason


@settings(max_examples=examples(60, quick=15), deadline=None)
@given(preset=st.sampled_from(sorted(NODES)), oversubscription=st.sampled_from([1.0, 2.0, 4.0]),
       occupancy=st.sampled_from([0.2, 0.5, 0.7]), seed=st.integers(0, 10_000))
def test_optimised_search_decides_as_the_reference(preset, oversubscription, occupancy, seed):
    topo = topology_from_objects(generate_nodelist(preset, NODES[preset], seed=seed)["items"],
                                 fabric_config(preset, oversubscription))
    fragment(topo, occupancy, seed)
    rng = random.Random(seed)
    fast, unpruned, reference = MeshfitPolicy(), MeshfitPolicy(prune=False), ReferencePolicy()
    for index in range(16):
        gang = random_gang(rng, index, topo)
        expected = answer(reference.assign(gang, topo))
        assert answer(fast.assign(gang, topo)) == expected, gang
        assert answer(unpruned.assign(gang, topo)) == expected, gang
        placement = engine.place(gang, topo, fast, with_ranks=False)
        if placement.placed:
            engine.apply(placement, topo)
        if rng.random() < 0.3 and topo.pods:
            topo.remove_pod(sorted(topo.pods)[rng.randrange(len(topo.pods))])
