"""Real workload controllers in the loop: every gang here is an Indexed batch/v1 Job, and the members meshfit
evicts (rollback, failed-node replacement, whole-gang preemption, elastic shrink) are recreated by the real Job
controller of kube-controller-manager, not by the test.

The Job: completionMode Indexed, completions = parallelism = gang size, `schedulerName: meshfit`, GPU requests
and `meshfit.io/parallelism` on the pod template; meshfit's `indexed-job` gang source reads the completion index.
What the Job controller does that a test "playing the controller" did not:

- its pods are named `<job>-<index>-<random>`: a recreated member has a new name and uid (the tests follow
  members by completion index, never by name);
- its pods carry the `batch.kubernetes.io/job-tracking` finalizer: an evicted pod (meshfit deletes with the
  grace period; `KubeletStandIn` finishes the delete as a kubelet would) stays Terminating, still holding its
  GPUs, until the controller has counted it, and with `backoffLimitPerIndex` until its index's replacement
  exists; the replacement is created while it terminates (default `podReplacementPolicy: TerminatingOrFailed`);
- every eviction counts as a failed pod (with the default `backoffLimit: 6` one rollback or preemption of a gang
  of more than 6 pods fails the whole Job, BackoffLimitExceeded: `backoffLimit` is high here), and the
  replacement waits the controller's failure backoff: the 1.26 controller recreates a deleted pod at once; 1.35
  waits 10 s x 2^(failures-1) job-wide (a 4-pod gang evicted at once: 80 s), or 10 s for each index's first
  failure with `backoffLimitPerIndex`, which these tests set where the API has it (1.29+).

End states are asserted strictly (every completion index has exactly one live pod; the gang is bound whole with
the same `meshfit.io/ranks` per index, or waits whole with nothing bound; no evicted pod left; no GPU
over-committed at any poll), and each test prints the time from meshfit's eviction to the gang whole again
(`pytest -s`).  A member whose container fails (phase Failed; the Job controller keeps the pod and creates a new
one for its index) is re-placed too: its new pod takes the slot (this was a meshfit bug, fixed with this test).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.realk8s.binaries import BUILD_COMMAND, absent
from tests.realk8s.cluster_builders import create_indexed_job, create_nodes, ensure_priority_class
from tests.realk8s.scenario import meshfit_events
from tests.realk8s.job_gangs import (
    ELASTIC, GPUS, MASTER_ADDR, RANKS, REQUEUED_AT, JobGang, expected_ranks, gang_row, hold_steady, node_down,
    node_up, rank_table, ranks_by_index, reasons, report, watch,
)

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="the real Job controller and the nomination kept at bind differ by version")]

@pytest.fixture
def job_options(kube) -> dict:
    """Job options for this version (skips when kube-controller-manager is absent: nobody would recreate pods).

    Waits first until the pods of earlier tests are gone: a Job's pods keep their tracking finalizer until the
    Job controller drops it, so the wipe's deletes can leave them bound to node names the next test reuses."""
    plane = kube.control_plane
    if plane.controller_manager is None:
        absent(f"no kube-controller-manager in {plane.bin_dir}: no real Job controller to recreate members "
               f"({BUILD_COMMAND} builds it)")
    earlier = set(plane.namespaces) - {kube.namespace}
    deadline = time.monotonic() + 60
    while left := [f"{p.metadata.namespace}/{p.metadata.name}" for p in kube.core.list_pod_for_all_namespaces().items
                   if p.metadata.namespace in earlier]:
        assert time.monotonic() < deadline, f"pods of earlier tests still present after 60 s: {left[:10]}"
        time.sleep(0.5)
    # per-index failure backoff (10 s per evicted index) where the API has it; job-wide on 1.26
    return {"backoff_limit_per_index": 1000} if plane.install.at_least(1, 29) else {}


def test_losing_pod_0s_node_rolls_the_job_back_and_the_job_controller_recreates_it_whole(
        kube, meshfit_scheduler, job_options):
    size = 4
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1"])
    create_indexed_job(kube.api_client, kube.namespace, "train", size, GPUS, **job_options)
    gang = lambda: JobGang(kube, "train", size)  # noqa: E731
    before, _ = watch(kube, stack, "the Job bound whole", lambda: gang().whole(), describe=lambda: gang().describe())
    uids = gang().uids()
    assert ranks_by_index(kube, "train", size) == expected_ranks(size)

    lost = before[0]  # pod 0's node (the rendezvous every member was told) is deleted
    kube.core.delete_node(lost)
    lost_at = time.monotonic()
    _, evicted_at = watch(kube, stack, "the whole gang evicted",
                          lambda: not set(uids.values()) & {p.metadata.uid for p in gang().members().values()}
                          or None, describe=lambda: gang().describe())
    after, whole_at = watch(kube, stack, "the recreated Job bound whole again", lambda: gang().whole(),
                            timeout=120.0, describe=lambda: gang().describe())
    after = hold_steady(kube, stack, "the Job whole", lambda: gang().whole())

    assert lost not in after.values() and len(set(after.values())) == size, after
    assert not set(gang().uids().values()) & set(uids.values())  # every member is a pod the controller recreated
    assert ranks_by_index(kube, "train", size) == expected_ranks(size)  # ranks follow the index
    members = gang().members()
    assert {p.metadata.annotations[MASTER_ADDR] for p in members.values()} == {after[0]}  # the new rendezvous
    assert "GangRolledBack" in reasons(kube)
    report("rollback", kube.control_plane.install.test_id, node_lost_to_eviction=evicted_at - lost_at,
           eviction_to_whole=whole_at - evicted_at)


