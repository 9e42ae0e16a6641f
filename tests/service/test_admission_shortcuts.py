"""Queue admission skips work that cannot change its answer: a fixed-size gang asking more GPUs than the cluster has
free is refused without working out its members' room on every node (a 5,000-node burst spent 12% of meshfit's busy
samples there), with the same reason as before; an elastic gang, which may start smaller, still gets it."""

from __future__ import annotations

from tests.service.helpers import filter_nodes
from tests.service.test_direct_binding import direct_service, members, watch


def watched_room(service, monkeypatch) -> list[str]:
    """The gang members whose room per node the lifecycle works out from now on."""
    asked, room = [], service.scheduler.lifecycle.fit.member_nodes

    def counting(record):
        asked.append(record.name)
        return room(record)

    monkeypatch.setattr(service.scheduler.lifecycle.fit, "member_nodes", counting)
    return asked


def test_a_gang_larger_than_the_free_gpus_is_refused_without_working_out_its_members_room(monkeypatch):
    service = direct_service()
    asked = watched_room(service, monkeypatch)
    free = service.state.topology.gpus_free
    big = members("big", free // 8 + 1)  # one 8-GPU member more than there is room for
    watch(service, big)
    reply = service.filter(big[0])
    assert filter_nodes(reply) == []
    reason = next(iter(reply["FailedNodes"].values()))
    assert "does not fit" in reason and f"only {free} free" in reason
    assert asked == []


def test_a_gang_that_fits_by_count_still_has_its_members_room_worked_out(monkeypatch):
    service = direct_service()
    asked = watched_room(service, monkeypatch)
    small = members("small", 2)
    watch(service, small)
    assert len(filter_nodes(service.filter(small[0]))) == 1
    assert asked  # checked before it was reserved


def test_an_elastic_gang_larger_than_the_free_gpus_at_its_largest_still_starts_smaller(monkeypatch):
    service = direct_service()
    asked = watched_room(service, monkeypatch)
    most = service.state.topology.gpus_free // 8 + 2  # its largest size does not fit; dp=1 does
    pods = members("grow", most)
    for pod in pods:
        pod["metadata"]["annotations"]["meshfit.io/elastic"] = f"dp=1..{most}"
    watch(service, pods)
    assert len(filter_nodes(service.filter(pods[0]))) == 1
    assert asked
