"""The topology's numpy free-GPU mirrors stay equal to the per-node / per-domain counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_cluster

operations = st.lists(st.tuples(st.sampled_from(["add", "remove", "cordon", "uncordon"]),
                                st.integers(0, 7), st.integers(1, 8)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(operations)
def test_free_arrays_follow_every_update(ops) -> None:
    topo = make_cluster(nodes=8)
    topo.free_arrays()  # create the mirrors first, so every later change must update them
    for step, (op, node, gpus) in enumerate(ops):
        name = topo.nodes[node].name
        if op == "add" and topo.nodes[node].gpus_free >= gpus:
            topo.add_pod(f"p{step}", name, gpus)
        elif op == "remove" and topo.pods:
            topo.remove_pod(sorted(topo.pods)[node % len(topo.pods)])
        elif op in ("cordon", "uncordon"):
            topo.set_schedulable(name, op == "uncordon")
        nodes, domains = topo.free_arrays()
        assert np.array_equal(nodes, [n.gpus_free for n in topo.nodes])
        assert np.array_equal(domains, [d.gpus_free for d in topo.domains])
    assert not topo.free_arrays()[0].flags.writeable
