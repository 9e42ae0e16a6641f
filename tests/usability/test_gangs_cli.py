"""Issue 22 item 4: `meshfit gangs` shows bound/total, age, namespaces (-n, -A), watches, and reads the cluster
itself through the kubeconfig (the service's `/gangs` rows) as well as a running service (`--url`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from tests.k8s_double import ApiServerDouble
from tests.service.helpers import filter_nodes, gang_pod, make_service

RUNNER = CliRunner()
CREATED = "2026-01-02T03:04:05Z"


def _pod(name: str, namespace: str = "ml", gang: str | None = None, index: int = 0, size: int = 1,
         node: str | None = None, annotations: dict | None = None, labels: dict | None = None,
         message: str | None = None) -> dict:
    meta_labels = {"meshfit.io/gang": gang} if gang else {}
    meta_labels.update(labels or {})
    notes = {"meshfit.io/pod-index": str(index), "meshfit.io/gang-size": str(size), **(annotations or {})}
    status: dict = {"phase": "Running" if node else "Pending"}
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message, "lastTransitionTime": CREATED}]
    spec: dict = {"schedulerName": "meshfit",
                  "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": CREATED,
                         "labels": meta_labels, "annotations": notes},
            "spec": spec, "status": status}


def _pytorchjob_pods() -> list[dict]:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "llama", "namespace": "ml", "annotations": {"meshfit.io/parallelism": "tp=8,dp=2"}},
           "spec": {"pytorchReplicaSpecs": {role: {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}} for role in ("Master", "Worker")}}}
    pods = []
    for role in ("master", "worker"):
        pod = _pod(f"llama-{role}-0", message="gang ml/llama (2 pods x 8 GPUs) does not fit")
        pod["metadata"]["labels"] = {"training.kubeflow.org/job-name": "llama",
                                     "training.kubeflow.org/replica-type": role,
                                     "training.kubeflow.org/replica-index": "0"}
        pod["metadata"]["annotations"] = {}
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                               "name": "llama", "controller": True}]
        pods.append(pod)
    return [job, *pods]


def _cluster() -> list[dict]:
    bound = {"meshfit.io/gang": "ml/train", "meshfit.io/ranks": "0,1,2,3,4,5,6,7"}
    return [
        _pod("train-0", gang="train", size=2, node="n-0", annotations=bound),
        _pod("train-1", gang="train", index=1, size=2, message="waiting for its reserved node"),
        _pod("typo-0", gang="typo", annotations={"meshfit.io/paralellism": "tp=8"}),
        _pod("other-0", namespace="team-b", gang="other", node="n-1"),
        *_pytorchjob_pods(),
    ]


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory):
    """A kubeconfig (context namespace `ml`) for an API double holding `_cluster()`."""
    double = ApiServerDouble().start()
    for obj in _cluster():
        double.create(obj)
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "d", "cluster": {"server": double.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "d", "user": "u", "namespace": "ml"}}]}))
    yield path
    double.stop()


def _gangs(kubeconfig: Path, *args: str) -> dict[str, dict]:
    result = RUNNER.invoke(app, ["gangs", "--kubeconfig", str(kubeconfig), "-o", "json", *args])
    assert result.exit_code == 0, result.output
    return {row["gang"]: row for row in json.loads(result.stdout)["gangs"]}


def test_reads_the_cluster_through_the_kubeconfig_in_the_context_namespace(kubeconfig):
    rows = _gangs(kubeconfig)
    assert set(rows) == {"ml/train", "ml/typo", "ml/llama"}, "the context's namespace only"
    assert (rows["ml/train"]["state"], rows["ml/train"]["bound"], rows["ml/train"]["pods"]) == ("binding", 1, 2)
    assert rows["ml/llama"]["state"] == "waiting" and rows["ml/llama"]["position"] == 1
    assert rows["ml/llama"]["pods"] == 2 and "does not fit" in rows["ml/llama"]["reason"]
    assert rows["ml/typo"]["state"] == "invalid"
    assert "did you mean meshfit.io/parallelism?" in rows["ml/typo"]["reason"]


def test_namespace_flags_choose_like_kubectl(kubeconfig):
    assert set(_gangs(kubeconfig, "-n", "team-b")) == {"team-b/other"}
    assert set(_gangs(kubeconfig, "-A")) == {"ml/train", "ml/typo", "ml/llama", "team-b/other"}


def test_table_shows_bound_over_total_age_and_namespace(kubeconfig):
    result = RUNNER.invoke(app, ["gangs", "--kubeconfig", str(kubeconfig), "-A"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "state" in line)
    assert all(word in header for word in ("namespace", "gang", "bound", "age", "position"))
    train = next(line for line in result.stdout.splitlines() if " train " in line)
    assert "1/2" in train and "binding" in train and "d " in train  # created days ago


def test_url_mode_filters_the_service_rows_by_namespace(monkeypatch):
    from scheduler.cli import gangs_cmd

    service_rows = [{"gang": "ml/a", "state": "waiting", "position": 1, "priority": 0, "pods": 2,
                     "gpus_per_pod": 8, "arrived_at": time.time() - 90, "reason": "does not fit"},
                    {"gang": "x/b", "state": "bound", "position": None, "priority": 0, "pods": 1, "bound": 1,
                     "gpus_per_pod": 8, "reason": "all members bound"}]
    monkeypatch.setattr(gangs_cmd, "fetch_gangs", lambda url, timeout: service_rows)
    result = RUNNER.invoke(app, ["gangs", "--url", "http://svc:8888", "-n", "ml"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert " a " in result.stdout and " b " not in result.stdout
    line = next(line for line in result.stdout.splitlines() if " a " in line)
    assert "0/2" in line and "1m" in line


def test_watch_prints_again_only_when_rows_change():
    from scheduler.cli.gangs_cmd import watch

    answers = iter([[{"gang": "ml/a", "state": "waiting"}], [{"gang": "ml/a", "state": "waiting"}],
                    [{"gang": "ml/a", "state": "reserved"}]])
    shown = []
    watch(lambda: next(answers), shown.append, interval=0.001, rounds=3)
    assert [rows[0]["state"] for rows in shown] == ["waiting", "reserved"]


def test_watch_flag_is_accepted_and_bad_sources_are_one_line(tmp_path):
    missing = RUNNER.invoke(app, ["gangs", "--kubeconfig", str(tmp_path / "none"), "--watch"])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: ") and "--url" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_direct_rows_match_the_services_rows_for_the_same_pods():
    from scheduler.cli.gangs_direct import ClusterView, gang_rows

    service = make_service()
    pods = [gang_pod("g", i, 2, parallelism="tp=8,dp=2") for i in range(2)]
    [node] = filter_nodes(service.filter(pods[0]))
    service.bind(pods[0], node)
    big = gang_pod("big", 0, 9)
    reply = service.filter(big)
    served = {row["gang"]: row for row in service.client.get("/gangs").json()["gangs"]}
    pods[0]["spec"]["nodeName"] = node
    pods[0]["metadata"]["annotations"].update(service.binder.bindings[("default", "g-0")].annotations)
    big["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                    "message": next(iter(reply["FailedNodes"].values()))}]
    direct = {row["gang"]: row for row in gang_rows(ClusterView(pods + [big]))}
    for key in ("default/g", "default/big"):
        for field in ("gang", "state", "position", "priority", "pods", "gpus_per_pod"):
            assert direct[key][field] == served[key][field], (key, field)
    assert direct["default/g"]["bound"] == served["default/g"]["bound"] == 1
    assert served["default/big"]["reason"].split(" [")[0] in direct["default/big"]["reason"]


def test_kubectl_plugin_is_a_console_script():
    from scheduler.cli.gangs_cmd import gangs_table

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'kubectl-meshfit = "scheduler.cli:main"' in text
    assert gangs_table([], all_namespaces=False).columns[0].header == "gang"
