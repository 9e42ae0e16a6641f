"""Pod assignment annotations and the rank-table ConfigMap: round trips and strict rejection of bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement.engine import build_ranks
from scheduler.handoff.assignment import AssignmentError, annotations_for_pod, parse_assignment
from scheduler.placement.jobs import AXES, Gang, Parallelism, PodSlot
from scheduler.placement.layout import rank_to_coords
from scheduler.placement.result import PLACED, Placement
from scheduler.handoff.rank_table import configmap_name, parse_rank_table, rank_table_configmap, rank_table_document


def make_placement(parallelism: str = "tp=2,pp=2,dp=2", gpus: int = 2, order: str = "tp-cp-ep-dp-pp") -> Placement:
    """A placed gang with one node per pod (`node-<i>`)."""
    par = Parallelism.parse(parallelism)
    pods = par.world_size // gpus
    gang = Gang("ns", "job", tuple(PodSlot(i, f"job-{i}", gpus) for i in range(pods)), par, order)
    nodes = [f"node-{i}" for i in range(pods)]
    return Placement(gang, PLACED, "test", order, None, nodes, build_ranks(gang, nodes, order))


@settings(max_examples=60, deadline=None)
@given(degrees=st.lists(st.sampled_from([1, 2, 3]), min_size=5, max_size=5),
       order=st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]), data=st.data())
def test_annotations_round_trip_with_layout_coords(degrees, order, data):
    par = Parallelism(**dict(zip(AXES, degrees)))
    gpus = data.draw(st.sampled_from([g for g in range(1, par.world_size + 1) if par.world_size % g == 0]))
    placement = make_placement(str(par), gpus, order)
    index = data.draw(st.integers(0, len(placement.gang.pods) - 1))
    parsed = parse_assignment(annotations_for_pod(placement, index, "master"))
    assert parsed.ranks == tuple(placement.gang.pod_ranks(index))
    assert list(parsed.coords) == [rank_to_coords(r, par, tuple(order.split("-"))) for r in parsed.ranks]
    assert parsed.pod_count == len(placement.gang.pods)


def _mutated(change: dict) -> dict:
    annotations = annotations_for_pod(make_placement(), 1, "job-0")
    annotations.update(change)
    return {k: v for k, v in annotations.items() if v is not None}


BAD_ANNOTATIONS = [
    ("no-annotations", {k: None for k in annotations_for_pod(make_placement(), 1, "m")}, "not bound by meshfit"),
    ("missing-world-size", {"meshfit.io/world-size": None}, "missing annotation meshfit.io/world-size"),
    ("world-size-mismatch", {"meshfit.io/world-size": "16"}, "world size 16"),
    ("ranks-not-the-pod-block", {"meshfit.io/ranks": "4,5"}, "must hold ranks 2..3"),
    ("coords-disagree", {"meshfit.io/coords": json.dumps([{a: 0 for a in AXES}] * 2)}, "disagree with rank order"),
    ("coords-not-json", {"meshfit.io/coords": "[{"}, "not JSON"),
    ("unknown-axis-order", {"meshfit.io/rank-order": "tp-xx"}, "unknown axis"),
    ("bad-port", {"meshfit.io/master-port": "http"}, "expected an integer"),
    ("empty-master", {"meshfit.io/master-addr": ""}, "empty master address"),
]


@pytest.mark.parametrize("change,message", [c[1:] for c in BAD_ANNOTATIONS], ids=[c[0] for c in BAD_ANNOTATIONS])
def test_bad_annotations_are_rejected(change, message):
    with pytest.raises(AssignmentError, match=message):
        parse_assignment(_mutated(change))


def test_rank_table_configmap_round_trip():
    placement = make_placement()
    configmap = rank_table_configmap(placement, "job-0", bound_pods={0, 1})
    assert configmap["metadata"]["name"] == configmap_name("job") == "meshfit-job-ranks"
    table = parse_rank_table(configmap["data"]["ranks.json"])
    assert not table.complete and table.pod_nodes[:2] == ("node-0", "node-1")
    full = parse_rank_table(json.dumps(rank_table_document(placement, "job-0")))
    assert full.complete
    assert [row["coords"] for row in full.rows] == [r.coords for r in placement.ranks]
    full.check_matches(parse_assignment(annotations_for_pod(placement, 2, "job-0")))


def test_rank_table_rejects_edited_rows_and_mismatched_pods():
    placement = make_placement()
    document = rank_table_document(placement, "job-0")
    document["ranks"][3]["coords"]["tp"] = 0
    with pytest.raises(AssignmentError, match="row 3"):
        parse_rank_table(json.dumps(document))
    table = parse_rank_table(json.dumps(rank_table_document(placement, "job-0")))
    with pytest.raises(AssignmentError, match="master address"):
        table.check_matches(parse_assignment(annotations_for_pod(placement, 0, "elsewhere")))