def test_a_job_that_cannot_complete_is_rolled_back_and_waits_whole_until_room_frees(
        kube, meshfit_scheduler, job_options):
    size = 4
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=4)  # no room to replace a lost member
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1", "--gang-completion-timeout", "8"])
    create_indexed_job(kube.api_client, kube.namespace, "train", size, GPUS, **job_options)
    gang = lambda: JobGang(kube, "train", size)  # noqa: E731
    before, _ = watch(kube, stack, "the Job bound whole", lambda: gang().whole(), describe=lambda: gang().describe())
    uids = gang().uids()

    failed = before[2]
    node_down(kube, failed)  # member 2 is lost with nowhere to go: the gang waits incomplete, then times out
    _, lost_at = watch(kube, stack, "member 2 evicted", lambda: gang().uids().get(2) != uids[2] or None,
                       describe=lambda: gang().describe())
    _, rolled_at = watch(kube, stack, "the rest of the gang evicted (rollback)",
                         lambda: not set(uids.values()) & set(gang().uids().values()) or None,
                         describe=lambda: gang().describe())
    _, waiting_at = watch(kube, stack, "the recreated Job waiting whole", lambda: gang().waiting_whole(),
                          timeout=120.0, describe=lambda: gang().describe())
    hold_steady(kube, stack, "the Job waiting whole",
                lambda: gang().waiting_whole() and tuple(sorted(gang().uids().values())))
    assert {"GangMembersLost", "GangRolledBack"} <= set(reasons(kube)), reasons(kube)

    node_up(kube, failed)  # room again: the waiting gang is placed whole
    repaired_at = time.monotonic()
    after, whole_at = watch(kube, stack, "the Job whole again", lambda: gang().whole(), timeout=60.0,
                            describe=lambda: gang().describe())
    hold_steady(kube, stack, "the Job whole", lambda: gang().whole())
    assert sorted(after.values()) == sorted(before.values())
    assert ranks_by_index(kube, "train", size) == expected_ranks(size)
    report("completion-timeout rollback", kube.control_plane.install.test_id,
           member_lost_to_rollback=rolled_at - lost_at, rollback_to_waiting_whole=waiting_at - rolled_at,
           repaired_to_whole=whole_at - repaired_at)


def test_members_on_failed_nodes_are_recreated_by_the_job_controller_with_their_ranks(
        kube, meshfit_scheduler, job_options):
    size = 4
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1"])
    create_indexed_job(kube.api_client, kube.namespace, "train", size, GPUS, **job_options)
    gang = lambda: JobGang(kube, "train", size)  # noqa: E731
    before, _ = watch(kube, stack, "the Job bound whole", lambda: gang().whole(), describe=lambda: gang().describe())
    uids = gang().uids()
    ranks = ranks_by_index(kube, "train", size)
    assert ranks == expected_ranks(size)

    failed = {1: before[1], 3: before[3]}  # not pod 0's: the rendezvous stays
    node_down(kube, failed[1])  # NotReady
    kube.core.patch_node(failed[3], {"spec": {"unschedulable": True}})  # cordoned
    failed_at = time.monotonic()
    _, evicted_at = watch(kube, stack, "members 1 and 3 evicted",
                          lambda: all(gang().uids().get(i) != uids[i] for i in failed) or None,
                          describe=lambda: gang().describe())
    after, whole_at = watch(kube, stack, "the Job whole again", lambda: gang().whole(), timeout=120.0,
                            describe=lambda: gang().describe())
    after = hold_steady(kube, stack, "the Job whole", lambda: gang().whole())

    now = gang().uids()
    assert {i for i in range(size) if now[i] != uids[i]} == set(failed)  # only the lost members were recreated
    assert {i: after[i] for i in (0, 2)} == {i: before[i] for i in (0, 2)}  # survivors untouched
    assert not set(after.values()) & set(failed.values()) and len(set(after.values())) == size, after
    assert ranks_by_index(kube, "train", size) == ranks  # same ranks per completion index
    members = gang().members()
    assert {p.metadata.annotations[MASTER_ADDR] for p in members.values()} == {before[0]}  # same rendezvous
    assert "GangMembersReplaced" in reasons(kube) and "GangRolledBack" not in reasons(kube)
    # the two failures are seen in one pass or in two (NotReady and the cordon reach the watch apart under load:
    # CI saw "[1] replaced", then "[3] replaced" a second later); the row shows the latest replacement
    assert set(gang_row(stack, f"{kube.namespace}/train")["replacement"]["pods"]) in ({1, 3}, {3}, {1})
    report("replacement", kube.control_plane.install.test_id, node_failed_to_eviction=evicted_at - failed_at,
           eviction_to_whole=whole_at - evicted_at)


