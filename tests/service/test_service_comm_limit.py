"""The extender honours `meshfit.io/max-comm-ratio`: no pod of a gang gets a node while the only layout is too slow."""

from __future__ import annotations

from tests.service.helpers import filter_nodes, gang_pod, make_node, make_pod, make_service


def two_racks_one_free_node_each():
    """2 racks x 2 nodes x 8 GPUs; one node per rack fully used by a bound pod."""
    nodes = [make_node(f"n-{r}-{i}", 8, f"rack-{r}", "block-0") for r in range(2) for i in range(2)]
    pods = [make_pod(f"busy-{r}", 8, node=f"n-{r}-0", phase="Running") for r in range(2)]
    return nodes, pods


def limited_member(index: int, ratio: str) -> dict:
    pod = gang_pod("tp16", index, 2, parallelism="tp=16")
    pod["metadata"]["annotations"]["meshfit.io/max-comm-ratio"] = ratio
    return pod


def test_gang_waits_while_its_tensor_group_would_cross_racks_then_places_when_a_rack_frees():
    nodes, pods = two_racks_one_free_node_each()
    service = make_service(nodes, policy="meshfit", pods=pods)
    reply = service.filter(limited_member(0, "1"))
    assert filter_nodes(reply) == []
    reason = next(iter(reply["FailedNodes"].values()))
    assert "default/tp16" in reason and "max-comm-ratio 1" in reason and "waiting" in reason
    assert service.client.get("/reservations").json() == []
    assert service.state.topology.gpus_free == 16

    loose = make_service(nodes, policy="meshfit", pods=pods)
    assert len(filter_nodes(loose.filter(limited_member(0, "4")))) == 1  # a looser limit accepts the split layout

    service.state.delete_pod("default", "busy-1")
    [node] = filter_nodes(service.filter(limited_member(1, "1")))
    [entry] = service.client.get("/reservations").json()
    assert set(entry["pods"].values()) == {"n-1-0", "n-1-1"} and entry["pods"]["tp16-1"] == node
