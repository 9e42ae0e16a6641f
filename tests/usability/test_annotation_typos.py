"""Issue 22 item 1: a misspelled `meshfit.io/*` key is an error with a did-you-mean hint, never ignored.

`meshfit place` exits 2; in the service the pod's gang membership fails (`PodRecord.member_error`), which
`/filter` returns as the pod's scheduling message, so the gang waits visibly instead of running with
the default layout.  Keys meshfit writes itself (bind, requeue, render) are known and never errors.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.gangs.membership import identify
from scheduler.handoff.manifests import gang_from_manifest
from scheduler.placement.jobs import JobSpecError
from tests.builders import make_nodelist, write_objects
from tests.service.helpers import filter_nodes, gang_pod, make_service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "example-pytorchjob.yaml"
RUNNER = CliRunner()


def _example(replace: tuple[str, str] | None = None) -> str:
    text = EXAMPLE.read_text()
    return text.replace(*replace) if replace else text


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    """A 32-node HGX H100 cluster file."""
    return write_objects(tmp_path_factory.mktemp("cluster"), make_nodelist("hgx-h100", nodes=32))


@pytest.mark.parametrize("typo,expected", [
    ("meshfit.io/paralellism", "did you mean meshfit.io/parallelism?"),
    ("meshfit.io/requried-level", "did you mean meshfit.io/required-level?"),
    ("meshfit.io/rank_order", "did you mean meshfit.io/rank-order?"),
], ids=["parallelism", "required-level", "rank-order"])
def test_place_refuses_a_misspelled_key_with_exit_2(cluster_file, tmp_path, typo, expected):
    right = typo.replace("paralellism", "parallelism").replace("requried", "required").replace("_", "-")
    job = tmp_path / "job.yaml"
    job.write_text(_example((right + ":", typo + ":")))
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job)])
    assert result.exit_code == 2, result.output
    assert f"unknown annotation {typo}; {expected}" in result.stderr
    assert "PyTorchJob ml/llama-70b" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_correct_example_still_places(cluster_file):
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(EXAMPLE), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert '"tp": 8' in result.stdout and '"pp": 4' in result.stdout


@pytest.mark.parametrize("edit,expected", [
    (lambda job: job["metadata"]["annotations"].__setitem__("meshfit.io/parallelism", ""),
     "annotation meshfit.io/parallelism is empty"),
    (lambda job: job["metadata"].setdefault("labels", {}).__setitem__("meshfit.io/parallelism", "tp=8"),
     "meshfit.io/parallelism is read from annotations, not labels"),
    (lambda job: job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"].__setitem__(
        "labels", {"meshfit.io/gnag": "x"}), "unknown label meshfit.io/gnag; did you mean meshfit.io/gang?"),
    (lambda job: job["metadata"]["annotations"].__setitem__("meshfit.io/zzz", "1"),
     "unknown annotation meshfit.io/zzz (meshfit reads: "),
], ids=["empty-value", "annotation-as-label", "template-label-typo", "nothing-close"])
def test_values_and_labels_are_checked_as_strictly_as_keys(edit, expected):
    job = yaml.safe_load(_example())
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {})
    edit(job)
    with pytest.raises(JobSpecError, match=re.escape(expected)):
        gang_from_manifest(job)


def test_service_refuses_to_place_a_gang_with_a_typo_and_says_why_in_the_scheduling_message():
    service = make_service()
    pod = gang_pod("typo", 0, 2, parallelism="tp=8,dp=2")
    pod["metadata"]["annotations"]["meshfit.io/paralellism"] = pod["metadata"]["annotations"].pop(
        "meshfit.io/parallelism")
    reply = service.filter(pod)
    assert filter_nodes(reply) == []
    assert reply["Error"] == ("pod default/typo-0: unknown annotation meshfit.io/paralellism; "
                              "did you mean meshfit.io/parallelism?")
    assert service.state.pod("default", "typo-0").member_error == reply["Error"]
    assert service.client.get("/reservations").json() == []


def test_service_reads_a_typo_on_the_owning_job_too():
    job = yaml.safe_load(_example(("meshfit.io/parallelism:", "meshfit.io/paralellism:")))
    job["metadata"]["uid"], job["metadata"]["resourceVersion"] = "job-uid", "1"
    pod = {"metadata": {"name": "llama-70b-worker-0", "namespace": "ml", "uid": "p1",
                        "labels": {"training.kubeflow.org/job-name": "llama-70b",
                                   "training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "0"},
                        "ownerReferences": [{"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1",
                                             "name": "llama-70b"}]},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    store = {("kubeflow.org/PyTorchJob", "ml", "llama-70b"): job}
    with pytest.raises(JobSpecError, match="did you mean meshfit.io/parallelism"):
        identify(pod, lambda kind, namespace, name: store.get((kind, namespace, name)))


def test_keys_meshfit_writes_are_never_errors():
    service = make_service()
    pod = gang_pod("ok", 0, 1, parallelism="tp=8,dp=1")
    pod["metadata"]["annotations"].update({"meshfit.io/reserved-node": "n-0-0", "meshfit.io/requeued-at": "1"})
    assert filter_nodes(service.filter(pod)), "a requeued member is still scheduled"
    bound = {"meshfit.io/gang": "g", "meshfit.io/pod-index": "0", "meshfit.io/ranks": "0,1",
             "meshfit.io/coords": "[]", "meshfit.io/world-size": "2", "meshfit.io/master-addr": "n",
             "meshfit.io/master-port": "29500", "meshfit.io/parallelism": "dp=2",
             "meshfit.io/rank-order": "tp-cp-ep-dp-pp", "meshfit.io/pod-nodes": "n"}
    from scheduler.placement.annotation_keys import check_meshfit_keys

    check_meshfit_keys(bound, {"meshfit.io/gang": "g", "meshfit.io/spares": "1"}, "pod")


NOT_KEYS = {"meshfit.io/topology"}
"""`meshfit.io/...` names that are not pod keys: the Kueue AdmissionCheck controllerName meshfit serves."""


def _literal_keys() -> set[str]:
    """Every `meshfit.io/<key>` string constant in the product's code (not tests), names in `NOT_KEYS` aside."""
    found: set[str] = set()
    for folder in ("scheduler", "plugins", "simulations", "topology"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.update(re.findall(r"^meshfit\.io/[a-z0-9-]+$", node.value))
    return found - NOT_KEYS


def test_every_key_the_code_uses_is_registered():
    from scheduler.placement.annotation_keys import KNOWN_KEYS

    literal = _literal_keys()
    assert {"meshfit.io/parallelism", "meshfit.io/reserved-node", "meshfit.io/requeued-at"} <= literal
    assert literal <= KNOWN_KEYS, f"register these in scheduler/placement/annotation_keys.py: {literal - KNOWN_KEYS}"


def test_every_user_annotation_is_documented():
    from scheduler.placement.annotation_keys import READ_ANNOTATIONS

    documented = set(re.findall(r"`(meshfit\.io/[a-z-]+)`", (ROOT / "docs" / "annotations.md").read_text()))
    assert set(READ_ANNOTATIONS) <= documented


@pytest.mark.parametrize("policy", ["first-fit", "random", "meshfit"], ids=str)
def test_a_misspelled_level_value_is_never_dropped_even_by_policies_that_ignore_constraints(cluster_file, tmp_path,
                                                                                        policy):
    job = tmp_path / "job.yaml"
    job.write_text(_example(("required-level: spine", "required-level: spien")))
    result = RUNNER.invoke(app, ["place", "--cluster", str(cluster_file), "--job", str(job), "--policy", policy])
    assert result.exit_code == 2, result.output  # bad input (issue 40), before any policy runs
    assert "unknown topology level 'spien'; did you mean 'spine'?" in result.stderr and result.stdout == ""
