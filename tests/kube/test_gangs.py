"""Gang sources: each project's labels give the right gang, index and size; inconsistencies are one-line errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from plugins.gangs import PRIORITY, SOURCES, identify
from plugins.gangs.kueue import assignment_domains
from scheduler.placement.jobs import JobSpecError, Parallelism
from tests.kube.gang_builders import ObjectStore, jobset_pods, make_jobset, make_pod, pod_template

PAR = "meshfit.io/parallelism"


def volcano_job(tasks: list[tuple[str, int]]) -> dict:
    """A Volcano Job with (task name, replicas) tasks."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "default"},
            "spec": {"tasks": [{"name": n, "replicas": r, "template": pod_template()} for n, r in tasks]}}


def volcano_pod(task: str, index: int, **extra) -> dict:
    """A pod the Volcano controller creates for task `task`."""
    return make_pod(f"vj-{task}-{index}", labels={"volcano.sh/job-name": "vj", "volcano.sh/task-spec": task,
                                                   "volcano.sh/task-index": str(index)},
                    annotations={"scheduling.k8s.io/group-name": "vj-pg", **extra},
                    owner=("batch.volcano.sh/v1alpha1", "Job", "vj"))


def pytorch_pod(role: str, index: int, master_addr: str | None = None) -> dict:
    """A training-operator PyTorchJob pod."""
    return make_pod(f"pt-{role}-{index}", labels={
        "training.kubeflow.org/job-name": "pt", "training.kubeflow.org/replica-type": role,
        "training.kubeflow.org/replica-index": str(index),
        "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        env={"MASTER_ADDR": master_addr} if master_addr else None, owner=("kubeflow.org/v1", "PyTorchJob", "pt"))


PYTORCHJOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "default"},
              "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod_template()},
                                               "Worker": {"replicas": 3, "template": pod_template()}}}}


def test_registry_lists_every_source_in_priority_order():
    assert set(PRIORITY) == set(SOURCES) == {"meshfit-label", "pytorchjob", "trainjob", "jobset", "indexed-job",
                                             "volcano", "kueue", "coscheduling", "workload-api"}
    assert PRIORITY.index("pytorchjob") < PRIORITY.index("volcano") < PRIORITY.index("coscheduling")
    assert PRIORITY[0] == "workload-api"  # a pod pointing at a Workload declares its gang before its Job does


IDENTIFY_CASES = [
    # (id, pod, objects, expected (gang_key, index, size, source))
    ("meshfit-label", make_pod(labels={"meshfit.io/gang": "g"}, annotations={
        "meshfit.io/pod-index": "2", "meshfit.io/gang-size": "4"}), [], ("default/g", 2, 4, "meshfit-label")),
    ("meshfit-label-size-from-parallelism", make_pod(labels={"meshfit.io/gang": "g"}, annotations={
        "meshfit.io/pod-index": "1", PAR: "tp=8,dp=3"}), [], ("default/g", 1, 3, "meshfit-label")),
    ("volcano-second-task-with-job", volcano_pod("worker", 1), [volcano_job([("master", 1), ("worker", 3)])],
     ("default/vj-pg", 2, 4, "volcano")),
    ("volcano-podgroup-minmember", volcano_pod("worker", 1),
     [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
       "metadata": {"name": "vj-pg", "namespace": "default"}, "spec": {"minMember": 5}}],
     ("default/vj-pg", 1, 5, "volcano")),
    ("coscheduling", make_pod(labels={"scheduling.x-k8s.io/pod-group": "cg"}, annotations={"meshfit.io/pod-index": "3"}),
     [{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
       "metadata": {"name": "cg", "namespace": "default"}, "spec": {"minMember": 4}}],
     ("default/cg", 3, 4, "coscheduling")),
    ("kueue-pod-group", make_pod(labels={"kueue.x-k8s.io/pod-group-name": "kg", "kueue.x-k8s.io/pod-group-pod-index": "1"},
                                 annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}), [],
     ("default/kg", 1, 2, "kueue")),
    ("pytorch-master", pytorch_pod("master", 0), [PYTORCHJOB], ("default/pt", 0, 4, "pytorchjob")),
    ("pytorch-worker-after-master", pytorch_pod("worker", 2), [PYTORCHJOB], ("default/pt", 3, 4, "pytorchjob")),
    ("pytorch-worker-no-master-by-env", pytorch_pod("worker", 2, master_addr="pt-worker-0"), [],
     ("default/pt", 2, 4, "pytorchjob")),
    ("indexed-job", make_pod("ij-1", annotations={"batch.kubernetes.io/job-completion-index": "1"},
                             labels={"batch.kubernetes.io/job-name": "ij"}, owner=("batch/v1", "Job", "ij")),
     [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ij", "namespace": "default"},
       "spec": {"completions": 6, "parallelism": 6, "completionMode": "Indexed", "template": pod_template()}}],
     ("default/ij", 1, 6, "indexed-job")),
]


