"""ClusterState keys gang objects by (API group, kind): same-named objects of two groups do not collide."""

from __future__ import annotations

import pytest

from scheduler.cache.state import ClusterState

from tests.service.helpers import make_nodes, make_pod


def obj(api_version: str, kind: str, name: str, spec: dict | None = None) -> dict:
    """A namespaced custom object in `default`."""
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "default"},
            "spec": spec or {}}


VOLCANO_PG = obj("scheduling.volcano.sh/v1beta1", "PodGroup", "train", {"minMember": 2})
COSCHED_PG = obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "train", {"minMember": 4})
BATCH_JOB = obj("batch/v1", "Job", "train", {"parallelism": 3, "completions": 3, "completionMode": "Indexed"})
VOLCANO_JOB = obj("batch.volcano.sh/v1alpha1", "Job", "train", {"tasks": [{"name": "w", "replicas": 5}]})


def state_with(*objects: dict) -> ClusterState:
    """A state over the default nodes holding `objects`, upserted one by one (last wins on a collision)."""
    state = ClusterState()
    state.replace_all(make_nodes(), [], [])
    for item in objects:
        state.upsert_object(item)
    return state


@pytest.mark.parametrize("objects", [(VOLCANO_PG, COSCHED_PG), (COSCHED_PG, VOLCANO_PG)],
                         ids=["volcano-first", "coscheduling-first"])
def test_same_named_podgroups_of_two_groups_are_both_kept(objects):
    state = state_with(*objects)
    assert state.get_object("scheduling.volcano.sh/PodGroup", "default", "train") is VOLCANO_PG
    assert state.get_object("scheduling.x-k8s.io/PodGroup", "default", "train") is COSCHED_PG
    assert state.get_object("PodGroup", "default", "train") in (VOLCANO_PG, COSCHED_PG)
    volcano_pod = make_pod("v-0", annotations={"scheduling.k8s.io/group-name": "train", "volcano.sh/task-index": "0"})
    cosched_pod = make_pod("c-0", labels={"scheduling.x-k8s.io/pod-group": "train"},
                           annotations={"meshfit.io/pod-index": "0"})
    assert state.upsert_pod(volcano_pod).member.size == 2
    assert state.upsert_pod(cosched_pod).member.size == 4


@pytest.mark.parametrize("objects", [(BATCH_JOB, VOLCANO_JOB), (VOLCANO_JOB, BATCH_JOB)],
                         ids=["batch-first", "volcano-first"])
def test_batch_job_and_volcano_job_of_one_name_size_their_own_gangs(objects):
    state = state_with(*objects)
    indexed = make_pod("train-1", annotations={"batch.kubernetes.io/job-completion-index": "1"},
                       labels={"batch.kubernetes.io/job-name": "train"})
    volcano = make_pod("train-w-0", annotations={"scheduling.k8s.io/group-name": "train-pg",
                                                  "volcano.sh/task-index": "0", "volcano.sh/job-name": "train"})
    assert state.upsert_pod(indexed).member.size == 3
    assert state.upsert_pod(volcano).member.size == 5


def test_delete_with_a_qualified_kind_forgets_only_that_group():
    state = state_with(VOLCANO_PG, COSCHED_PG)
    state.delete_object("scheduling.volcano.sh/PodGroup", "default", "train")
    assert state.get_object("scheduling.volcano.sh/PodGroup", "default", "train") is None
    assert state.get_object("PodGroup", "default", "train") is COSCHED_PG
    state.delete_object("PodGroup", "default", "train")
    assert state.get_object("PodGroup", "default", "train") is None
