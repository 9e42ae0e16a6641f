"""`meshfit launch` in pods without meshfit annotations: the rendered environment, the rank table, precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plugins.handoffs import handoff_for_manifest
from plugins.handoffs.podspec import pod_environment
from scheduler.handoff.assignment_sources import assignment_from_environment, resolve_assignment
from scheduler.cli import app
from scheduler.handoff.assignment import AssignmentError, annotations_for_pod, assignment_for_pod
from scheduler.handoff.launch import read_assignment
from scheduler.handoff.rank_table import parse_rank_table, rank_table_configmap, RANK_TABLE_KEY
from tests.runtime.test_handoff import make_placement
from tests.runtime.test_launch import write_downward
from tests.runtime.test_render import placed

runner = CliRunner()
MASTER = "job-master-0"


def container_env(template: dict) -> dict[str, str]:
    """The first container's literal env of a rendered pod template."""
    return {item["name"]: item["value"] for item in template["spec"]["containers"][0]["env"]}


def test_every_rendered_jobset_pod_env_yields_its_exact_assignment():
    manifest, placement = placed("jobset.yaml")
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    templates = [rjob["template"]["spec"]["template"] for rjob in rendered["spec"]["replicatedJobs"]]
    for index, template in enumerate(templates):
        env = container_env(template)
        assignment = assignment_from_environment(env)
        assert assignment == assignment_for_pod(placement, index, env["MASTER_ADDR"])


def test_shared_pytorchjob_worker_template_uses_the_operators_node_rank():
    manifest, placement = placed("pytorchjob.yaml")
    (rendered,) = handoff_for_manifest(manifest).render(manifest, placement)
    workers = rendered["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert int(workers.get("replicas", 1)) > 1, "the fixture must share one template between workers"
    env = container_env(workers["template"])
    assert "MESHFIT_POD_INDEX" not in env and "RANK" not in env
    last = len(placement.gang.pods) - 1
    assignment = assignment_from_environment({**env, "PET_NODE_RANK": str(last)})
    assert assignment == assignment_for_pod(placement, last, env["MASTER_ADDR"])


def exact_env(index: int = 1) -> dict[str, str]:
    """The environment `meshfit render` pins on pod `index` of the test placement (tp=2,pp=2,dp=2 over 4 pods)."""
    return pod_environment(make_placement(), index, MASTER)


ENV_FAILURES = [
    ("no-parallelism", {"MESHFIT_PARALLELISM": None}, "missing MESHFIT_PARALLELISM"),
    ("rank-disagrees", {"RANK": "0"}, "RANK=0 disagrees"),
    ("pp-rank-disagrees", {"MESHFIT_PP_RANK": "1"}, "MESHFIT_PP_RANK=1 disagrees"),
    ("size-disagrees", {"MESHFIT_TP_SIZE": "4"}, "MESHFIT_TP_SIZE=4 disagrees"),
    ("index-outside-world", {"MESHFIT_POD_INDEX": "4", "RANK": None, "NODE_RANK": None, "PET_NODE_RANK": None},
     "outside world size 8"),
    ("no-index", {"MESHFIT_POD_INDEX": None, "PET_NODE_RANK": None}, "no pod index"),
    ("bad-port", {"MASTER_PORT": "http"}, "MASTER_PORT: expected an integer"),
    ("bad-order", {"MESHFIT_RANK_ORDER": "tp-zz-dp"}, "zz"),
]


@pytest.mark.parametrize("change,message", [f[1:] for f in ENV_FAILURES], ids=[f[0] for f in ENV_FAILURES])
def test_inconsistent_environment_fails_with_the_variable_named(change, message):
    env = {key: value for key, value in {**exact_env(), **change}.items() if value is not None}
    with pytest.raises(AssignmentError, match=message):
        assignment_from_environment(env)


def test_cli_prints_the_environment_of_a_rendered_pod(tmp_path):
    env = exact_env(2)
    result = runner.invoke(app, ["launch", "--annotations-file", str(tmp_path / "absent"), "--print-env",
                                 "-o", "json", "--local-rank", "1"], env=env)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["RANK"] == "5" and printed["WORLD_SIZE"] == "8" and printed["MASTER_ADDR"] == MASTER
    assert printed["MESHFIT_PP_RANK"] == env["MESHFIT_PP_RANK"]


def test_cli_without_any_source_exits_2_with_one_line(tmp_path):
    result = runner.invoke(app, ["launch", "--annotations-file", str(tmp_path / "absent"), "--", "true"],
                           env={"MESHFIT_GANG": ""})
    assert result.exit_code == 2
    assert "no rank assignment: cannot read" in result.output and len(result.output.strip().splitlines()) == 1


def test_annotations_file_wins_over_the_environment(tmp_path):
    placement = make_placement()
    path = write_downward(tmp_path / "annotations", annotations_for_pod(placement, 3, "node-0"))
    assignment, source = read_assignment(path, None, exact_env(1))
    assert (source, assignment.pod_index, assignment.master_addr) == ("annotations", 3, "node-0")


def test_template_annotations_alone_fall_through_to_the_environment(tmp_path):
    inherited = {"meshfit.io/parallelism": "tp=2,pp=2,dp=2", "meshfit.io/pod-index": "1", "team": "x"}
    path = write_downward(tmp_path / "annotations", inherited)
    assignment, source = read_assignment(path, None, exact_env(1))
    assert (source, assignment.pod_index) == ("environment", 1)


def test_rank_table_finds_the_pod_by_name_and_wins_over_the_environment(tmp_path):
    placement = make_placement()
    table_path = tmp_path / "ranks.json"
    table_path.write_text(rank_table_configmap(placement, "node-0")["data"][RANK_TABLE_KEY])
    env = {**exact_env(1), "MESHFIT_POD_INDEX": "", "PET_NODE_RANK": "", "HOSTNAME": "job-2"}
    assignment, source = read_assignment(tmp_path / "absent", table_path, env)
    assert (source, assignment.pod_index, assignment.master_addr) == ("rank-table", 2, "node-0")
    table = parse_rank_table(table_path.read_text())
    assert resolve_assignment(None, table, exact_env(1))[0].pod_index == 1  # the index in the environment
    with pytest.raises(AssignmentError, match="no pod index"):  # the table does not name a stranger
        resolve_assignment(None, table, {**env, "HOSTNAME": "stranger"})
