"""The two gauges the monitoring component's alerts need besides the counters: `meshfit_gang_oldest_seconds{state}`
(MeshfitGangWaitingTooLong) and `meshfit_leader` (MeshfitNoLeader / MeshfitMultipleLeaders)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.helpers import gang_pod
from tests.service.test_gang_lifecycle import bind_gang, delete_gang, service_with


def samples(service, name: str) -> dict[tuple, float]:
    """{label values: value} of one metric family on the service's /metrics."""
    text = service.client.get("/metrics").text
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == name]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def oldest(service, state: str) -> float:
    """meshfit_gang_oldest_seconds of one state."""
    return samples(service, "meshfit_gang_oldest_seconds")[(("state", state),)]


def test_the_oldest_waiting_gang_age_grows_until_it_is_reserved():
    service, _ = service_with(nodes=4, preemption=False)
    assert oldest(service, "waiting") == 0.0  # no gang: 0, so max() over replicas stays defined
    blocker = bind_gang(service, "blocker", 4)
    service.clock.advance(5.0)
    service.filter(gang_pod("first", 0, 2))
    service.clock.advance(100.0)
    service.filter(gang_pod("second", 0, 2))
    service.clock.advance(20.0)
    assert oldest(service, "waiting") == 120.0  # `first` arrived 120 s ago, `second` 20 s ago
    assert oldest(service, "bound") == 125.0  # the blocker, since its first member reached meshfit
    delete_gang(service, blocker)
    service.scheduler.tick()  # room: both waiting gangs are reserved
    assert oldest(service, "waiting") == 0.0
    assert samples(service, "meshfit_gang_queue")[(("state", "waiting"),)] == 0.0


def test_meshfit_leader_is_1_without_election_and_follows_the_elector_with_it():
    service, _ = service_with(nodes=2)
    assert samples(service, "meshfit_leader") == {(): 1.0}  # the one replica answers every verb
    serving = [False]
    service.metrics.watch_leadership(lambda: serving[0])
    assert samples(service, "meshfit_leader") == {(): 0.0}  # a standby, or a leader still re-listing
    serving[0] = True
    assert samples(service, "meshfit_leader") == {(): 1.0}
