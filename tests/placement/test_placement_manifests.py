"""Manifest parsing: one fixture per kind, and a table of bad manifests with their one-line errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from scheduler.placement.jobs import JobSpecError
from scheduler.handoff.manifests import gang_from_manifest, load_job

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


@pytest.mark.parametrize("file,key,pods,gpus,parallelism,order,required,preferred,first_pod", [
    ("pytorchjob.yaml", "research/llama-70b", 4, 8, "tp=8,cp=1,ep=1,pp=2,dp=2", "tp-cp-ep-dp-pp", None, None,
     "llama-70b-master-0"),
    ("jobset.yaml", "default/gpt-jobset", 4, 4, "tp=4,cp=1,ep=1,pp=2,dp=2", "tp-cp-ep-dp-pp", None,
     "fabric.topograph.run/tier-0", "gpt-jobset-workers-0-0"),
    ("trainjob.yaml", "default/tj", 8, 4, "tp=16,cp=1,ep=1,pp=1,dp=2", "auto", None, None, "tj-node-0-0"),
    ("volcano-job.yaml", "team-a/vcjob", 4, 8, "tp=8,cp=1,ep=1,pp=1,dp=4", "tp-cp-ep-dp-pp", "volcano-tier-2", None,
     "vcjob-worker-0"),
    ("indexed-job.yaml", "default/idx", 2, 4, "tp=2,cp=1,ep=1,pp=1,dp=4", "tp-cp-ep-dp-pp", "leaf", None, "idx-0"),
], ids=["pytorchjob", "jobset", "trainjob", "volcano", "indexed-job"])
def test_each_kind_parses(file, key, pods, gpus, parallelism, order, required, preferred, first_pod):
    gang = load_job(JOBS / file)
    assert (gang.key, len(gang.pods), gang.gpus_per_pod, str(gang.parallelism), gang.rank_order) == \
        (key, pods, gpus, parallelism, order)
    assert (gang.constraint.required_level, gang.constraint.preferred_level) == (required, preferred)
    assert gang.pods[0].name == first_pod


def test_pytorchjob_master_comes_before_workers():
    names = [p.name for p in load_job(JOBS / "pytorchjob.yaml").pods]
    assert names == ["llama-70b-master-0", "llama-70b-worker-0", "llama-70b-worker-1", "llama-70b-worker-2"]


def test_jobset_pods_in_job_index_then_completion_index_order():
    names = [p.name for p in load_job(JOBS / "jobset.yaml").pods]
    assert names == ["gpt-jobset-workers-0-0", "gpt-jobset-workers-0-1", "gpt-jobset-workers-1-0",
                     "gpt-jobset-workers-1-1"]


def _indexed(**changes):
    doc = yaml.safe_load((JOBS / "indexed-job.yaml").read_text())
    doc = copy.deepcopy(doc)
    for path, value in changes.items():
        target = doc
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[int(k)] if isinstance(target, list) else target[k]
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return doc


ANNOTATIONS = "spec__template__metadata__annotations"


@pytest.mark.parametrize("doc,message", [
    (_indexed(spec__completionMode=None), "completionMode: Indexed"),
    (_indexed(spec__parallelism=1), "parallelism (1) must equal completions (2)"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=2,dp=3"}}), "tp*cp*ep*pp*dp = 6"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=2,xp=4"}}), "unknown axis 'xp'"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=0,dp=4"}}), "must be a positive integer"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=3"}}), "does not divide the job's 8 GPUs"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=2,pp=2,dp=2", "meshfit.io/rank-order": "tp-dp"}}),
     "omits axis"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=2,dp=4", "meshfit.io/rank-order": "tp-zz"}}),
     "unknown axis 'zz'"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/model": "params=abc"}}), "params must be a number"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/required-level": "rack",
                              "kueue.x-k8s.io/podset-required-topology": "zone"}}), "conflicting required topology levels"),
    (_indexed(**{"metadata__annotations": {"meshfit.io/parallelism": "tp=4,dp=2"}}), "annotation meshfit.io/parallelism"),
    (_indexed(spec__template__spec__containers=[{"name": "c", "image": "x"}]), "requests no GPUs"),
    (_indexed(spec__template__spec__containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "x"}}}]),
     "must be a whole number"),
    (_indexed(metadata={}), "metadata.name is required"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}, "unsupported job kind Deployment"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"},
      "spec": {"pytorchReplicaSpecs": {"Chief": {}}}}, "replica type 'Chief'"),
    ({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "x"},
      "spec": {"networkTopology": {"mode": "firm"}, "tasks": [{"replicas": 1, "template": {}}]}}, "hard or soft"),
    ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"}, "spec": {}},
     "replicatedJobs must be a non-empty list"),
    ({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "x"},
      "spec": {"trainer": {"numNodes": -1}}}, "non-negative integer"),
    (_indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=4,dp=2"}}), None),
], ids=["not-indexed", "parallelism-ne-completions", "world-size", "unknown-axis", "zero-degree", "dp-not-inferable",
        "order-omits-axis", "order-unknown-axis", "bad-model", "conflicting-levels", "conflicting-annotations",
        "no-gpus", "bad-gpu-count", "no-name", "unsupported-kind", "pytorch-role", "volcano-mode", "jobset-empty",
        "trainjob-negative", "valid-control"])
def test_bad_manifests_give_one_line_errors(doc, message):
    if message is None:
        assert gang_from_manifest(doc).parallelism.tp == 4
        return
    with pytest.raises(JobSpecError) as caught:
        gang_from_manifest(doc)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_tp_not_nesting_with_pod_size_is_rejected():
    doc = _indexed(**{ANNOTATIONS: {"meshfit.io/parallelism": "tp=8,dp=1"}})
    doc["spec"]["completions"] = doc["spec"]["parallelism"] = 1
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert gang_from_manifest(doc).parallelism.tp == 8
    doc["spec"]["template"]["metadata"]["annotations"]["meshfit.io/parallelism"] = "tp=3,dp=1"
    doc["spec"]["completions"] = doc["spec"]["parallelism"] = 1
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
    assert gang_from_manifest(doc).parallelism.tp == 3
    doc["spec"]["completions"] = doc["spec"]["parallelism"] = 2
    doc["spec"]["template"]["metadata"]["annotations"]["meshfit.io/parallelism"] = "tp=3,dp=2"
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
    assert gang_from_manifest(doc).world_size == 6
    doc["spec"]["template"]["metadata"]["annotations"]["meshfit.io/parallelism"] = "tp=2,dp=3"
    with pytest.raises(JobSpecError, match="do not nest"):
        gang_from_manifest(doc)


@pytest.mark.parametrize("file,message", [
    ("bad-world-size.yaml", "tp*cp*ep*pp*dp = 32"), ("bad-kind.yaml", "unsupported job kind"),
    ("bad-yaml.yaml", "not valid YAML/JSON"), ("missing.yaml", "cannot read job file"),
], ids=["world-size", "kind", "yaml", "missing"])
def test_bad_files(file, message):
    with pytest.raises(JobSpecError, match=message.replace("*", r"\*")):
        load_job(JOBS / file)
