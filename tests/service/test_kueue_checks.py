"""meshfit's Kueue admission check controller against the in-memory state: Active, Ready (with the very
reservation the pods then bind to), Pending with the gang's reason, Retry on a lapse, Rejected, releases."""

from __future__ import annotations

import pytest

from scheduler.service.kueue.kueue_checks import PENDING, READY, REJECTED, RETRY, KueueCheckController
from tests.service.helpers import filter_nodes, make_nodes, make_service

NS = "ml"


class RecordingWriter:
    """Records the controller's writes and applies them to the state's copy (as the watch would)."""

    def __init__(self, state) -> None:
        self.state, self.active, self.states = state, [], []

    def set_active(self, name, version, generation, message, since=None) -> None:
        self.active.append(name)
        check = self.state.get_object("kueue.x-k8s.io/AdmissionCheck", "default", name)
        check["status"] = {"conditions": [{"type": "Active", "status": "True", "observedGeneration": generation}]}

    def set_check_state(self, namespace, name, version, check, state, message, since=None) -> None:
        self.states.append((name, check, state, message))
        workload = self.state.get_object("kueue.x-k8s.io/Workload", namespace, name)
        for entry in workload["status"]["admissionChecks"]:
            if entry["name"] == check:
                entry.update(state=state, message=message)


def job(name: str, pods: int) -> dict:
    """An Indexed Job of `pods` completions."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods}}


def workload(name: str, pods: int, gpus: int = 8, quota: bool = True, required: str | None = None) -> dict:
    """The v1beta2 Workload Kueue makes for job `name`, quota reserved, meshfit's check Pending."""
    annotations = {"meshfit.io/parallelism": f"tp={gpus},dp={pods}"}
    if required:
        annotations["kueue.x-k8s.io/podset-required-topology"] = required
    template = {"metadata": {"annotations": annotations}, "spec": {"containers": [
        {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}
    status: dict = {"admissionChecks": [{"name": "topo", "state": "Pending", "message": ""}]}
    if quota:
        status["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": pods}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{name}-abc", "namespace": NS, "uid": f"wl-{name}", "creationTimestamp": "t",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-{name}",
                                              "controller": True}]},
            "spec": {"podSets": [{"name": "main", "count": pods, "template": template}]}, "status": status}


@pytest.fixture
def env():
    """A 2 x 4 x 8-GPU service, meshfit's AdmissionCheck `topo`, a controller with a recording writer."""
    service = make_service(make_nodes(racks=2, nodes_per_rack=4), policy="meshfit")
    service.state.upsert_object({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
                                 "metadata": {"name": "topo", "generation": 1},
                                 "spec": {"controllerName": "meshfit.io/topology"}})
    writer = RecordingWriter(service.state)
    controller = KueueCheckController(service.scheduler, writer, clock=service.clock)
    return service, writer, controller


def submit(service, name: str, pods: int, **kwargs) -> dict:
    """The Job and its quota-reserved Workload, as the watch shows them."""
    service.state.upsert_object(job(name, pods))
    body = workload(name, pods, **kwargs)
    service.state.upsert_object(body)
    return body


def last_state(writer, name: str) -> tuple[str, str]:
    """(state, message) last written for job `name`'s Workload."""
    return next((s, m) for wl, _, s, m in reversed(writer.states) if wl == f"job-{name}-abc")


def test_check_is_activated_once(env):
    service, writer, controller = env
    controller.pass_once()
    controller.pass_once()
    assert writer.active == ["topo"]


def test_ready_reserves_the_gang_its_pods_then_bind_to(env):
    service, writer, controller = env
    submit(service, "train", 4)
    controller.pass_once()
    state, message = last_state(writer, "train")
    assert state == READY and "gang ml/train: 4 pods x 8 GPUs reserved by meshfit" in message
    entry = service.state.ledger.get("ml/train")
    reserved = [entry.node_of(i) for i in range(4)]
    pod = {"metadata": {"name": "train-2-x", "namespace": NS, "uid": "p2",
                        "labels": {"batch.kubernetes.io/job-completion-index": "2"},
                        "annotations": {"batch.kubernetes.io/job-completion-index": "2",
                                        "meshfit.io/parallelism": "tp=8,dp=4"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}]},
           "spec": {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
           "status": {"phase": "Pending"}}
    assert filter_nodes(service.filter(pod)) == [reserved[2]]
    controller.pass_once()
    assert [s for _, _, s, _ in writer.states] == [READY]  # nothing rewritten


def test_pending_with_the_gangs_reason_then_ready_when_room_frees(env):
    service, writer, controller = env
    submit(service, "big", 6)
    controller.pass_once()
    submit(service, "more", 4)
    controller.pass_once()
    state, message = last_state(writer, "more")
    assert state == PENDING and message.startswith("gang ml/more (4 pods x 8 GPUs) does not fit")
    assert service.state.ledger.get("ml/more") is None
    service.state.delete_object("kueue.x-k8s.io/Workload", NS, "job-big-abc")  # the big job went away
    controller.pass_once()
    assert service.state.ledger.get("ml/big") is None  # released: no pod ever held it
    controller.pass_once()
    assert last_state(writer, "more")[0] == READY


def test_a_gang_larger_than_the_cluster_is_rejected(env):
    service, writer, controller = env
    submit(service, "huge", 9)
    controller.pass_once()
    state, message = last_state(writer, "huge")
    assert state == REJECTED and "whole cluster holds at most 8 such pods" in message


def test_a_required_domain_smaller_than_the_gang_is_rejected(env):
    service, writer, controller = env
    submit(service, "wide", 6, required="network.topology.nvidia.com/leaf")
    controller.pass_once()
    assert last_state(writer, "wide")[0] == REJECTED


def test_a_lapsed_reservation_asks_kueue_to_retry(env):
    service, writer, controller = env
    submit(service, "slow", 2)
    controller.pass_once()
    assert last_state(writer, "slow")[0] == READY
    service.clock.advance(service.state.ledger.ttl_seconds + 1)
    service.scheduler.sweep()
    controller.pass_once()
    state, message = last_state(writer, "slow")
    assert state == RETRY and "lapsed before its pods were bound" in message


def test_no_answer_before_quota_is_reserved(env):
    service, writer, controller = env
    submit(service, "queued", 2, quota=False)
    controller.pass_once()
    assert writer.states == [] and service.state.ledger.get("ml/queued") is None
