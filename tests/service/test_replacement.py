"""Failure replacement and spares in process: members on failed nodes get new nodes with the same ranks."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from scheduler.gangs.health import NodeHealthSources
from scheduler.service.lifecycle.actions import MemoryActions
from scheduler.service.lifecycle.failures import FailureOptions
from tests.service.helpers import filter_nodes, gang_pod, make_nodes, make_service

RANKS = "meshfit.io/ranks"


def service_with(racks: int = 2, per_rack: int = 4, **failure_options):
    """A service over `racks` x `per_rack` 8-GPU nodes with failure handling (grace 0 unless given)."""
    actions = MemoryActions()
    failure_options.setdefault("grace_seconds", 0.0)
    service = make_service(make_nodes(racks=racks, nodes_per_rack=per_rack), actions=actions,
                           synchronous_actions=True, failures=FailureOptions(**failure_options))
    return service, actions


def bind_gang(service, name: str, size: int, annotations: dict | None = None) -> dict[int, str]:
    """Filter and bind every member; returns index -> node."""
    pods = [gang_pod(name, i, size, 8) for i in range(size)]
    for pod in pods:
        pod["metadata"]["annotations"].update(annotations or {})
        service.state.upsert_pod(pod)
    nodes = {}
    for i, pod in enumerate(pods):
        [node] = filter_nodes(service.filter(pod))
        assert service.bind(pod, node) == {"Error": ""}
        nodes[i] = node
    return nodes


def node_dict(service, name: str) -> dict:
    """A copy of the node as the watch last reported it."""
    return copy.deepcopy(service.state.nodes[name])


def fail_not_ready(service, name: str) -> None:
    """The node's kubelet reports Ready=False."""
    node = node_dict(service, name)
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    service.state.upsert_node(node)


def ranks_of(service, name: str) -> str:
    """The rank annotation the pod was bound with."""
    return service.binder.bindings[("default", name)].annotations[RANKS]


def recreate(service, name: str, index: int, size: int, uid: str, annotations: dict | None = None) -> str:
    """The controller recreates the evicted member (same name, new uid) after the old pod is gone;
    it filters and binds.  Returns its node."""
    service.state.delete_pod("default", f"{name}-{index}")
    service.binder.unbind("default", f"{name}-{index}")
    pod = gang_pod(name, index, size, 8, uid=uid)
    pod["metadata"]["annotations"].update(annotations or {})
    service.state.upsert_pod(pod)
    [node] = filter_nodes(service.filter(pod))
    assert service.bind(pod, node) == {"Error": ""}
    return node


def evicted(actions) -> list[str]:
    """Names of the pods evicted so far."""
    return [c.pod.name for c in actions.of("evict")]


def events(actions, reason: str) -> list[str]:
    """Messages of the Events with `reason`."""
    return [c.detail for c in actions.of("event") if c.reason == reason]


def assert_never_double_booked(service) -> None:
    """No node holds more GPUs than it has (pods, reservations and spares together), and nothing new is held
    on a failed node (its evicted pods may still hold their GPUs there until they are gone)."""
    topo = service.state.topology
    for node in topo.nodes:
        keys = [key for key, (i, _) in topo.pods.items() if i == node.index and not key.startswith("mask:")]
        if not node.schedulable:
            assert all(key.startswith("pod:") for key in keys), (node.name, keys)
            continue
        held = sum(topo.pods[key][1] for key in keys)
        assert held <= node.gpus_total, (node.name, held, topo.pods)


def metric(service, name: str, labels: str) -> float:
    """One sample of the /metrics exposition."""
    for line in service.client.get("/metrics").text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    raise AssertionError(f"{name}{{{labels}}} not exported")


