"""Leader election (`scheduler.kube.leader`): flags, the standby gate, and two electors on a real Lease.

The election tests run against the real kube-apiserver of `tests/realk8s` (its `control_plane` and
`kube` fixtures; skipped without the binaries): the API double serves no coordination.k8s.io.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from scheduler.kube.leader import (
    DEFAULT_NAMESPACE, LeaderElector, LeaderOptions, StandbyGate, default_namespace, leader_flags_problem,
)
from tests.realk8s.conftest import control_plane, k8s_install, kube  # noqa: F401 - fixtures for the election tests

FAST = dict(lease_duration=3.0, renew_deadline=2.0, retry_period=1.0)


# ----- flags ------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, fragment", [
    (LeaderOptions(retry_period=0.5), "retry-period must be >= 1"),
    (LeaderOptions(renew_deadline=2.0, retry_period=2.0), "renew-deadline (2s) must be greater than 1.2"),
    (LeaderOptions(lease_duration=10.0, renew_deadline=10.0), "lease-duration (10s) must be greater"),
    (LeaderOptions(lease_duration=15.5), "whole seconds"),
    (LeaderOptions(lease_duration=float("nan")), "finite"),
    (LeaderOptions(name="Bad_Name"), "lease-name"),
    (LeaderOptions(namespace="NS"), "namespace"),
])
def test_bad_leader_flags_are_one_line_reasons(options, fragment):
    reason = leader_flags_problem(options, embedded=False)
    assert fragment in reason and "\n" not in reason


def test_good_leader_flags_and_defaults(tmp_path: Path):
    assert leader_flags_problem(None, embedded=True) == ""
    assert leader_flags_problem(LeaderOptions(), embedded=False) == ""
    assert "real mode" in leader_flags_problem(LeaderOptions(), embedded=True)
    assert default_namespace(tmp_path / "missing") == DEFAULT_NAMESPACE
    (tmp_path / "ns").write_text("scheduling\n")
    assert default_namespace(tmp_path / "ns") == "scheduling"
    resolved = LeaderOptions().resolved()
    assert resolved.identity.endswith(f"_{__import__('os').getpid()}") and resolved.namespace


# ----- the gate ---------------------------------------------------------------------------------

class FakeElector:
    def __init__(self) -> None:
        self.on = False

    def serving(self) -> bool:
        return self.on

    def standby_reason(self) -> str:
        return "meshfit standby x: Lease ns/meshfit is held by y; send verbs to the leader"


def test_standby_answers_verbs_and_readyz_with_503_until_serving():
    from starlette.testclient import TestClient

    async def verb(_):
        return PlainTextResponse("decided")

    inner = Starlette(routes=[Route("/filter", verb, methods=["POST"]), Route("/readyz", verb),
                              Route("/metrics", verb)])
    elector = FakeElector()
    client = TestClient(StandbyGate(inner, elector, verb_paths=["/filter"]))
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.text.startswith("meshfit standby")
    answer = client.post("/filter", content=b"{}")
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert "held by y" in answer.json()["error"]
    assert client.get("/metrics").status_code == 200  # observability stays up on a standby
    elector.on = True
    assert client.post("/filter", content=b"{}").text == "decided"
    assert client.get("/readyz").status_code == 200


# ----- two electors on a real Lease -------------------------------------------------------------

def elector(kube, identity: str, lost: list, started: list | None = None) -> LeaderElector:
    callbacks = [lambda: started.append((identity, time.monotonic()))] if started is not None else []
    return LeaderElector(kube.api_client, LeaderOptions(kube.namespace, "meshfit", identity, **FAST), callbacks,
                         on_lost=lambda reason: lost.append((identity, time.monotonic(), reason)))


def wait_for(check, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - began


def halt(*electors: LeaderElector) -> None:
    """Silence electors at a test's end (their threads are daemons that cannot be joined)."""
    for e in electors:
        e.stopping = True
        e.lock.released = True


def test_one_leads_and_the_other_takes_over_after_the_leader_stops_renewing(kube):
    from kubernetes.client import CoordinationV1Api

    lost, started = [], []
    a = elector(kube, "replica-a", lost, started).start()
    b = None
    try:
        wait_for(a.serving, 10, "replica-a to lead")
        b = elector(kube, "replica-b", lost, started).start()
        time.sleep(2 * FAST["lease_duration"])  # a renews: b stays a standby all along
        assert a.serving() and not b.is_leader() and not b.serving()
        assert b.holder() == "replica-a" and "held by replica-a" in b.standby_reason()
        lease = CoordinationV1Api(kube.api_client).read_namespaced_lease("meshfit", kube.namespace)
        assert lease.spec.holder_identity == "replica-a" and lease.spec.lease_duration_seconds == 3
        assert lease.spec.lease_transitions == 0

        a.lock.released = True  # replica-a "hangs": it can no longer reach the Lease
        stopped = time.monotonic()
        wait_for(b.serving, 4 * FAST["lease_duration"], "replica-b to take over")
        took_over = next(t for who, t in started if who == "replica-b")
        # a gave up (stopped serving) before b could win: never two leaders at once
        assert [who for who, *_ in lost] == ["replica-a"] and not a.serving()
        assert lost[0][1] < took_over, (lost, started)
        assert lost[0][1] - stopped <= FAST["renew_deadline"] + 1.0
        assert took_over - stopped <= FAST["lease_duration"] + 2 * FAST["retry_period"] + 1.0
        lease = CoordinationV1Api(kube.api_client).read_namespaced_lease("meshfit", kube.namespace)
        assert lease.spec.holder_identity == "replica-b" and lease.spec.lease_transitions == 1
    finally:
        halt(a, *([b] if b else []))


def test_a_released_lease_is_taken_over_within_a_retry_period(kube):
    lost: list = []
    a = elector(kube, "replica-a", lost).start()
    b = None
    try:
        wait_for(a.serving, 10, "replica-a to lead")
        b = elector(kube, "replica-b", lost).start()
        time.sleep(1.5)
        a.shutdown()  # graceful: stop and release
        assert not a.serving()
        waited = wait_for(b.serving, FAST["lease_duration"], "replica-b after the release")
        assert waited <= 2 * FAST["retry_period"] + 0.5 and lost == []
    finally:
        halt(a, *([b] if b else []))


def test_only_one_of_several_racing_candidates_wins(kube):
    lost: list = []
    candidates = [elector(kube, f"replica-{i}", lost) for i in range(4)]
    try:
        threads = [threading.Thread(target=c.start) for c in candidates]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_for(lambda: any(c.serving() for c in candidates), 10, "a leader")
        for _ in range(20):  # for a few renew periods: always exactly one
            assert sum(c.is_leader() for c in candidates) == 1
            time.sleep(0.2)
    finally:
        halt(*candidates)
