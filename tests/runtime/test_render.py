"""`meshfit render`: PyTorchJob, JobSet and TrainJob pinned to the placement, validated against strict schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from plugins.handoffs.render import placement_from_json
from scheduler.handoff.manifests import read_manifest
from plugins.handoffs import handoff_for_manifest
from plugins.handoffs.schemas import SchemaError, check_k8s, validate_rendered
from scheduler.cli import app
from scheduler.placement.engine import place
from scheduler.handoff.manifests import gang_from_manifest
from tests.builders import make_cluster

JOBS = Path(__file__).parents[1] / "fixtures" / "jobs"
runner = CliRunner()


def placed(job_file: str, nodes: int = 16):
    """(manifest, placement) for a fixture job placed by first-fit on a generated cluster."""
    manifest = read_manifest(JOBS / job_file)
    placement = place(gang_from_manifest(manifest), make_cluster(nodes=nodes), "first-fit")
    assert placement.placed
    return manifest, placement


def _pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "PyTorchJob":
        return [spec["template"] for spec in obj["spec"]["pytorchReplicaSpecs"].values()]
    return [rjob["template"]["spec"]["template"] for rjob in obj["spec"]["replicatedJobs"]]


@pytest.mark.parametrize("job_file", ["pytorchjob.yaml", "jobset.yaml", "trainjob.yaml"],
                         ids=["pytorchjob", "jobset", "trainjob"])
def test_rendered_manifest_validates(job_file):
    manifest, placement = placed(job_file)
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    validate_rendered(rendered)
    assert gang_from_manifest(rendered).world_size == placement.gang.world_size


def test_jobset_pins_every_pod_to_its_node_with_its_ranks():
    manifest, placement = placed("jobset.yaml")
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    templates = _pod_templates(rendered)
    assert len(templates) == len(placement.gang.pods)
    for index, template in enumerate(templates):
        spec = template["spec"]
        env = {item["name"]: item["value"] for item in spec["containers"][0]["env"]}
        assert spec["nodeSelector"]["kubernetes.io/hostname"] == placement.pod_nodes[index]
        assert env["RANK"] == str(placement.pod_ranks(index)[0]) and env["NODE_RANK"] == str(index)
        assert {"name": "meshfit-dshm", "emptyDir": {"medium": "Memory"}} in spec["volumes"]
        assert {"name": "meshfit-dshm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]


def test_pytorchjob_pins_master_exactly_and_workers_to_their_nodes():
    manifest, placement = placed("pytorchjob.yaml")
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    master, worker = _pod_templates(rendered)
    assert master["spec"]["nodeSelector"] == {"kubernetes.io/hostname": placement.pod_nodes[0]}
    terms = worker["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == sorted(set(placement.pod_nodes[1:]))
    worker_env = {item["name"] for item in worker["spec"]["containers"][0]["env"]}
    assert "RANK" not in worker_env and "MESHFIT_RANK_ORDER" in worker_env


SCHEMA_BREAKS = [
    ("unknown-pod-field", lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
     .update(nodeSelectr={}), "unknown field of V1PodSpec"),
    ("unknown-replica-type", lambda o: o["spec"]["pytorchReplicaSpecs"].update(Chief={"template": {}}), "Chief"),
    ("unknown-spec-field", lambda o: o["spec"].update(replicaSpecs={}), "replicaSpecs"),
    ("env-value-not-string", lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
     .update(env=[{"name": "X", "value": 1}]), "expected str"),
]


@pytest.mark.parametrize("breaker,message", [b[1:] for b in SCHEMA_BREAKS], ids=[b[0] for b in SCHEMA_BREAKS])
def test_schema_rejects_what_the_api_server_would(breaker, message):
    manifest, placement = placed("pytorchjob.yaml")
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    breaker(rendered)
    with pytest.raises(SchemaError, match=message):
        validate_rendered(rendered)


def test_required_core_fields_are_checked():
    with pytest.raises(SchemaError, match="required field 'name'"):
        check_k8s({"spec": {"containers": [{"image": "x"}]}}, "V1PodTemplateSpec", "template")


def test_cli_render_round_trip_and_mismatch(tmp_path):
    manifest, placement = placed("jobset.yaml")
    placement_file = tmp_path / "placement.json"
    placement_file.write_text(json.dumps(placement.to_json()))
    out = tmp_path / "rendered.yaml"
    result = runner.invoke(app, ["render", "--job", str(JOBS / "jobset.yaml"), "--placement", str(placement_file),
                                 "--to", str(out)])
    assert result.exit_code == 0, result.output
    validate_rendered(yaml.safe_load(out.read_text()))
    assert placement_from_json(manifest, placement.to_json()).pod_nodes == placement.pod_nodes
    result = runner.invoke(app, ["render", "--job", str(JOBS / "pytorchjob.yaml"), "--placement", str(placement_file)])
    assert result.exit_code == 2 and "placement file is for job" in result.output


def _with_meshfit_scheduler(manifest: dict) -> dict:
    for template in _pod_templates(manifest):
        template.setdefault("spec", {})["schedulerName"] = "meshfit"
    return manifest


@pytest.mark.parametrize("job_file", ["pytorchjob.yaml", "jobset.yaml"], ids=["pytorchjob", "jobset"])
def test_rendered_pods_use_the_default_scheduler(job_file):
    manifest, placement = placed(job_file)
    (rendered,) = handoff_for_manifest(manifest).render(_with_meshfit_scheduler(manifest), placement)
    assert all("schedulerName" not in template["spec"] for template in _pod_templates(rendered))


@pytest.mark.parametrize("job_file,nodes,warned", [
    ("jobset.yaml", 16, None),
    ("pytorchjob.yaml", 16, "PyTorchJob Worker replicas share one pod template: pods 1-3"),
    ("trainjob.yaml", 16, "TrainJob podSpecOverrides apply to every trainer pod"),
], ids=["jobset-exact", "pytorchjob-workers", "trainjob-multinode"])
def test_cli_render_warns_about_what_it_cannot_pin(tmp_path, job_file, nodes, warned):
    _, placement = placed(job_file, nodes)
    placement_file = tmp_path / "placement.json"
    placement_file.write_text(json.dumps(placement.to_json()))
    result = runner.invoke(app, ["render", "--job", str(JOBS / job_file), "--placement", str(placement_file)])
    assert result.exit_code == 0, result.output
    assert [doc["kind"] for doc in yaml.safe_load_all(result.stdout)] == [read_manifest(JOBS / job_file)["kind"]]
    if warned is None:
        assert result.stderr == ""
    else:
        assert result.stderr.startswith("warning: ") and warned in result.stderr
