"""Volcano extender verbs: enqueue veto, predicate steering, prioritize, whole-gang victims."""

from __future__ import annotations

import pytest

from tests.service.helpers import gang_pod, make_pod, make_service


def task(pod: dict, uid: str | None = None) -> dict:
    """An api.TaskInfo as Volcano marshals it (Go field names)."""
    meta = pod["metadata"]
    return {"UID": uid or meta["uid"], "Job": f"{meta['namespace']}/job", "Name": meta["name"],
            "Namespace": meta["namespace"], "NodeName": pod["spec"].get("nodeName", ""), "Pod": pod}


def job(name: str, min_member: int, gpus_total: int, tasks: dict | None = None, parallelism: str | None = None) -> dict:
    """An api.JobInfo with its PodGroup (flattened metadata/spec)."""
    annotations = {"meshfit.io/parallelism": parallelism} if parallelism else {}
    return {"UID": f"default/{name}", "Name": name, "Namespace": "default", "MinAvailable": min_member,
            "Tasks": tasks, "PodGroup": {"metadata": {"name": name, "namespace": "default", "annotations": annotations},
                                         "spec": {"minMember": min_member,
                                                  "minResources": {"nvidia.com/gpu": str(gpus_total)}}}}


@pytest.mark.parametrize("min_member,gpus,status", [(4, 32, 1), (9, 72, -1), (2, 0, 0)],
                         ids=["fits", "too-big", "no-gpus"])
def test_job_enqueueable_vetoes_jobs_the_topology_cannot_place(min_member, gpus, status):
    service = make_service()
    reply = service.client.post("/volcano/jobEnqueueable", json={"job": job("j", min_member, gpus)})
    assert reply.status_code == 200 and reply.json() == {"status": status}
    assert service.state.topology.gpus_free == 64


def test_a_typo_in_a_podgroups_meshfit_key_vetoes_the_job_instead_of_placing_it_as_written():
    service = make_service()
    bad = job("j", 4, 32)
    bad["PodGroup"]["metadata"]["annotations"]["meshfit.io/paralellism"] = "tp=8,pp=4"
    reply = service.client.post("/volcano/jobEnqueueable", json={"job": bad})
    assert reply.status_code == 200 and reply.json() == {"status": -1}
    assert service.client.post("/volcano/jobEnqueueable", json={"job": job("j", 4, 32)}).json() == {"status": 1}


def test_job_enqueueable_reads_gang_from_a_task_pod():
    service = make_service()
    pod = gang_pod("big", 0, 9)
    reply = service.client.post("/volcano/jobEnqueueable", json={"job": job("big", 9, 0, {"t0": task(pod)})})
    assert reply.json() == {"status": -1}


def test_predicate_steers_each_task_to_its_reserved_node():
    service = make_service()
    nodes = sorted(service.state.topology.node_by_name)
    pods = [gang_pod("vc", i, 3) for i in range(3)]
    accepted = {}
    for pod in pods:
        for node in nodes:
            reply = service.client.post("/volcano/predicate", json={"task": task(pod), "node": {"Name": node}}).json()
            if reply["code"] == 0:
                accepted.setdefault(pod["metadata"]["name"], []).append(node)
            else:
                assert reply["code"] == 2 and reply["status"]
    reserved = service.client.get("/reservations").json()[0]["pods"]
    assert accepted == {name: [node] for name, node in reserved.items()}


def test_prioritize_scores_the_reserved_node_highest():
    service = make_service()
    pod = gang_pod("vc", 0, 1)
    service.scheduler.filter(pod, sorted(service.state.topology.node_by_name))
    reserved = service.client.get("/reservations").json()[0]["pods"]["vc-0"]
    body = {"task": task(pod), "nodes": [{"Name": n} for n in ("n-0-0", "n-1-3", reserved)]}
    scores = service.client.post("/volcano/prioritize", json=body).json()
    assert scores["errorMessage"] == "" and scores["nodeScore"][reserved] == 100.0
    assert sorted(scores["nodeScore"].values())[:-1] == [0.0, 0.0][: len(scores["nodeScore"]) - 1]


def test_preemptable_never_hands_over_part_of_a_gang():
    members = [gang_pod("old", i, 2, node=f"n-0-{i}", phase="Running") for i in range(2)]
    loner = make_pod("loner", 8, node="n-0-2", phase="Running")
    service = make_service(pods=[*members, loner])
    body = {"evictor": task(make_pod("vip")), "evictees": [task(members[0]), task(loner)]}
    reply = service.client.post("/volcano/preemptable", json=body).json()
    assert reply["status"] == 1 and [v["Name"] for v in reply["victims"]] == ["loner"]
    body["evictees"].append(task(members[1]))
    reply = service.client.post("/volcano/reclaimable", json=body).json()
    assert sorted(v["Name"] for v in reply["victims"]) == ["loner", "old-0", "old-1"]


@pytest.mark.parametrize("verb,reply", [("onSessionOpen", {}), ("onSessionClose", {}),
                                        ("jobReady", {"status": True}), ("queueOverused", {"overused": False})],
                         ids=["open", "close", "ready", "overused"])
def test_session_and_bookkeeping_verbs_answer(verb, reply):
    service = make_service()
    body = {"Jobs": {}, "Nodes": {}, "Queues": {}, "NamespaceInfo": {}, "RevocableNodes": {}, "NodeList": []}
    assert service.client.post(f"/volcano/{verb}", json=body).json() == reply
