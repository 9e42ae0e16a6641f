"""Issue 26 item 2: `meshfit place` warns when the job, applied as written, would not reach meshfit.

On stderr (`warning: ...`) and in `-o json` (`warnings`): a pod template whose `schedulerName` is missing or
not meshfit's profile, and fields the Kubernetes schema (the `kubernetes` client's models) does not know.
The exit code stays 0 for a placed job.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.cli.place_warnings import unknown_fields
from tests.builders import make_nodelist, write_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml")) + [ROOT / "manifests" / "example-pytorchjob.yaml"]
RUNNER = CliRunner()
NOT_SET = "is not set: its pods go to kube-scheduler's default profile and never reach meshfit"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """A 32-node HGX H100 cluster file (every example fits it)."""
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=32))


def example(name: str) -> dict:
    """A manifest from manifests/ as a dict."""
    path = ROOT / "manifests" / (name if name.startswith("example-") else f"examples/{name}")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def place(cluster: Path, manifest: dict, tmp_path: Path, *extra: str) -> tuple[int, list[str], list[str]]:
    """(exit code, `warning:` lines on stderr, the JSON document's warnings) of placing `manifest`."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(job), "-o", "json", *extra])
    document = json.loads(result.stdout)
    stderr = result.stderr.strip().splitlines()
    assert all(line.startswith("warning: ") for line in stderr), result.stderr
    assert [line.removeprefix("warning: ") for line in stderr] == document["warnings"]
    return result.exit_code, stderr, document["warnings"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_shipped_examples_reach_meshfit_and_warn_about_nothing(path, cluster, tmp_path):
    code, _, warnings = place(cluster, yaml.safe_load(path.read_text(encoding="utf-8")), tmp_path)
    assert (code, warnings) == (0, [])


def test_a_misspelt_scheduler_name_and_job_field_are_named_with_a_hint_and_the_job_still_places(cluster, tmp_path):
    job = example("indexed-job.yaml")
    job["spec"]["completion"] = job["spec"].pop("completions")
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec["schedulerNmae"] = pod_spec.pop("schedulerName")
    code, stderr, warnings = place(cluster, job, tmp_path)
    assert code == 0
    assert warnings[0].startswith("unknown field spec.completion (") and "did you mean 'completions'?" in warnings[0]
    assert warnings[1].startswith("unknown field spec.template.spec.schedulerNmae (")
    assert warnings[1].endswith("did you mean 'schedulerName'?")
    assert warnings[2].startswith(f"spec.template.spec.schedulerName {NOT_SET}")
    assert len(warnings) == 3


@pytest.mark.parametrize("name, expected", [
    (None, f"spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName {NOT_SET} (set schedulerName: meshfit)"),
    ("default-scheduler", "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName is 'default-scheduler', "
                          "not meshfit's profile (meshfit): its pods never reach meshfit"),
], ids=["missing", "another-profile"])
def test_each_pod_template_of_a_crd_kind_is_checked(name, expected, cluster, tmp_path):
    job = example("example-pytorchjob.yaml")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker.pop("schedulerName")
    if name:
        worker["schedulerName"] = name
    assert place(cluster, job, tmp_path)[2] == [expected]


def test_pod_templates_in_crds_are_checked_against_the_pod_template_schema(cluster, tmp_path):
    job = example("example-pytorchjob.yaml")
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["resources"]["requets"] = {"cpu": "8"}
    container["volumeMount"] = container.pop("volumeMounts")
    code, _, warnings = place(cluster, job, tmp_path)
    where = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"
    assert code == 0
    assert [w.split(" (")[0] for w in warnings] == [f"unknown field {where}.resources.requets",
                                                    f"unknown field {where}.volumeMount"]
    assert warnings[0].endswith("did you mean 'requests'?") and warnings[1].endswith("did you mean 'volumeMounts'?")


def test_a_jobsets_job_templates_and_every_kinds_metadata_are_checked(cluster, tmp_path):
    job = example("jobset.yaml")
    job["metadata"]["lables"] = {"team": "ml"}
    job["spec"]["replicatedJobs"][0]["template"]["spec"]["backofLimit"] = 3
    warnings = place(cluster, job, tmp_path)[2]
    assert [w.split(" (")[0] for w in warnings] == ["unknown field metadata.lables",
                                                    "unknown field spec.replicatedJobs[0].template.spec.backofLimit"]
    assert "did you mean 'labels'?" in warnings[0] and "did you mean 'backoffLimit'?" in warnings[1]


@pytest.mark.parametrize("job_level, template_level, expected", [
    ("volcano", None, []),
    (None, None, []),
    ("volcano", "meshfit", []),
    ("default-scheduler", None, ["spec.schedulerName is 'default-scheduler', not meshfit's profile "
                                 "(meshfit, volcano): its pods never reach meshfit"]),
    ("volcano", "default-scheduler", ["spec.tasks[0].template.spec.schedulerName is 'default-scheduler', not "
                                      "meshfit's profile (meshfit, volcano): its pods never reach meshfit"]),
], ids=["volcano", "volcano-by-default", "meshfit-template", "job-elsewhere", "template-elsewhere"])
def test_volcano_jobs_reach_meshfit_through_volcano(job_level, template_level, expected, cluster, tmp_path):
    job = example("volcano-job.yaml")
    job["spec"].pop("schedulerName")
    if job_level:
        job["spec"]["schedulerName"] = job_level
    if template_level:
        job["spec"]["tasks"][0]["template"]["spec"]["schedulerName"] = template_level
    assert place(cluster, job, tmp_path)[2] == expected


def test_warnings_show_in_the_table_and_with_an_unschedulable_gang(cluster, tmp_path):
    job = example("indexed-job.yaml")
    job["spec"]["template"]["spec"].pop("schedulerName")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    table = RUNNER.invoke(app, ["place", "--cluster", str(cluster), "--job", str(path)])
    assert table.exit_code == 0 and table.stderr.startswith("warning: spec.template.spec.schedulerName is not set")
    assert "warning" not in table.stdout
    big = copy.deepcopy(job)
    big["spec"]["parallelism"] = big["spec"]["completions"] = 128
    big["spec"]["template"]["metadata"]["annotations"]["meshfit.io/parallelism"] = "tp=4,pp=2,dp=64"
    code, stderr, warnings = place(cluster, big, tmp_path)
    assert code == 3 and len(warnings) == 1 and len(stderr) == 1


def test_unknown_fields_walk_nested_models_lists_and_maps():
    template = {"metadata": {"labels": {"a": "b"}, "nmae": "x"},
                "spec": {"containers": [{"name": "c", "env": [{"name": "A", "valeu": "1"}]}],
                         "nodeSelector": {"any-key": "is fine"}, "overhead": {"cpu": "1"}}}
    found = unknown_fields(template, "V1PodTemplateSpec", "t")
    assert found == [("t.metadata.nmae", "; did you mean 'name'?"),
                     ("t.spec.containers[0].env[0].valeu", "; did you mean 'value'?")]
    assert unknown_fields(template["spec"], "V1PodSpec", "") == [("containers[0].env[0].valeu",
                                                                  "; did you mean 'value'?")]