@pytest.mark.parametrize("pod,objects,expected", [c[1:] for c in IDENTIFY_CASES], ids=[c[0] for c in IDENTIFY_CASES])
def test_identify_gang_index_and_size(pod, objects, expected):
    if expected[0] == "default/pt" and not objects:
        pod["metadata"]["annotations"][PAR] = "tp=8,dp=4"
    member = identify(pod, ObjectStore(*objects))
    assert (member.gang_key, member.index, member.size, member.source) == expected
    assert member.gpus_per_pod == 8


def test_pods_without_gpus_or_gang_labels_are_not_members():
    assert identify(make_pod(gpus=0, annotations={"batch.kubernetes.io/job-completion-index": "0"},
                             labels={"job-name": "cpu"})) is None
    assert identify(make_pod(gpus=8)) is None


ERROR_CASES = [
    ("missing-index", make_pod(labels={"meshfit.io/gang": "g"}, annotations={"meshfit.io/gang-size": "2"}),
     "without annotation meshfit.io/pod-index"),
    ("index-outside-gang", make_pod(labels={"meshfit.io/gang": "g"}, annotations={
        "meshfit.io/pod-index": "4", "meshfit.io/gang-size": "4"}), "pod index 4 is outside gang default/g of 4 pods"),
    ("unknown-size", make_pod(labels={"meshfit.io/gang": "g"}, annotations={"meshfit.io/pod-index": "0"}),
     "cannot tell the gang size"),
    ("parallelism-mismatch", make_pod(labels={"meshfit.io/gang": "g"}, annotations={
        "meshfit.io/pod-index": "0", "meshfit.io/gang-size": "2", PAR: "tp=8,dp=4"}),
     "tp*cp*ep*pp*dp = 32 (tp=8,cp=1,ep=1,pp=1,dp=4) but the gang has 2 pods x 8 GPUs = 16"),
    ("conflicting-levels", make_pod(labels={"meshfit.io/gang": "g"}, annotations={
        "meshfit.io/pod-index": "0", "meshfit.io/gang-size": "2", "meshfit.io/required-level": "rack",
        "kueue.x-k8s.io/podset-required-topology": "block"}), "conflicting required topology levels"),
    ("bad-gpu-quantity", make_pod(labels={"meshfit.io/gang": "g"}, annotations={"meshfit.io/pod-index": "0"},
                                  gpus="eight"), "nvidia.com/gpu"),
    ("volcano-no-task-index", make_pod(annotations={"scheduling.k8s.io/group-name": "pg"}), "without volcano.sh/task-index"),
    ("pytorch-unknown-role", make_pod(labels={"training.kubeflow.org/job-name": "pt",
                                              "training.kubeflow.org/replica-type": "ps"}), "'ps' is not master or worker"),
]


@pytest.mark.parametrize("pod,message", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_inconsistent_members_raise_one_line_errors(pod, message):
    with pytest.raises(JobSpecError) as info:
        identify(pod)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_settings_come_from_the_pod_first_and_the_owner_for_missing_keys():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ij", "namespace": "default",
                                                                 "annotations": {"meshfit.io/model": "params=70e9,layers=80"}},
           "spec": {"completions": 4, "parallelism": 4, "completionMode": "Indexed",
                    "template": pod_template(annotations={PAR: "tp=8,pp=2", "meshfit.io/rank-order": "tp-cp-ep-pp-dp"})}}
    pod = make_pod(annotations={"batch.kubernetes.io/job-completion-index": "0", "meshfit.io/rank-order": "TP-CP-EP-DP-PP"},
                   owner=("batch/v1", "Job", "ij"))
    member = identify(pod, ObjectStore(job))
    assert member.parallelism == Parallelism(tp=8, pp=2, dp=2)
    assert member.rank_order == "tp-cp-ep-dp-pp"
    assert member.model.params == 70e9 and member.model.layers == 80


