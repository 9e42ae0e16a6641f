"""The placement engine's GPUs of bound pods are a projection of the room ledger's bound claims
(`scheduler.cache.gpu_projection`): they follow every claim change, survive a topology rebuild, and never lose a pod
recreated under the same name."""

from __future__ import annotations

from types import SimpleNamespace

from scheduler.cache.gpu_projection import GpuProjection
from scheduler.cache.room_ledger import ClaimState
from scheduler.cache.state import ClusterState
from scheduler.kube.node_fit import pod_needs
from tests.service.helpers import make_nodes, make_pod


def free(state: ClusterState, node: str) -> int:
    """The engine's free GPUs on `node`."""
    return state.topology.node_by_name[node].gpus_free


def state_reading_needs() -> ClusterState:
    """A state over 8 nodes x 8 GPUs that reads pods' node-local needs (Kubernetes mode)."""
    state = ClusterState()
    state.reader.needs_of = pod_needs
    state.replace_all(make_nodes(), [], [])
    return state


def test_a_bound_pod_holds_its_gpus_until_it_finishes_and_after_a_rebuild():
    state = state_reading_needs()
    state.upsert_pod(make_pod("p", 6, uid="U", node="n-0-0", phase="Running"))
    assert state.room.state_of("U") is ClaimState.BOUND and free(state, "n-0-0") == 2
    state.refresh_nodes()  # a new topology: projected afresh from the claims
    assert free(state, "n-0-0") == 2
    state.upsert_pod(make_pod("p", 6, uid="U", node="n-0-0", phase="Succeeded"))
    assert state.room.state_of("U") is None and free(state, "n-0-0") == 8


def test_a_returned_binding_holds_the_gpus_and_a_failed_one_gives_them_back():
    state = state_reading_needs()
    state.upsert_pod(make_pod("p", 8, uid="U"))
    assert free(state, "n-0-1") == 8
    state.record_binding("default", "p", "n-0-1")
    assert state.room.state_of("U") is ClaimState.BOUND_UNSEEN and free(state, "n-0-1") == 0
    state.room.clock = lambda: 1e12  # long after: the claim turns plainly bound, the engine's view unchanged
    state.room.age_unseen()
    assert state.room.state_of("U") is ClaimState.BOUND and free(state, "n-0-1") == 0
    state.unassume("default", "p")
    assert state.room.state_of("U") is None and free(state, "n-0-1") == 8


def test_a_pod_whose_needs_are_not_read_holds_gpus_but_no_room():
    state = ClusterState()  # embedded mode: needs are not read
    state.replace_all(make_nodes(), [make_pod("p", 8, uid="U", node="n-0-2", phase="Running")], [])
    assert free(state, "n-0-2") == 0
    assert state.room.state_of("U") is ClaimState.BOUND and state.room.totals() == {"all": {}, "meshfit": {}}
    state.delete_pod("default", "p")
    assert free(state, "n-0-2") == 8 and state.room.claim("U") is None


class Holdings:
    """A topology's holdings, recorded."""

    def __init__(self) -> None:
        self.node_by_name = {"a": object(), "b": object()}
        self.pods: dict[str, tuple[str, int]] = {}

    def add_pod(self, key: str, node_name: str, gpus: int) -> None:
        """Hold (replacing)."""
        self.pods[key] = (node_name, gpus)

    def remove_pod(self, key: str) -> bool:
        """Release."""
        return self.pods.pop(key, None) is not None


def claim(key: str, node: str, bound: bool = True) -> SimpleNamespace:
    """A claim of pod default/p (4 GPUs) under uid `key`."""
    record = SimpleNamespace(namespace="default", name="p", gpus=4)
    return SimpleNamespace(key=key, node=node, record=record, bound=bound)


def test_a_pod_recreated_under_its_name_keeps_its_hold_when_the_old_claim_goes():
    holdings, projection = Holdings(), GpuProjection(lambda c: c.bound)
    projection.attach(holdings, [])
    old, new = claim("U", "a"), claim("V", "b")
    projection.move(None, old)
    projection.move(None, new)  # the relist observed the new pod before dropping the old uid's claim
    projection.move(old, None)
    assert holdings.pods == {"pod:default/p": ("b", 4)}
    projection.move(new, claim("V", "b", bound=False))
    assert holdings.pods == {}
