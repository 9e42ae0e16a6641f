"""Elastic gangs, core: the dp range is parsed strictly, checked against the gang, and sizes are whole replicas."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from plugins.gangs import identify
from scheduler.gangs.elastic import ElasticRange, elastic_range, parse_elastic, place_largest, resized_gang, shrink_target
from scheduler.placement.jobs import Gang, JobSpecError, Parallelism, PodSlot
from scheduler.placement.layout import rank_to_coords
from scheduler.placement.result import PLACED, UNSCHEDULABLE, Placement
from tests.kube.gang_builders import ObjectStore, make_pod, pod_template

WHERE = "pod default/e-0"


def test_the_annotation_is_read_strictly():
    assert parse_elastic("dp=4..16", WHERE) == (4, 16)
    assert parse_elastic(" DP = 2 .. 2 ", WHERE) == (2, 2)
    for bad in ("4..16", "dp=4-16", "dp=4..", "dp=..8", "dp=0..4", "dp=8..4", "tp=2..4", "dp=4..16,tp=2",
                "dp=-1..4", "dp=1e3..2e3", "dp=4..9999999999"):
        with pytest.raises(JobSpecError) as err:
            parse_elastic(bad, WHERE)
        assert str(err.value).startswith(WHERE) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, par, size, gpus, order, message", [
    ("dp=2..4", Parallelism(tp=8, dp=8), 8, 8, None, "declares dp=8"),
    ("dp=2..8", Parallelism(tp=4, dp=16), 8, 8, None, "not a whole number of 8-GPU pods"),
    ("dp=2..4", Parallelism(tp=8, pp=2, dp=4), 8, 8, None, "puts pp (degree 2) outside dp"),
    ("dp=2..4", Parallelism(tp=8, pp=2, dp=4), 8, 8, "auto", "explicit rank order"),
    ("dp=2..4", Parallelism(tp=8, dp=4), 4, 0, None, "must request GPUs"),
])
def test_a_range_inconsistent_with_the_gang_is_refused_in_one_line(text, par, size, gpus, order, message):
    with pytest.raises(JobSpecError) as err:
        elastic_range(text, None, par, size, gpus, order, WHERE)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_replica_of_several_pods_and_a_dp_outermost_order_are_accepted():
    par = Parallelism(tp=8, pp=2, dp=4)  # one replica = 16 GPUs = 2 pods
    assert elastic_range("dp=1..4", None, par, 8, 8, "tp-cp-ep-pp-dp", WHERE) == ElasticRange(1, 4, 2)
    assert elastic_range(None, None, par, 8, 8, None, WHERE) is None


def test_a_kueue_slice_and_an_elastic_range_do_not_mix():
    with pytest.raises(JobSpecError, match="slices"):
        elastic_range("dp=1..4", None, Parallelism(tp=8, dp=4), 4, 8, None, WHERE, has_slices=True)


def _pytorchjob(policy: dict, workers: int = 8, annotations: dict | None = None) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "default"},
            "spec": {"elasticPolicy": policy,
                     "pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": pod_template()}}}}


def _worker(index: int, annotations: dict | None = None) -> dict:
    return make_pod(f"pt-worker-{index}", labels={
        "training.kubeflow.org/job-name": "pt", "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index),
        "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        annotations=annotations, env={"MASTER_ADDR": "pt-worker-0"}, owner=("kubeflow.org/v1", "PyTorchJob", "pt"))


def test_a_pytorchjob_elastic_policy_gives_the_range_in_pods():
    member = identify(_worker(5), ObjectStore(_pytorchjob({"minReplicas": 3, "maxReplicas": 16})))
    assert (member.size, member.index, member.elastic) == (8, 5, ElasticRange(3, 8, 1))  # only 8 pods exist


def test_a_pytorchjob_policy_and_the_annotation_must_agree():
    store = ObjectStore(_pytorchjob({"minReplicas": 2, "maxReplicas": 8}))
    agree = identify(_worker(1, {"meshfit.io/elastic": "dp=2..8"}), store)
    assert agree.elastic == ElasticRange(2, 8, 1)
    with pytest.raises(JobSpecError, match="elasticPolicy says dp=4..8"):
        identify(_worker(1, {"meshfit.io/elastic": "dp=2..8"}),
                 ObjectStore(_pytorchjob({"minReplicas": 4, "maxReplicas": 8})))
    for policy, message in (({"minReplicas": 9, "maxReplicas": 12}, "above the job.s 8 pods"),
                            ({"minReplicas": "2"}, "integer"),
                            ({"minReplicas": 6, "maxReplicas": 4}, "minReplicas 6 > maxReplicas 4")):
        with pytest.raises(JobSpecError, match=message):
            identify(_worker(0), ObjectStore(_pytorchjob(policy)))


def test_the_plain_annotation_works_on_meshfit_label_pods():
    pod = make_pod("e-3", labels={"meshfit.io/gang": "e"},
                   annotations={"meshfit.io/pod-index": "3", "meshfit.io/parallelism": "tp=8,dp=8",
                                "meshfit.io/elastic": "dp=2..8"})
    member = identify(pod, ObjectStore())
    assert (member.gang_key, member.size, member.elastic) == ("default/e", 8, ElasticRange(2, 8, 1))


def _gang(pods: int, par: Parallelism) -> Gang:
    return Gang("default", "e", tuple(PodSlot(i, f"e-{i}", 8) for i in range(pods)), par)


@settings(max_examples=200, deadline=None)
@given(per=st.integers(1, 4), low=st.integers(1, 6), extra=st.integers(0, 6), data=st.data())
def test_every_size_is_whole_replicas_inside_the_range_with_unchanged_ranks(per, low, extra, data):
    high = low + extra
    elastic = ElasticRange(low, high, per)
    par = Parallelism(tp=8, pp=per, dp=high)  # one replica = `per` 8-GPU pods (pp stages), dp outermost
    full = _gang(per * high, par)
    dp = data.draw(st.integers(low, high))
    sized = resized_gang(full, elastic, dp)
    sized.validate()
    assert len(sized.pods) == dp * per and sized.parallelism.dp == dp and sized.world_size % (8 * per) == 0
    order = ("tp", "cp", "ep", "pp", "dp")
    for rank in range(sized.world_size):  # a pod's ranks and coordinates do not depend on the size
        assert rank_to_coords(rank, sized.parallelism, order) == rank_to_coords(rank, par, order)
    missing = data.draw(st.integers(1, dp * per))
    target = shrink_target(dp, elastic, missing)
    assert (dp - target) * per >= missing and (dp - target - 1) * per < missing  # the fewest replicas that cover it


def test_the_largest_size_that_fits_is_placed_first():
    elastic = ElasticRange(2, 8, 1)
    full = _gang(8, Parallelism(tp=8, dp=8))
    asked = []

    def fake_place(gang: Gang) -> Placement:
        asked.append(len(gang.pods))
        fits = len(gang.pods) <= 5
        return Placement(gang, PLACED if fits else UNSCHEDULABLE, "x", "tp-cp-ep-dp-pp",
                         None if fits else "no room", ["n"] * len(gang.pods) if fits else [])

    placement = place_largest(full, elastic, free_gpus=48, place=fake_place)
    assert placement.placed and len(placement.gang.pods) == 5 and placement.gang.parallelism.dp == 5
    assert asked == [6, 5]  # 8 and 7 need more GPUs than are free: not even asked
    asked.clear()
    tiny = place_largest(full, elastic, free_gpus=8, place=fake_place)  # nothing fits by count: only min is asked,
    assert asked == [2] and len(tiny.gang.pods) == 2  # so the reason a waiting gang gives is its smallest size's
    never = place_largest(full, elastic, free_gpus=64,
                          place=lambda g: Placement(g, UNSCHEDULABLE, "x", "tp-cp-ep-dp-pp", "no room"))
    assert not never.placed and len(never.gang.pods) == 2


def test_a_member_bound_at_a_smaller_size_still_declares_the_maximum():
    bound_at_4 = {"meshfit.io/pod-index": "2", "meshfit.io/parallelism": "tp=8,cp=1,ep=1,pp=1,dp=4",
                  "meshfit.io/elastic": "dp=2..8", "meshfit.io/ranks": "16,17,18,19,20,21,22,23"}
    pod = make_pod("e-2", labels={"meshfit.io/gang": "e"}, annotations={**bound_at_4, "meshfit.io/gang-size": "8"})
    member = identify(pod, ObjectStore())  # meshfit's bind wrote parallelism dp=4 over the pod's dp=8
    assert (member.size, member.parallelism.dp, member.elastic) == (8, 8, ElasticRange(2, 8, 1))
    no_size = make_pod("e-2", labels={"meshfit.io/gang": "e"}, annotations=bound_at_4)
    assert identify(no_size, ObjectStore()).size == 8  # the size read from the parallelism is the maximum too
    worker = _worker(2, {"meshfit.io/parallelism": "tp=8,dp=4", "meshfit.io/ranks": "16,17,18,19,20,21,22,23"})
    member = identify(worker, ObjectStore(_pytorchjob({"minReplicas": 2, "maxReplicas": 8})))
    assert (member.size, member.parallelism.dp, member.elastic) == (8, 8, ElasticRange(2, 8, 1))
    fresh = make_pod("e-2", labels={"meshfit.io/gang": "e"}, annotations={  # not bound: no restating, a mistake
        "meshfit.io/pod-index": "2", "meshfit.io/parallelism": "tp=8,dp=4", "meshfit.io/elastic": "dp=2..8",
        "meshfit.io/gang-size": "8"})
    with pytest.raises(JobSpecError):
        identify(fresh, ObjectStore())


def _table_and_annotations(bound_dp: int, table_dp: int, elastic: bool):
    from scheduler.placement.engine import build_ranks
    from scheduler.handoff.assignment import annotations_for_pod
    from scheduler.handoff.rank_table import parse_rank_table, rank_table_configmap

    def placed(dp: int) -> Placement:
        gang = resized_gang(_gang(8, Parallelism(tp=8, dp=8)), ElasticRange(2, 8, 1), dp)
        nodes = [f"n{i}" for i in range(dp)]
        return Placement(gang, PLACED, "x", "tp-cp-ep-dp-pp", None, nodes, build_ranks(gang, nodes, "tp-cp-ep-dp-pp"))

    section = {"min_dp": 2, "max_dp": 8, "dp": table_dp, "generation": 3} if elastic else None
    configmap = rank_table_configmap(placed(table_dp), "n0", elastic=section)
    return parse_rank_table(configmap["data"]["ranks.json"]), annotations_for_pod(placed(bound_dp), 2, "n0")


def test_the_launcher_takes_an_elastic_gang_s_size_from_the_rank_table():
    from scheduler.handoff.assignment_sources import resolve_assignment
    from scheduler.handoff.assignment import AssignmentError, parse_assignment

    table, annotations = _table_and_annotations(bound_dp=8, table_dp=6, elastic=True)  # bound at 8, shrunk to 6
    assert table.elastic == {"min_dp": 2, "max_dp": 8, "dp": 6, "generation": 3}
    assignment, source = resolve_assignment(annotations, table, {})
    assert source == "annotations" and assignment.world_size == 48 and assignment.parallelism.dp == 6
    assert assignment.ranks == parse_assignment(annotations).ranks  # its ranks are the same at every size
    table.check_matches(assignment)
    fixed, annotations = _table_and_annotations(bound_dp=8, table_dp=6, elastic=False)  # not elastic: a mismatch
    with pytest.raises(AssignmentError, match="world size"):
        fixed.check_matches(parse_assignment(annotations))
