"""A stable index for gang members that carry none of their own (Kubernetes PodGroup members).

A `PodGroup` (`scheduling.k8s.io`) has no index of its own and most of its pods carry none, but meshfit's
rank blocks, reservations and replacements are all per index.  `choose_index` gives such a member
(`GangMembership.own_index` False) one, under the cluster state's lock, in this order:

1. the index the same pod (uid) already had, unless a live member took it meanwhile;
2. the ledger slot that already names this pod (a relist keeps the ledger, not the pod records);
3. a free index whose slot the ledger holds for a replacement (the deleted member's slot: same index, same node);
4. the lowest free index.

A member of a sub-group (`GangMembership.sub_group`: a PodGroup under a CompositePodGroup) chooses only inside its
sub-group's block of `constraint.slice_size` indexes: the block a sibling already holds, else the lowest block no
other sub-group holds.  Its slice is then its sub-group, which the placement keeps inside one domain of the slice
level, as kube-scheduler's group cycle requires of each sub-group.

Members being deleted (`terminating`) hold no index, so the pod replacing one gets its slot at once (and waits
there until the old pod is gone).  The index is written to the pod at bind (`meshfit.io/pod-index`, beside its
ranks); from then on it is the pod's own.  None when every index is held: the pod is beyond the gang's size.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from scheduler.gangs.ledger import SLOT_BINDING, SLOT_RESERVED


def choose_index(member: Any, uid: str, name: str, previous: Any, members: Iterable[tuple[str, Any]],
                 entry: Any, live_pod: Callable[[str], bool], terminating: bool = False) -> int | None:
    """The index for `member` (pod `uid`/`name`, `terminating` when it is being deleted); see the module docstring.
    `previous` is the pod's earlier record (or None), `members` the gang's (uid, record) pairs, `entry` its ledger
    reservation (or None), and `live_pod(name)` says whether a pod of that name in the gang's namespace exists and
    is not terminating.  A terminating pod keeps the index it had even when its replacement holds it too."""
    members = list(members)
    taken = {r.member.index for u, r in members if u != uid and r.member is not None and not r.terminating}
    slots = dict(entry.slots) if entry is not None else {}
    taken |= {i for i, slot in slots.items() if slot.pod not in (None, name) and live_pod(slot.pod)}
    size = member.size
    block = _sub_group_block(member, uid, members)
    if block is not None:
        taken |= set(range(size)) - block
    earlier = previous.member if previous is not None else None
    if earlier is not None and earlier.gang_key == member.gang_key and not earlier.own_index \
            and earlier.index < size and (earlier.index not in taken or terminating):
        return earlier.index
    named = [i for i, slot in slots.items() if slot.pod == name and i < size and i not in taken]
    if named:
        return min(named)
    free = [i for i in range(size) if i not in taken]
    held = [i for i in free if i in slots and slots[i].state in (SLOT_RESERVED, SLOT_BINDING) and slots[i].pod is None]
    return min(held) if held else (free[0] if free else None)


def _sub_group_block(member: Any, uid: str, members: list[tuple[str, Any]]) -> set[int] | None:
    """The indexes of `member`'s sub-group's block (see the module docstring); None for a member of no sub-group."""
    width = member.constraint.slice_size
    if member.sub_group is None or not width:
        return None
    mine, others = set(), set()
    for u, record in members:
        other = record.member
        if u == uid or other is None or record.terminating or other.sub_group is None:
            continue
        (mine if other.sub_group == member.sub_group else others).add(other.index // width)
    blocks = sorted(mine) or [b for b in range(member.size // width) if b not in others][:1]
    return {i for b in blocks for i in range(b * width, (b + 1) * width)}