def test_members_on_a_not_ready_node_are_replaced_in_the_same_rack_with_their_ranks():
    service, actions = service_with()
    placed = bind_gang(service, "g", 3)  # rack 0: three of its four nodes
    ranks = {i: ranks_of(service, f"g-{i}") for i in range(3)}
    failed = placed[1]
    fail_not_ready(service, failed)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]
    entry = service.state.ledger.get("default/g")
    new = entry.node_of(1)
    assert new not in placed.values() and new.startswith("n-0-")  # the rack's free node, next to its peers
    assert_never_double_booked(service)
    [message] = events(actions, "GangMembersReplaced")
    assert "predicted step communication" in message and "before" in message and "unknown" not in message
    row = next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/g")
    assert row["replacement"]["pods"] == [1] and row["replacement"]["to"] == [new]
    assert row["replacement"]["step_comm_seconds_before"] is not None
    assert row["replacement"]["step_comm_seconds_after"] is not None
    assert recreate(service, "g", 1, 3, "uid-new-1") == new
    assert ranks_of(service, "g-1") == ranks[1]  # same rank block, same launch annotations
    assert entry.status == "bound" and entry.node_of(0) == placed[0]  # the rendezvous never moved
    assert metric(service, "meshfit_member_replacements_total", 'source="not-ready"') == 1.0
    assert "default/g" in service.scheduler.rank_tables.due() or service.scheduler.publish_due() == 0


def _taint(node):
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu-xid", "value": "79", "effect": "NoExecute"}]


def _condition(node):
    node["status"]["conditions"].append({"type": "KernelDeadlock", "status": "True"})


def _label(node):
    node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-failed"


def _allocatable(node):
    node["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7"


def _cordon(node):
    node["spec"]["unschedulable"] = True


@pytest.mark.parametrize("change, source", [(_taint, "no-execute"), (_condition, "condition"), (_label, "label"),
                                            (_allocatable, "gpu-allocatable"), (_cordon, "cordoned")])
def test_every_failure_source_replaces_the_member(change, source):
    service, actions = service_with()
    placed = bind_gang(service, "g", 3)
    node = node_dict(service, placed[2])
    change(node)
    service.state.upsert_node(node)
    assert service.state.health.failed[placed[2]].source == source
    service.scheduler.tick()
    assert evicted(actions) == ["g-2"]
    assert service.state.ledger.get("default/g").node_of(2) not in placed.values()
    assert metric(service, "meshfit_member_replacements_total", f'source="{source}"') == 1.0
    assert_never_double_booked(service)


def test_a_deleted_node_counts_and_several_nodes_are_replaced_at_once():
    service, actions = service_with(racks=2, per_rack=6)
    placed = bind_gang(service, "g", 4)
    fail_not_ready(service, placed[1])
    service.state.delete_node(placed[3])
    service.scheduler.tick()
    assert sorted(evicted(actions)) == ["g-1", "g-3"]
    entry = service.state.ledger.get("default/g")
    moved = {entry.node_of(1), entry.node_of(3)}
    assert len(moved) == 2 and not moved & set(placed.values())
    assert {n.rsplit("-", 1)[0] for n in moved} == {placed[0].rsplit("-", 1)[0]}  # same rack as pod 0
    assert len(events(actions, "GangMembersReplaced")) == 1  # one batch, one report


def test_grace_is_respected_and_a_flapping_node_is_left_alone():
    service, actions = service_with(grace_seconds=10.0)
    placed = bind_gang(service, "g", 2)
    healthy = node_dict(service, placed[1])
    fail_not_ready(service, placed[1])
    service.clock.advance(6)
    service.scheduler.tick()
    assert evicted(actions) == []  # within the grace
    service.state.upsert_node(healthy)  # back Ready: the flap is over
    service.clock.advance(30)
    service.scheduler.tick()
    assert evicted(actions) == [] and service.state.ledger.get("default/g").node_of(1) == placed[1]
    fail_not_ready(service, placed[1])  # fails again: the grace counts from now
    service.clock.advance(9)
    service.scheduler.tick()
    assert evicted(actions) == []
    service.clock.advance(2)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]


def test_replacement_can_be_switched_off():
    service, actions = service_with(replace_unhealthy=False)
    placed = bind_gang(service, "g", 2)
    fail_not_ready(service, placed[1])
    service.scheduler.tick()
    assert evicted(actions) == [] and service.state.ledger.get("default/g").status == "bound"


def test_losing_pod_0_rolls_the_gang_back_whole():
    service, actions = service_with()
    placed = bind_gang(service, "g", 3)
    fail_not_ready(service, placed[0])
    service.scheduler.tick()
    assert sorted(evicted(actions)) == ["g-0", "g-1", "g-2"]
    assert service.state.ledger.get("default/g") is None
    assert events(actions, "GangRolledBack")


