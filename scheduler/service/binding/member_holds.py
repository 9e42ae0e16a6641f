"""`MemberHolds`: gang members counted on their node before the API server shows them there -- held by the direct
binder (nominated by it, or about to be bound at once) or assumed by kube-scheduler (told their node at `/filter`, its
`/bind` to come) -- as `held` and `assumed` claims of the room ledger (`scheduler.cache.room_ledger`).

Without a hold, members moved or reserved in one pass would each see the same free room.  A member kube-scheduler
assumed is counted in both views of the node (its cache counts it for every pod, whatever the priorities); one meshfit
holds only in meshfit's (kube-scheduler counts it only through its nomination, for pods of no higher priority).
"""

from __future__ import annotations

from typing import Any, Callable

from scheduler.cache.room_ledger import ClaimState
from scheduler.gangs.ledger import SLOT_BINDING, SLOT_RESERVED

KUBE_TOLD_SECONDS = 30.0
"""A member kube-scheduler was told its node for, whose `/bind` has not claimed its slot this long after, is taken
back: meshfit binds it with its peers (its `/bind`, should it come, finds it bound or binding)."""
HELD_STATES = (ClaimState.HELD, ClaimState.ASSUMED)


class MemberHolds:
    """Held and assumed members (call under the state lock)."""

    def __init__(self, state: Any, fence: Any, clock: Callable[[], float]) -> None:
        self.state, self.fence, self.clock = state, fence, clock
        self.kube_handling: dict[str, float] = {}
        """Pod uid -> when kube-scheduler last asked about this member (it may bind it through `/bind` itself)."""

    def hold(self, record: Any, node: str) -> None:
        """Count `record` on `node` from now on, until it is bound or let go (kept as it is when already held or
        assumed there, or counted as a Binding in flight)."""
        claim = self.state.room.claim(record.uid)
        if claim is not None and (claim.state is ClaimState.BINDING
                                  or (claim.state in HELD_STATES and claim.node == node)):
            return
        self.let_go(record.uid)
        if self.state.room.hold(record, node, ClaimState.HELD):
            self.fence.note_hold(record.uid, node)

    def assume(self, record: Any, node: str) -> None:
        """kube-scheduler was told `node` for `record` at `/filter`: it assumes the member there, and binds it through
        `/bind`; until that ends (`kube_let_go`) the member is counted there in both views."""
        claim = self.state.room.claim(record.uid)
        if claim is not None and claim.state is ClaimState.BINDING:
            return  # counted as a Binding in flight already (kube-scheduler asked about it while it was being bound)
        if claim is not None and claim.state in HELD_STATES and claim.node != node:
            self.let_go(record.uid)
        if self.state.room.hold(record, node, ClaimState.ASSUMED):
            self.fence.note_hold(record.uid, node)

    def let_go(self, uid: str) -> None:
        """Stop holding `uid` (held or assumed): its claim follows the pod's own facts again."""
        self.state.room.let_go(uid, self.state.pods.get(uid), HELD_STATES)
        self.fence.note_hold(uid, None)

    def note_kube_handling(self, record: Any) -> None:
        """kube-scheduler is asking about this member now: it may bind it through `/bind` itself."""
        self.kube_handling[record.uid] = self.clock()

    def kube_let_go(self, record: Any) -> None:
        """kube-scheduler is done with this member (bound, refused, or its `/bind` returned)."""
        self.kube_handling.pop(record.uid, None)
        self.let_go(record.uid)

    def assumed(self, uid: str) -> bool:
        """True while kube-scheduler assumes `uid` on its node (told it at `/filter`)."""
        return self.state.room.state_of(uid) is ClaimState.ASSUMED

    def held_on(self, uid: str, node: str) -> bool:
        """True while `uid` is held or assumed on `node`."""
        claim = self.state.room.claim(uid)
        return claim is not None and claim.state in HELD_STATES and claim.node == node

    def count(self) -> int:
        """Members held or assumed now."""
        return self.state.room.count(*HELD_STATES)

    def drop_stale(self) -> None:
        """Let go of held members that are bound, gone, or whose slot is no longer reserved on the held node; take
        back a member kube-scheduler assumed whose `/bind` never came."""
        now = self.clock()
        for claim in self.state.room.in_state(*HELD_STATES):
            uid, node = claim.key, claim.node
            record = self.state.pods.get(uid)
            entry = self.state.ledger.get(record.member.gang_key) if record is not None and record.member else None
            slot = entry.slots.get(record.member.index) if entry is not None else None
            if record is None or record.node or slot is None or slot.node != node \
                    or slot.state not in (SLOT_RESERVED, SLOT_BINDING):
                self.let_go(uid)
            elif claim.state is ClaimState.ASSUMED and slot.state == SLOT_RESERVED \
                    and now - self.kube_handling.get(uid, -1e18) > KUBE_TOLD_SECONDS:
                self.kube_let_go(record)  # its /bind never came (the cycle failed after /filter, or the process went)

    def forget_gone(self, known: Any) -> None:
        """Let go of pods not in `known`."""
        for claim in self.state.room.in_state(*HELD_STATES):
            if claim.key not in known:
                self.let_go(claim.key)
        for uid in [u for u in self.kube_handling if u not in known]:
            del self.kube_handling[uid]
