"""Extension points are found through entry points; the core keeps names, order and error messages."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import pytest

from scheduler.handoff.registry import HANDOFF_GROUP, HANDOFFS, get_handoff
from scheduler.gangs.membership import GANG_SOURCE_GROUP, GANG_SOURCES, gang_sources
from scheduler.placement.policy import POLICIES, POLICY_GROUP, get_policy


def test_every_group_is_declared() -> None:
    """The installed distribution declares the three groups with the extensions meshfit ships."""
    assert set(POLICIES) == {"first-fit", "meshfit", "kueue-tas", "volcano-hypernode", "random", "optimal"}
    assert set(GANG_SOURCES) == {"meshfit-label", "pytorchjob", "trainjob", "jobset", "indexed-job", "volcano",
                                 "kueue", "coscheduling", "workload-api"}
    assert set(HANDOFFS) == {"pytorchjob", "jobset", "trainjob", "local"}


@pytest.mark.parametrize("group", [POLICY_GROUP, HANDOFF_GROUP])
def test_entry_point_names_match_the_modules(group: str) -> None:
    """An entry point's name is the `NAME` its module declares."""
    for entry in entry_points(group=group):
        assert importlib.import_module(entry.module).NAME == entry.name


def test_gang_sources_keep_their_order() -> None:
    """Job-level sources before group sources, whatever order the entry points come in."""
    assert [source.name for source in gang_sources()] == [
        "workload-api", "meshfit-label", "pytorchjob", "trainjob", "jobset", "indexed-job", "volcano", "kueue",
        "coscheduling"]
    assert all(entry.name in GANG_SOURCES for entry in entry_points(group=GANG_SOURCE_GROUP))


def test_unknown_names_list_the_known_ones() -> None:
    """Same one-line errors as before the registries moved into the core."""
    with pytest.raises(ValueError, match=r"unknown policy 'nope' \(known: first-fit, kueue-tas, meshfit, "):
        get_policy("nope")
    with pytest.raises(ValueError, match=r"unknown handoff 'nope' \(known: jobset, local, pytorchjob, trainjob\)"):
        get_handoff("nope")


def test_register_by_hand() -> None:
    """An embedding program can add a policy without an entry point; the engine then finds it by name."""
    from scheduler.placement.engine import place
    from tests.placement.placement_builders import make_cluster, make_gang

    POLICIES.register("mine", POLICIES["first-fit"])
    try:
        placement = place(make_gang(dp=8, gpus_per_pod=4), make_cluster(racks=1, nodes=2), "mine")
        assert placement.placed and placement.policy == "first-fit"
    finally:
        POLICIES.unregister("mine")
    assert "mine" not in POLICIES