def test_with_no_room_the_gang_waits_incomplete_then_completes_when_room_frees():
    service, actions = service_with(racks=1, per_rack=4)
    placed = bind_gang(service, "g", 3)
    other = bind_gang(service, "other", 1)  # the fourth node
    fail_not_ready(service, placed[2])
    service.scheduler.tick()
    assert evicted(actions) == ["g-2"] and events(actions, "GangMembersLost")
    service.state.delete_pod("default", "g-2")
    service.binder.unbind("default", "g-2")
    service.scheduler.tick()
    row = next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/g")
    assert row["state"] == "incomplete"
    service.state.upsert_pod(gang_pod("g", 2, 3, 8, uid="uid-new-2"))  # recreated: waits at the queue's head
    service.scheduler.tick()
    row = next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/g")
    assert row["state"] == "waiting" and "ahead of every other gang" in row["reason"]
    assert_never_double_booked(service)
    service.state.delete_pod("default", "other-0")  # room frees
    service.scheduler.tick()
    assert service.state.ledger.get("default/g").node_of(2) == other[0]


def test_a_late_update_of_the_evicted_pod_leaves_the_new_slot_alone():
    service, _ = service_with()
    placed = bind_gang(service, "g", 3)
    fail_not_ready(service, placed[1])
    service.scheduler.tick()
    entry = service.state.ledger.get("default/g")
    new = entry.node_of(1)
    stale = gang_pod("g", 1, 3, 8, node=placed[1], phase="Running")  # the old pod, still terminating
    stale["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    service.state.upsert_pod(stale)
    assert entry.node_of(1) == new and entry.slots[1].state == "reserved"
    stale["status"]["phase"] = "Failed"
    service.state.upsert_pod(stale)
    assert entry.node_of(1) == new and entry.slots[1].state == "reserved"
    assert_never_double_booked(service)


def test_pool_spares_are_never_taken_by_ordinary_gangs_and_are_used_first_for_replacements():
    service, actions = service_with(spare_fraction=0.25)  # one spare per rack of four: n-0-3 and n-1-3
    service.scheduler.tick()
    assert sorted(service.scheduler.failures.spares.pool_nodes()) == ["n-0-3", "n-1-3"]
    listing = service.client.get("/spares").json()
    assert listing["pool"] == ["n-0-3", "n-1-3"] and listing["gpus_held"] == {"pool": 16, "gang": 0}
    assert metric(service, "meshfit_spare_gpus", 'kind="pool"') == 16.0
    placed = bind_gang(service, "g", 3)
    assert set(placed.values()) == {"n-0-0", "n-0-1", "n-0-2"}
    bind_gang(service, "h", 3)
    assert filter_nodes(service.filter(gang_pod("late", 0, 1, 8))) == []  # only spares are left: it waits
    fail_not_ready(service, placed[1])
    service.scheduler.tick()
    assert service.state.ledger.get("default/g").node_of(1) == "n-0-3"  # the rack's spare
    assert metric(service, "meshfit_spares_used_total", 'kind="pool"') == 1.0
    assert metric(service, "meshfit_spare_gpus", 'kind="pool"') == 8.0  # n-0-1 is failed: no refill in rack 0
    assert_never_double_booked(service)


def test_a_gangs_own_spares_are_held_near_it_and_used_first():
    service, actions = service_with(racks=2, per_rack=4)
    placed = bind_gang(service, "g", 2, annotations={"meshfit.io/spares": "1"})
    service.scheduler.tick()
    [hold] = service.scheduler.failures.spares.of_gang("default/g")
    assert hold.node.startswith("n-0-") and hold.node not in placed.values()
    assert metric(service, "meshfit_spare_gpus", 'kind="gang"') == 8.0
    row = next(r for r in service.client.get("/gangs").json()["gangs"] if r["gang"] == "default/g")
    assert row["spares"] == [hold.node]
    fail_not_ready(service, placed[1])
    service.scheduler.tick()
    assert service.state.ledger.get("default/g").node_of(1) == hold.node
    assert metric(service, "meshfit_spares_used_total", 'kind="gang"') == 1.0
    assert service.client.get("/spares").json()["used"] == {"pool": 0, "gang": 1}
    for i in range(2):
        service.state.delete_pod("default", f"g-{i}")  # the job ends: its spares go back
    service.scheduler.tick()
    assert service.scheduler.failures.spares.of_gang("default/g") == []


def test_a_bad_spares_annotation_is_a_one_line_error():
    service, _ = service_with()
    pod = gang_pod("g", 0, 2, 8)
    pod["metadata"]["annotations"]["meshfit.io/spares"] = "65"
    reply = service.filter(pod)
    assert "meshfit.io/spares" in reply["Error"] and "\n" not in reply["Error"]


@pytest.mark.parametrize("options", [{"grace_seconds": -1.0}, {"grace_seconds": float("nan")},
                                     {"spare_fraction": 0.9}, {"spare_fraction": float("inf")},
                                     {"grace_seconds": "10"}, {"bogus": 1}])
def test_hostile_failure_options_are_rejected(options):
    with pytest.raises(ValidationError):
        FailureOptions(**options)


@pytest.mark.parametrize("sources", [{"conditions": ("Bad Cond",)}, {"conditions": ("Ready=Maybe",)},
                                     {"labels": ("no-value",)}, {"labels": ("a b=c",)}, {"extra": True},
                                     {"conditions": tuple(f"C{i}" for i in range(65))}])
def test_hostile_health_sources_are_rejected(sources):
    with pytest.raises(ValidationError):
        NodeHealthSources(**sources)


def test_members_deleted_by_someone_else_still_get_the_spares():
    service, actions = service_with(spare_fraction=0.25, grace_seconds=300.0)  # meshfit itself waits
    service.scheduler.tick()  # the pool: n-0-3 and n-1-3
    placed = bind_gang(service, "g", 3)
    bind_gang(service, "h", 3)  # every non-spare node is taken
    fail_not_ready(service, placed[1])
    service.state.delete_pod("default", "g-1")  # the node controller (or an operator) deleted it
    service.binder.unbind("default", "g-1")
    service.scheduler.tick()
    assert evicted(actions) == []
    assert service.state.ledger.get("default/g").node_of(1) == "n-0-3"  # the rack's spare, not a wait
    assert recreate(service, "g", 1, 3, "uid-new-1") == "n-0-3"
    assert_never_double_booked(service)


def test_an_eviction_that_did_not_happen_is_retried_until_the_pod_is_gone():
    service, actions = service_with()
    placed = bind_gang(service, "g", 2)
    fail_not_ready(service, placed[1])
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]
    service.clock.advance(5)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1"]
    service.clock.advance(6)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1", "g-1"]  # still there 10 s later: evicted again
    service.state.delete_pod("default", "g-1")
    service.clock.advance(20)
    service.scheduler.tick()
    assert evicted(actions) == ["g-1", "g-1"]


