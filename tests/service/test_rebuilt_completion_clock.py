"""A new leader (or a restart) keeps a partly bound gang's completion deadline instead of starting it again (the
30-minute 1.26 soak: a gang partly bound 50.8 s against a 50 s limit after a fail-over restarted its clock)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from scheduler.gangs.restart import partly_bound_for
from scheduler.service.lifecycle.gang_repairs import REBUILT_GRACE_SECONDS

from tests.service.helpers import gang_pod, make_nodes, make_service

TIMEOUT = 30.0


def stamp(seconds_ago: float) -> str:
    """An API server timestamp `seconds_ago` (RFC 3339, whole seconds, as the API server writes them)."""
    return datetime.fromtimestamp(time.time() - seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bound_member(name: str, index: int, size: int, bound_ago: float) -> dict:
    """A member bound `bound_ago` seconds ago (its PodScheduled condition's transition)."""
    pod = gang_pod(name, index, size, node=f"n-0-{index}", phase="Running")
    pod["metadata"]["creationTimestamp"] = stamp(bound_ago + 5)
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(bound_ago)}]
    return pod


def pending_member(name: str, index: int, size: int, created_ago: float) -> dict:
    """A pending member created `created_ago` seconds ago."""
    pod = gang_pod(name, index, size)
    pod["metadata"]["creationTimestamp"] = stamp(created_ago)
    return pod


def rolled_back_after(pods: list[dict], seconds: list[float]) -> list[bool]:
    """Rebuild from `pods` (as a new leader does), then whether gang g is being rolled back after each of `seconds`."""
    service = make_service(make_nodes(racks=1, nodes_per_rack=8), pods=pods, rebuild=True, completion_timeout=TIMEOUT)
    seen, elapsed = [], 0.0
    for at in seconds:
        service.clock.advance(at - elapsed)
        elapsed = at
        service.scheduler.tick()
        seen.append(service.scheduler.lifecycle.is_rolling_back("default/g"))
    return seen


def test_a_gang_partly_bound_for_25_s_before_the_fail_over_is_rolled_back_5_s_plus_the_grace_after_it():
    pods = [bound_member("g", 0, 4, 25), bound_member("g", 1, 4, 25),
            pending_member("g", 2, 4, 31), pending_member("g", 3, 4, 31)]
    # before: the new leader counted 30 s from the rebuild (rolled back only after 31 s)
    assert rolled_back_after(pods, [REBUILT_GRACE_SECONDS - 1, REBUILT_GRACE_SECONDS + 2]) == [False, True]


def test_a_whole_gang_that_lost_a_member_counts_from_the_replacement_not_from_its_first_bind():
    pods = [bound_member("g", i, 4, 3600) for i in range(3)] + [pending_member("g", 3, 4, 6)]
    assert rolled_back_after(pods, [20.0, 26.0]) == [False, True]


def test_without_a_pending_member_the_clock_starts_at_the_rebuild():
    pods = [bound_member("g", 0, 4, 3600), bound_member("g", 1, 4, 3600)]  # the missing two not created yet
    assert rolled_back_after(pods, [29.0, 31.0]) == [False, True]


def test_partly_bound_for_ignores_what_cannot_say_and_pods_past_the_gang_size():
    from scheduler.cache.state import ClusterState  # noqa: PLC0415

    state = ClusterState()
    now = time.time()
    pods = [bound_member("g", 0, 2, 40), pending_member("g", 1, 2, 50), pending_member("g", 5, 2, 5)]
    pods[2]["metadata"]["annotations"]["meshfit.io/gang-size"] = "2"
    state.replace_all(make_nodes(racks=1, nodes_per_rack=8), pods, [])
    records = list(state.gang_index["default/g"].values())
    assert 39 <= partly_bound_for(records, 2, now) <= 42  # from the first bind; index 5 (an elastic leftover) ignored
    for record in records:
        record.since = "not a time"
    assert partly_bound_for(records, 2, now) is None
