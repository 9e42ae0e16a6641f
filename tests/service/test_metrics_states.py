"""`GET /metrics` answers 200 in every gang state, and a failing collector never turns a scrape into a 500."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.helpers import Service, filter_nodes, gang_pod, make_service


def scrape(service: Service) -> dict[tuple[str, tuple], float]:
    """GET /metrics (asserting 200) as {(sample name, sorted labels): value}."""
    response = service.client.get("/metrics")
    assert response.status_code == 200, response.text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def gangs(samples: dict, status: str) -> float:
    """`meshfit_gangs{status}`."""
    return samples[("meshfit_gangs", (("status", status),))]


def reserve_pair(service: Service, name: str = "pair") -> tuple[list[dict], list[str]]:
    """Filter both pods of a 2-pod gang; returns the pods and their reserved nodes."""
    pods = [gang_pod(name, i, 2) for i in range(2)]
    nodes = [filter_nodes(service.filter(pod))[0] for pod in pods]
    return pods, nodes


def test_scrape_of_an_empty_service():
    samples = scrape(make_service())
    assert gangs(samples, "pending") == 0 and samples[("meshfit_gpus_free", ())] == 64


def test_scrape_while_a_gang_waits_because_it_does_not_fit():
    service = make_service()
    reply = service.filter(gang_pod("big", 0, 512, parallelism="tp=8,dp=512"))
    assert filter_nodes(reply) == [] and reply["FailedNodes"]
    samples = scrape(service)
    assert gangs(samples, "pending") == 1 and gangs(samples, "reserved") == 0


def test_scrape_of_reserved_partly_bound_and_bound_gangs():
    service = make_service()
    pods, nodes = reserve_pair(service)
    samples = scrape(service)
    assert gangs(samples, "reserved") == 1 and samples[("meshfit_gpus_free", ())] == 48
    assert service.bind(pods[0], nodes[0])["Error"] == ""
    samples = scrape(service)
    assert gangs(samples, "reserved") + gangs(samples, "partial") == 1 and gangs(samples, "bound") == 0
    assert service.bind(pods[1], nodes[1])["Error"] == ""
    samples = scrape(service)
    assert gangs(samples, "bound") == 1 and gangs(samples, "pending") == 0


def test_scrape_after_a_reservation_expired_with_members_unbound():
    service = make_service(ttl=30.0)
    reserve_pair(service)
    service.clock.advance(31.0)
    assert service.scheduler.sweep() == ["default/pair"]
    samples = scrape(service)
    assert gangs(samples, "pending") == 1 and gangs(samples, "reserved") == 0
    assert samples[("meshfit_gpus_free", ())] == 64


def test_a_failing_collector_is_logged_counted_and_left_out(caplog):
    service = make_service()
    metrics = service.client.app.state.metrics

    class Broken:
        def collect(self):
            raise RuntimeError("collector exploded")

    metrics.register_collector(Broken(), "broken")
    scrape(service)
    samples = scrape(service)
    assert samples[("meshfit_scrape_errors_total", (("collector", "broken"),))] >= 1
    assert ("meshfit_gpus_free", ()) in samples
    assert "collector exploded" in caplog.text