def test_volcano_network_topology_of_the_job_becomes_the_required_level():
    job = volcano_job([("worker", 2)])
    job["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    member = identify(volcano_pod("worker", 0), ObjectStore(job))
    assert member.constraint.required_level == "volcano-tier-2"


def test_trainjob_trainer_pods_are_members_and_initializers_are_not():
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "tj", "namespace": "default"}, "spec": {"trainer": {"numNodes": 4}}}
    jobset = make_jobset("tj", [("dataset-initializer", 1, 1), ("node", 1, 4)])
    pods = jobset_pods(jobset)
    store = ObjectStore(trainjob, jobset)
    members = [identify(p, store) for p in pods]
    assert members[0] is None
    assert [(m.gang_key, m.index, m.size, m.source) for m in members[1:]] == [
        ("default/tj", i, 4, "trainjob") for i in range(4)]


KUEUE_ASSIGNMENTS = [
    ("v1beta1", {"levels": ["cloud.com/block", "kubernetes.io/hostname"],
                 "domains": [{"values": ["b1", "n1"], "count": 2}, {"values": ["b1", "n2"], "count": 2}]}, ("n1", "n2")),
    ("v1beta2-individual", {"levels": ["kubernetes.io/hostname"], "slices": [
        {"domainCount": 3, "valuesPerLevel": [{"individual": {"prefix": "node-", "roots": ["1", "2", "3"]}}],
         "podCounts": {"universal": 1}}]}, ("node-1", "node-2", "node-3")),
    ("v1beta2-universal", {"levels": ["rack"], "slices": [
        {"domainCount": 1, "valuesPerLevel": [{"universal": "rack-7"}], "podCounts": {"universal": 4}}]}, ("rack-7",)),
]


@pytest.mark.parametrize("assignment,domains", [c[1:] for c in KUEUE_ASSIGNMENTS], ids=[c[0] for c in KUEUE_ASSIGNMENTS])
def test_kueue_topology_assignment_domains(assignment, domains):
    assert assignment_domains(assignment, "wl") == domains


def test_kueue_tas_assignment_is_added_to_any_source():
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "wl", "namespace": "default"},
                "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                    {"name": "main", "count": 2, "topologyAssignment": KUEUE_ASSIGNMENTS[0][1]}]}}}
    pod = make_pod(labels={"meshfit.io/gang": "g", "kueue.x-k8s.io/podset": "main"},
                   annotations={"meshfit.io/pod-index": "0", "meshfit.io/gang-size": "2", "kueue.x-k8s.io/workload": "wl"})
    assert identify(pod, ObjectStore(workload)).constraint.assigned_domains == ("n1", "n2")
    assert identify(pod).constraint.assigned_domains == ()


def test_an_object_of_the_same_kind_from_another_api_group_is_ignored():
    batch_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "vj", "namespace": "default"},
                 "spec": {"completions": 9, "parallelism": 9}}
    member = identify(volcano_pod("worker", 1, **{"meshfit.io/gang-size": "2"}), ObjectStore(batch_job))
    assert (member.index, member.size) == (1, 2)


rjob_shapes = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(shapes=rjob_shapes, cached=st.sampled_from(["jobset", "jobs", "nothing"]))
def test_jobset_pods_get_a_permutation_of_indices(shapes, cached):
    """Whatever is cached, a JobSet's pods get distinct indices 0..n-1 and agree on the size."""
    jobset = make_jobset("js", [(f"r{i}", replicas, ppj) for i, (replicas, ppj) in enumerate(shapes)])
    pods = jobset_pods(jobset)
    uniform = len({ppj for _, ppj in shapes}) == 1
    objects = {"jobset": [jobset], "nothing": []}.get(cached)
    if objects is None:
        objects = [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"js-r{i}-{j}", "namespace": "default"},
                    "spec": {"parallelism": ppj, "completions": ppj}}
                   for i, (replicas, ppj) in enumerate(shapes) for j in range(replicas)]
    if cached != "jobset":
        if not uniform:
            return  # without the JobSet, uneven replicated jobs cannot be laid out; nothing to check
        for pod in pods:
            pod["metadata"]["annotations"][PAR] = f"tp=8,dp={len(pods)}"
    members = [identify(p, ObjectStore(*objects)) for p in pods]
    assert sorted(m.index for m in members) == list(range(len(pods)))
    assert {m.size for m in members} == {len(pods)}
    assert {m.gang_key for m in members} == {"default/js"}


@settings(max_examples=30, deadline=None)
@given(tasks=st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_volcano_task_offsets_cover_every_index_once(tasks):
    job = volcano_job([(f"t{i}", r) for i, r in enumerate(tasks)])
    members = [identify(volcano_pod(f"t{i}", k), ObjectStore(job)) for i, r in enumerate(tasks) for k in range(r)]
    assert sorted(m.index for m in members) == list(range(sum(tasks)))
