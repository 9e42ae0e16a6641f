"""`MemberFit`: where a gang's pending members fit besides their GPUs (cpu, memory, pods, taints, selectors), as
meshfit's direct binder works it out per member, so no member is reserved on a node it could never be bound to; and
`gang_members`, the known members of a gang."""

from __future__ import annotations

from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.cache.state import ClusterState
from scheduler.placement.jobs import Gang

MemberNodes = Callable[[PodRecord], dict[str, int] | None]
"""Node -> GPUs members like this one can take there besides their other requests (None: not known, any node)."""


def gang_members(state: ClusterState, gang_key: str) -> list[PodRecord]:
    """Known members of a gang (call under the lock)."""
    return list(state.gang_index.get(gang_key, {}).values())


def any_node(record: PodRecord) -> dict[str, int] | None:
    """`MemberNodes` without a direct binder: not known, so any node."""
    return None


class MemberFit:
    """Nodes a gang's pending members fit on besides GPUs, and the GPUs they can take there (call under the lock)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.member_nodes: MemberNodes = any_node
        """Node -> GPUs members like this one can take there besides their other requests (None: not known, any
        node); see `scheduler.service.binding.member_room`.  The direct binder's, once `use_direct_binder` is called."""

    def use_direct_binder(self, member_nodes: MemberNodes) -> None:
        """Members' room per node is worked out by meshfit's direct binder (built after the lifecycle)."""
        self.member_nodes = member_nodes

    def pending(self, gang_key: str, record: PodRecord | None = None) -> list[PodRecord]:
        """The gang's unbound members (with `record`, which may not be indexed yet)."""
        found = {r.uid: r for r in gang_members(self.state, gang_key) if not r.node}
        if record is not None:
            found[record.uid] = record
        return list(found.values())

    def allowed_nodes(self, members: list[PodRecord], offered: frozenset[str] | None) -> frozenset[str] | None:
        """The nodes a gang may be placed on: those offered (None: any) where each of its pending `members` also
        fits on everything besides GPUs (cpu, memory, pods, taints, selectors: `member_nodes`), so no member is
        reserved on a node it could never be bound to."""
        return self.member_room(members, offered)[0]

    def member_room(self, members: list[PodRecord], offered: frozenset[str] | None
                    ) -> tuple[frozenset[str] | None, dict[str, int]]:
        """`allowed_nodes`, and node -> the most GPUs the gang's members can take there together (each member's
        other requests counted once per member placed; `member_nodes`).  Members asking the same are checked once."""
        allowed, caps, asked = offered, {}, set()
        if any(r.member is not None and r.member.constraint.pod_domains for r in members):
            return offered, caps  # Kueue pinned each member to its own node: its admission already decided where
        for record in members:
            needs = record.needs
            key = repr(needs) if needs is not None else None
            if key is None or key in asked:
                continue
            asked.add(key)
            room = self.member_nodes(record)
            if room is None:
                continue
            allowed = frozenset(room) if allowed is None else allowed & frozenset(room)
            for name, gpus in room.items():
                caps[name] = min(gpus, caps.get(name, gpus))
        return allowed, caps

    def unfit_note(self, gang: Gang, offered: frozenset[str] | None, allowed: frozenset[str] | None) -> str:
        """"; N node(s) with free GPUs ..." when nodes with room for a member's GPUs were left out because the member
        does not fit there otherwise (cpu, memory, pods, taints, selectors), else ""."""
        if allowed is None or allowed == offered:
            return ""
        left_out = sum(1 for name, node in self.state.topology.node_by_name.items()
                       if node.gpus_free >= gang.gpus_per_pod and name not in allowed
                       and (offered is None or name in offered))
        return (f"; {left_out} node(s) with {gang.gpus_per_pod} free GPUs have no room for a member's other requests "
                f"(cpu, memory, pods) or fail its node constraints") if left_out else ""
