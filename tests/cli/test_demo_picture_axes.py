"""`meshfit demo`'s picture draws each policy's cross-host groups of every parallel axis, not only tp pairs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from scheduler.cli.demo_cmd import demo_gang, place_with_each_policy, spanning_cluster  # noqa: E402
from scheduler.cli.demo_picture import _draw_panel, axis_groups_of, write_picture  # noqa: E402


@pytest.fixture(scope="module")
def scenario():
    gang = demo_gang()
    _, topo = spanning_cluster(0, 8)
    placements, _ = place_with_each_policy(gang, topo)
    return topo, placements


def _crossing(topo, placement, axis: str) -> int:
    hosts = {info.rank: info.node for info in placement.ranks}
    return sum(len({hosts[r] for r in group}) > 1 for group in axis_groups_of(placement, axis))


def test_every_axis_gets_a_legend_line_counting_its_cross_host_groups(scenario):
    topo, placements = scenario
    colours = plt.get_cmap("tab10")
    for name, placement in placements.items():
        figure, ax = plt.subplots()
        _draw_panel(ax, topo, name, placement, colours)
        labels = [text.get_text() for text in ax.get_legend().get_texts()]
        plt.close(figure)
        assert [label.split(":")[0] for label in labels] == ["tp", "pp", "dp"]
        for label, axis in zip(labels, ("tp", "pp", "dp")):
            assert label.startswith(f"{axis}: {_crossing(topo, placement, axis)} group")


def test_policies_differ_in_which_groups_cross_hosts(scenario):
    topo, placements = scenario
    crossing = {name: tuple(_crossing(topo, p, axis) for axis in ("tp", "pp", "dp")) for name, p in placements.items()}
    assert crossing["meshfit"][0] == 0 and crossing["meshfit"][2] == 0 and crossing["meshfit"][1] > 0
    assert len(set(crossing.values())) > 1


def test_picture_is_written(scenario, tmp_path):
    topo, placements = scenario
    write_picture(topo, placements, tmp_path / "demo.png")
    assert (tmp_path / "demo.png").stat().st_size > 10_000
