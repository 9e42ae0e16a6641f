"""`scheduler.gangs.spares`: the spare choice and the replacement order shared by the service and the simulator."""

from __future__ import annotations

import pytest

from scheduler.gangs.spares import leaf_of, parse_gang_spares, pick_spares, replacement_order, target_of
from tests.service.helpers import make_nodes
from topology.loaders import topology_from_objects


def topo(racks: int = 2, per_rack: int = 4):
    """`racks` leaves of `per_rack` 8-GPU nodes, two leaves per spine block."""
    return topology_from_objects([{**n, "kind": "Node", "apiVersion": "v1"} for n in make_nodes(racks, per_rack)],
                                 None, ())


def test_pick_spares_takes_the_highest_index_nodes_of_each_leaf():
    t = topo(2, 4)
    spares, target = pick_spares(t, 0.25)
    assert sorted(t.nodes[i].name for i in spares) == ["n-0-3", "n-1-3"]
    assert sorted(target.values()) == [1, 1]
    spares, _ = pick_spares(t, 0.25, eligible=lambda i: t.nodes[i].name != "n-0-3")
    assert sorted(t.nodes[i].name for i in spares) == ["n-0-2", "n-1-3"]
    assert pick_spares(t, 0.0) == (set(), {})
    assert target_of(4, 0.26) == 2 and target_of(3, 1.0) == 3


def test_replacement_order_is_nearest_first_then_spares_first():
    t = topo(4, 2)  # racks 0,1 in block 0; racks 2,3 in block 1
    index = {n.name: n.index for n in t.nodes}
    home = index["n-0-0"]
    order = replacement_order(t, home, [index[n] for n in ("n-2-0", "n-1-1", "n-1-0", "n-0-1")], [index["n-1-1"]])
    assert [t.nodes[i].name for i in order] == ["n-0-1", "n-1-1", "n-1-0", "n-2-0"]
    assert leaf_of(t, index["n-0-0"]) == leaf_of(t, index["n-0-1"]) != leaf_of(t, index["n-1-0"])


@pytest.mark.parametrize("value, expected", [("0", 0), ("3", 3), ("64", 64), (2, 2)])
def test_parse_gang_spares_accepts(value, expected):
    assert parse_gang_spares({"annotations": {"meshfit.io/spares": value}}) == expected
    assert parse_gang_spares({"labels": {"meshfit.io/spares": value}}) == expected


@pytest.mark.parametrize("value", ["-1", "65", "1e3", "3x", "", " ", "٣", True, None, "9" * 50])
def test_parse_gang_spares_rejects_in_one_line(value):
    with pytest.raises(ValueError) as exc:
        parse_gang_spares({"annotations": {"meshfit.io/spares": value}})
    assert "meshfit.io/spares" in str(exc.value) and "\n" not in str(exc.value)
