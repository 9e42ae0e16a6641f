"""Issue 26 item 5: a gang whose spec is invalid is visible everywhere, not only through the kubeconfig.

The service's `GET /gangs` (and so `meshfit gangs --url`) lists it as `invalid` with the hint, exactly as
`meshfit gangs` reading the cluster directly does; fixing or deleting the pod takes the row away.
"""

from __future__ import annotations

import copy
import json
import urllib.request

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.cli.gangs_direct import ClusterView, gang_rows
from tests.service.helpers import filter_nodes, gang_pod, make_pod, make_service

RUNNER = CliRunner()
TYPO = "meshfit.io/paralellism"
HINT = "did you mean meshfit.io/parallelism?"


def typo_pod(gang: str = "typo", index: int = 0, size: int = 2) -> dict:
    """A gang member whose parallelism annotation is misspelt (meshfit cannot read its gang)."""
    pod = gang_pod(gang, index, size, namespace="ml")
    pod["metadata"]["annotations"][TYPO] = "tp=8"
    pod["spec"]["schedulerName"] = "meshfit"
    return pod


def _rows(service) -> dict[str, dict]:
    response = service.client.get("/gangs")
    assert response.status_code == 200, response.text
    return {row["gang"]: row for row in response.json()["gangs"]}


def test_a_pod_meshfit_was_asked_about_shows_as_an_invalid_gang_with_the_hint():
    service = make_service()
    reply = service.filter(typo_pod())
    assert TYPO in reply["Error"]
    row = _rows(service)["ml/typo"]
    assert (row["state"], row["position"], row["pods"], row["bound"]) == ("invalid", None, 1, 0)
    assert row["reason"].startswith("not placed until fixed: ") and HINT in row["reason"]


def test_pods_from_the_watch_show_without_any_filter_call_and_match_the_kubeconfig_rows():
    pods = [typo_pod(index=0), typo_pod(index=1)]
    service = make_service(pods=copy.deepcopy(pods))
    served = _rows(service)
    direct = {row["gang"]: row for row in gang_rows(ClusterView(pods))}
    assert set(served) == set(direct) == {"ml/typo"}
    for field in ("state", "position", "priority", "pods", "gpus_per_pod", "bound", "reason"):
        assert served["ml/typo"][field] == direct["ml/typo"][field], field
    assert served["ml/typo"]["pods"] == 2


def test_one_bad_member_turns_its_gangs_row_invalid_and_no_second_row_appears():
    service = make_service()
    good = gang_pod("mixed", 0, 2, namespace="ml")
    assert filter_nodes(service.filter(good)), "the valid member reserves the gang"
    assert _rows(service)["ml/mixed"]["state"] == "reserved"
    service.filter(typo_pod("mixed", 1))
    response = service.client.get("/gangs").json()["gangs"]
    assert [row["gang"] for row in response].count("ml/mixed") == 1
    assert _rows(service)["ml/mixed"]["state"] == "invalid" and HINT in _rows(service)["ml/mixed"]["reason"]


@pytest.mark.parametrize("change", ["fixed", "finished", "deleted"])
def test_the_row_goes_once_the_pod_is_fixed_finished_or_deleted(change):
    pod = typo_pod()
    service = make_service(pods=[copy.deepcopy(pod)])
    assert _rows(service)["ml/typo"]["state"] == "invalid"
    if change == "fixed":
        del pod["metadata"]["annotations"][TYPO]
        service.state.upsert_pod(pod)
    elif change == "finished":
        pod["status"]["phase"] = "Failed"
        service.state.upsert_pod(pod)
    else:
        service.state.delete_pod("ml", "typo-0")
    assert _rows(service).get("ml/typo", {}).get("state") != "invalid"


def test_pods_that_are_not_meshfits_are_not_listed():
    other = make_pod("other", namespace="ml", labels={"training.kubeflow.org/job-name": "j",
                                                      "training.kubeflow.org/replica-type": "worker",
                                                      "training.kubeflow.org/replica-index": "zz"})
    service = make_service(pods=[other])
    assert service.state.pod("ml", "other").member_error, "its gang cannot be read"
    assert _rows(service) == {}


def test_metrics_count_invalid_gangs():
    service = make_service(pods=[typo_pod()])
    text = service.client.get("/metrics").text
    assert 'meshfit_gang_queue{state="invalid"} 1.0' in text


class _Response:
    """What `urllib.request.urlopen` returns, answered by the service's HTTP app in-process."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def read(self) -> bytes:
        """The response body."""
        return self.body

    def __enter__(self) -> "_Response":
        return self

    def __exit__(self, *exc) -> None:
        return None


@pytest.fixture
def served_url(monkeypatch):
    """`http://meshfit.test` answered by an embedded service holding an invalid gang (requests go through its app)."""
    service = make_service(pods=[typo_pod()])

    def urlopen(url: str, timeout: float = 0.0) -> _Response:
        assert url.startswith("http://meshfit.test/")
        response = service.client.get(url.removeprefix("http://meshfit.test"))
        assert response.status_code == 200
        return _Response(response.content)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return "http://meshfit.test"


def test_gangs_url_lists_the_invalid_gang_as_json_and_in_the_table(served_url):
    result = RUNNER.invoke(app, ["gangs", "--url", served_url, "-o", "json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["gangs"]
    assert row["gang"] == "ml/typo" and row["state"] == "invalid" and HINT in row["reason"]
    table = RUNNER.invoke(app, ["gangs", "--url", served_url, "-n", "ml"])
    assert table.exit_code == 0, table.output
    line = next(line for line in table.stdout.splitlines() if " typo " in line)
    assert "invalid" in line and "not placed until fixed" in line and HINT in line
