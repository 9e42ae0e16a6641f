"""`RoomAnswers`: what meshfit tells kube-scheduler about pods it places in its own cycle -- `/guard` for every such
pod, `/filter` and `/bind` for lone GPU pods of meshfit's profile -- so none takes room the room ledger counts but
kube-scheduler's cache cannot count yet (members held, binding, assumed, kept for missing members, or bound by meshfit
in the last `unseen_seconds`).  The nomination fence remembers each answer (`NominationFence.note_answer`)."""

from __future__ import annotations

from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.service.binding.binding_wiring import RoomCheck

GUARD_REASON_PREFIX = "insufficient "
"""The refusals `/guard` gives: room short on some resource (kube-scheduler's own filters passed the node, so any
other reason is a disagreement between the two views of the node, which is kube-scheduler's to judge)."""


class RoomAnswers:
    """The `/guard` and lone-pod answers over the room ledger (call under the state lock)."""

    def __init__(self, state: Any, fit: RoomCheck, fence: Any) -> None:
        self.state, self.fit, self.fence = state, fit, fence

    def answer_lone(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """kube-scheduler asks `/filter` for lone GPU pod `record`: offered nodes where it would not fit beside what
        meshfit counts there and kube-scheduler may not move from `nodes` to `failed`; the fence remembers the answer."""
        self._turn_away(record, nodes, failed, "", "beside gang members reserved there")
        self.fence.note_answer(record, nodes)

    def answer_guard(self, record: PodRecord, nodes: list[str], failed: dict[str, str]) -> None:
        """kube-scheduler asks `/guard` about `record`, a pod it places in its own cycle: the same, for room shortages
        only; a member held after this answer offered its node may race the pod (`NominationFence.racing`)."""
        self._turn_away(record, nodes, failed, GUARD_REASON_PREFIX,
                        "beside gang members meshfit holds, binds or just bound there")
        self.fence.note_answer(record, nodes)

    def lone_crowded_out(self, record: PodRecord, node: str) -> str:
        """kube-scheduler binds lone GPU pod `record` to `node` through `/bind`: "" when it fits there beside what
        meshfit counts -- which may have come after its `/filter` answer -- else why not."""
        if record.needs is None or not self.state.room.unseen_on(node):
            return ""
        reason = self.fit.fits(record, node)
        return f"{reason} beside gang members reserved there" if reason else ""

    def counts_unseen(self, node: str) -> bool:
        """True when the room ledger counts room on `node` kube-scheduler's cache may not count yet."""
        return self.state.room.unseen_on(node)

    def _turn_away(self, record: PodRecord, nodes: list[str], failed: dict[str, str], prefix: str,
                   beside: str) -> None:
        """Move from `nodes` to `failed` the nodes with unseen room where `record` does not fit (only refusals starting
        with `prefix` count)."""
        room = self.state.room
        if record.needs is None or not room.any_unseen():
            return  # nothing meshfit holds, binds or just bound anywhere: no node to check
        kept = []
        for name in nodes:
            reason = self.fit.fits(record, name) if room.unseen_on(name) else ""
            if reason and reason.startswith(prefix):
                failed[name] = f"{reason} {beside}"
            else:
                kept.append(name)
        nodes[:] = kept