def container_fails(kube, pod: Any, exit_code: int = 1) -> None:
    """What a kubelet reports when the pod's only container exits non-zero (restartPolicy Never): phase Failed.
    The pod is not deleted: the Job controller keeps failed pods as history and creates a new one for the index."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kube.core.patch_namespaced_pod_status(pod.metadata.name, kube.namespace, {"status": {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": exit_code, "reason": "Error",
                                                        "startedAt": now, "finishedAt": now}}}]}})


def test_a_member_whose_container_fails_is_recreated_by_the_job_controller_and_rebound_with_its_rank(
        kube, meshfit_scheduler, job_options):
    size = 4
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)
    stack = meshfit_scheduler()
    create_indexed_job(kube.api_client, kube.namespace, "train", size, GPUS, **job_options)
    gang = lambda: JobGang(kube, "train", size)  # noqa: E731
    before, _ = watch(kube, stack, "the Job bound whole", lambda: gang().whole(), describe=lambda: gang().describe())
    uids = gang().uids()
    ranks = ranks_by_index(kube, "train", size)

    container_fails(kube, gang().member(2))  # the Job controller counts it failed and recreates index 2
    failed_at = time.monotonic()
    _, recreated_at = watch(kube, stack, "member 2 recreated", lambda: gang().uids().get(2, uids[2]) != uids[2] or None,
                            describe=lambda: gang().describe())
    after, whole_at = watch(kube, stack, "the Job whole again", lambda: gang().whole(), timeout=10.0,
                            describe=lambda: gang().describe())
    after = hold_steady(kube, stack, "the Job whole", lambda: gang().whole())
    now = gang()
    assert {i for i in range(size) if now.uids()[i] != uids[i]} == {2}
    assert {i: after[i] for i in (0, 1, 3)} == {i: before[i] for i in (0, 1, 3)}
    assert ranks_by_index(kube, "train", size) == ranks
    [failed] = now.finished  # the failed pod stays, as history, and nobody schedules it again
    assert failed.metadata.uid == uids[2]
    # no requeue and no nomination elsewhere; a 1.26 apiserver keeps the nomination meshfit wrote before binding it
    # (1.35 clears it at bind: ClearingNominatedNodeNameAfterBinding), which names its own node
    assert failed.status.nominated_node_name in (None, "", failed.spec.node_name)
    assert REQUEUED_AT not in (failed.metadata.annotations or {})
    report("container failure", kube.control_plane.install.test_id, failure_to_recreated=recreated_at - failed_at,
           recreated_to_whole=whole_at - recreated_at)


def test_a_preempted_job_is_recreated_by_the_job_controller_and_waits_whole(kube, meshfit_scheduler, job_options):
    size = 4
    create_nodes(kube.core, 4, gpus=GPUS, leaf_size=4)  # room for one 4-pod gang
    ensure_priority_class(kube.api_client, "low", 10)
    ensure_priority_class(kube.api_client, "high", 1000)
    stack = meshfit_scheduler()
    create_indexed_job(kube.api_client, kube.namespace, "victim", size, GPUS, priority_class="low", **job_options)
    victim = lambda: JobGang(kube, "victim", size)  # noqa: E731
    urgent = lambda: JobGang(kube, "urgent", size)  # noqa: E731
    both = lambda: f"{victim().describe()}\n{urgent().describe()}"  # noqa: E731
    watch(kube, stack, "the victim Job bound whole", lambda: victim().whole(), describe=both)
    uids = victim().uids()

    create_indexed_job(kube.api_client, kube.namespace, "urgent", size, GPUS, priority_class="high", **job_options)
    created_at = time.monotonic()
    _, evicted_at = watch(kube, stack, "the victim evicted whole",
                          lambda: not set(uids.values()) & set(victim().uids().values()) or None, describe=both)
    _, urgent_at = watch(kube, stack, "the urgent Job bound whole", lambda: urgent().whole(), describe=both)
    _, waiting_at = watch(kube, stack, "the victim recreated and waiting whole", lambda: victim().waiting_whole(),
                          timeout=120.0, describe=both)
    hold_steady(kube, stack, "urgent whole, victim waiting whole",
                lambda: (urgent().whole(), victim().waiting_whole(), tuple(sorted(victim().uids().values()))))
    assert not set(victim().uids().values()) & set(uids.values())
    events = meshfit_events(kube.core, kube.namespace)
    assert len({pod for pod, reason, _ in events if reason == "GangPreempted"}) == size, events

    # the urgent Job finishes: the recreated victim is placed whole on the freed nodes
    from kubernetes.client import BatchV1Api
    BatchV1Api(kube.api_client).delete_namespaced_job("urgent", kube.namespace, propagation_policy="Background")
    finished_at = time.monotonic()
    _, back_at = watch(kube, stack, "the victim whole again", lambda: victim().whole(), timeout=120.0,
                       describe=both)
    hold_steady(kube, stack, "the victim whole", lambda: victim().whole())
    assert ranks_by_index(kube, "victim", size) == expected_ranks(size)
    report("preemption", kube.control_plane.install.test_id, urgent_created_to_eviction=evicted_at - created_at,
           eviction_to_urgent_whole=urgent_at - evicted_at, eviction_to_victim_waiting_whole=waiting_at - evicted_at,
           urgent_deleted_to_victim_whole=back_at - finished_at)


def test_an_elastic_job_shrinks_by_whole_replicas_and_the_job_controller_recreates_the_dropped_pods(
        kube, meshfit_scheduler, job_options):
    size = 8
    create_nodes(kube.core, 8, gpus=GPUS, leaf_size=8)  # exactly dp=8: no room to replace a lost member
    stack = meshfit_scheduler(meshfit_args=["--unhealthy-grace", "1"])
    create_indexed_job(kube.api_client, kube.namespace, "el", size, GPUS, annotations={ELASTIC: "dp=2..8"},
                       **job_options)
    gang = lambda: JobGang(kube, "el", size)  # noqa: E731
    before, _ = watch(kube, stack, "the elastic Job bound whole at dp=8", lambda: gang().whole(),
                      describe=lambda: gang().describe())
    uids = gang().uids()
    ranks = ranks_by_index(kube, "el", size)

    failed = before[5]  # no free node: the top replica (index 7) is dropped, index 5 takes its node
    node_down(kube, failed)
    failed_at = time.monotonic()
    _, evicted_at = watch(kube, stack, "members 5 and 7 evicted",
                          lambda: all(gang().uids().get(i) != uids[i] for i in (5, 7)) or None,
                          describe=lambda: gang().describe())

    def shrunk() -> dict | None:
        now = gang()
        table = rank_table(kube, "el")
        if not now.complete() or now.bound_prefix() != 7 or table is None or table["elastic"]["dp"] != 7:
            return None
        return now.nodes()

    after, whole_at = watch(kube, stack, "the elastic Job whole at dp=7", shrunk, timeout=120.0,
                            describe=lambda: f"{gang().describe()}\nrank table {rank_table(kube, 'el')}")
    after = hold_steady(kube, stack, "the elastic Job whole at dp=7", shrunk)
    table = rank_table(kube, "el")
    assert table["world_size"] == 56 and table["elastic"] == {"min_dp": 2, "max_dp": 8, "dp": 7, "generation": 2}
    assert [p["node"] for p in table["pods"]] == [after[i] for i in range(7)]
    assert after[5] == before[7] and after[7] is None and failed not in after.values()
    assert {i: after[i] for i in range(7) if i != 5} == {i: before[i] for i in range(7) if i != 5}  # untouched
    now = gang().uids()
    assert {i for i in range(size) if now[i] != uids[i]} == {5, 7}
    members = gang().members()
    assert {i: members[i].metadata.annotations[RANKS] for i in range(7)} == {i: ranks[i] for i in range(7)}
    assert RANKS not in (members[7].metadata.annotations or {})  # pod 7 waits beyond the size, unbound
    assert any(r == "GangResized" for r in reasons(kube))
    report("elastic-shrink", kube.control_plane.install.test_id, node_failed_to_eviction=evicted_at - failed_at,
           eviction_to_whole_at_dp7=whole_at - evicted_at)

    # the node is repaired: the gang grows back to dp=8 with the pod the controller recreated
    node_up(kube, failed)
    repaired_at = time.monotonic()

    def grown() -> dict | None:
        now, table = gang(), rank_table(kube, "el")
        return now.whole() if table is not None and table["elastic"]["dp"] == 8 else None

    regrown, grown_at = watch(kube, stack, "the elastic Job whole at dp=8 again", grown, timeout=60.0,
                              describe=lambda: gang().describe())
    assert regrown[7] == failed and rank_table(kube, "el")["elastic"]["generation"] == 3
    assert ranks_by_index(kube, "el", size) == ranks
    report("elastic-grow", kube.control_plane.install.test_id, repaired_to_whole_at_dp8=grown_at - repaired_at)
