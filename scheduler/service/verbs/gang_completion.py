"""`GangCompletion`: a gang whose every member is bound is announced once (log line, `GangBound` Event) and its rank
table queued for the background publisher -- after kube-scheduler's `/bind` of its last member, or meshfit's own."""

from __future__ import annotations

from scheduler.cache.state import ClusterState
from scheduler.gangs.ledger import STATUS_BOUND
from scheduler.service.binding.ranktables import RankTableTracker
from scheduler.service.lifecycle.gang_lifecycle import GangLifecycle


class GangCompletion:
    """Announces gangs bound whole and queues their rank tables."""

    def __init__(self, state: ClusterState, lifecycle: GangLifecycle, rank_tables: RankTableTracker) -> None:
        self.state, self.lifecycle, self.rank_tables = state, lifecycle, rank_tables

    def publish_if_bound(self, gang_key: str) -> None:
        """Once every pod is bound: announce it (once) and queue the rank table for the background publisher.

        Off the bind path: the table is published by one background thread, once per gang (and again only when a
        bound gang changes: a replaced member, an elastic resize)."""
        with self.state.lock:
            entry = self.state.ledger.get(gang_key)
            if entry is None or entry.status != STATUS_BOUND:
                return
            self.rank_tables.mark_due(gang_key)
            self.lifecycle.completed(entry)
        self.rank_tables.publish_soon([gang_key])