def test_a_differently_named_replacement_may_arrive_before_the_old_pod_is_gone():
    service, actions = service_with()
    placed = bind_gang(service, "g", 3)
    ranks = ranks_of(service, "g-2")
    fail_not_ready(service, placed[2])
    service.scheduler.tick()
    new = service.state.ledger.get("default/g").node_of(2)
    pod = gang_pod("g", 2, 3, 8, uid="uid-g-2-b")  # an Indexed Job names its new pod afresh
    pod["metadata"]["name"] = "g-2-b"
    service.state.upsert_pod(pod)
    assert filter_nodes(service.filter(pod)) == [new]  # the old g-2 is still terminating on the failed node
    assert service.bind(pod, new) == {"Error": ""}
    assert ranks_of(service, "g-2-b") == ranks
    service.state.delete_pod("default", "g-2")  # the old pod finally goes: the new member keeps its slot
    entry = service.state.ledger.get("default/g")
    assert entry.status == "bound" and entry.slots[2].pod == "g-2-b" and entry.node_of(2) == new
    assert_never_double_booked(service)


def test_a_pod_bound_on_a_spare_by_someone_else_ends_that_spare_and_the_pool_refills_elsewhere():
    from tests.service.helpers import make_pod

    service, _ = service_with(spare_fraction=0.25)
    service.scheduler.tick()
    assert "n-0-3" in service.scheduler.failures.spares.pool_nodes()
    service.state.upsert_pod(make_pod("foreign", 8, node="n-0-3", phase="Running"))  # not scheduled by meshfit
    service.scheduler.tick()
    pool = service.scheduler.failures.spares.pool_nodes()
    assert "n-0-3" not in pool and "n-0-2" in pool  # the next wholly free node of the rack
    assert_never_double_booked(service)


def test_spares_endpoint_without_failure_handling():
    service = make_service()
    assert service.client.get("/spares").json()["enabled"] is False

