"""`/readyz` in Kubernetes mode is false while the API server cannot be watched (a stale view)."""

from __future__ import annotations

from scheduler.cli import serve_cmd
from scheduler.kube import sync_once
from scheduler.cache.state import ClusterState
from tests.kube.kube_fixtures import eventually, make_node


def test_readiness_follows_the_health_of_the_watches(double, api_client, monkeypatch):
    double.create(make_node("n0"))
    state = ClusterState()
    assert not serve_cmd.kube_state_fresh(state)  # never listed
    cache = sync_once(state, api_client, watch_seconds=1).start()
    try:
        assert serve_cmd.kube_state_fresh(state)
        monkeypatch.setattr(serve_cmd, "STALE_AFTER_SECONDS", 0.2)
        double.stop()  # the API server goes away: every watch starts failing
        assert eventually(lambda: state.cache_failing_since is not None, timeout=15)
        assert eventually(lambda: not serve_cmd.kube_state_fresh(state), timeout=5)
    finally:
        cache.stop(timeout=1)


def test_a_stopped_double_serves_nothing_on_a_kept_alive_connection(double):
    """The readiness test above relies on this: a request on a pooled connection after `stop` fails."""
    import http.client

    host, port = double.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    connection.request("GET", "/api/v1/nodes")
    assert connection.getresponse().read()
    double.stop()
    try:
        connection.request("GET", "/api/v1/nodes")
        answered = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        answered = None
    assert answered is None
