"""`NodeScores`, the `/prioritize` verb: a gang member's reserved node scores 10, other nodes 0; a lone GPU pod scores
nodes by best fit (fewest GPUs left free); a CPU pod scores every node 0 (kube-scheduler's own scores decide)."""

from __future__ import annotations

from scheduler.cache.state import ClusterState

MAX_SCORE = 10
"""kube-scheduler's extender scores run 0..10."""


class NodeScores:
    """`prioritize` over one `ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def prioritize(self, pod: dict, node_names: list[str]) -> list[tuple[str, int]]:
        """Integer scores 0..10: the reserved node 10 for a gang member; best fit for a GPU pod."""
        meta = pod.get("metadata") or {}
        with self.state.lock:
            record = self.state.pod(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            if record is None:
                record = self.state.observe_pending_pod(pod)
            if record.member is not None:
                entry = self.state.ledger.get(record.member.gang_key)
                node = entry.node_of(record.member.index) if entry is not None else None
                return [(name, MAX_SCORE if name == node else 0) for name in node_names]
            if record.gpus == 0:
                return [(name, 0) for name in node_names]
            return [(name, self._best_fit_score(name, record.gpus)) for name in node_names]

    def _best_fit_score(self, name: str, gpus: int) -> int:
        node = self.state.topology.node_by_name.get(name)
        if node is None or node.gpus_free < gpus or node.gpus_total == 0:
            return 0
        left = node.gpus_free - gpus
        return int(round(MAX_SCORE * (1 - left / node.gpus_total)))
