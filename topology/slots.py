"""Free pod slots per pod size, kept up to date from a log of changed nodes instead of rebuilt per placement.

For pods of g GPUs a node holds `free // g` of them and a domain the sum over its nodes.  Placement
policies read these counts on every placement; rebuilding them means a pass over every node and level.
`PodSlots` keeps, for one pod size, the per-node and per-domain counts, the share of each domain's
slots that lie on wholly free nodes (a placement there starts using a whole node), and the hosts
grouped by their slot count (best-fit lookups for one-pod gangs).  `ClusterTopology` logs the index of
every node whose free GPUs change (`SlotLog`); a `PodSlots` replays the log since its last use when it
is next asked for, so only sizes actually placed pay, and only for the nodes that changed.
"""

from __future__ import annotations

import numpy as np

SMALL_CHANGE = 24
"""Up to this many changed nodes are applied with scalar updates; more with one vectorised pass."""
LOG_LIMIT = 1 << 15
"""A log longer than this is dropped; sizes that had not caught up are rebuilt on their next use."""


class SlotLog:
    """Indices of nodes whose free GPUs changed, in order, shared by every `PodSlots` of one topology."""

    def __init__(self) -> None:
        self.changed: list[int] = []
        self.generation = 0
        """Bumped when the log is dropped: a `PodSlots` from an older generation must rebuild."""

    def record(self, node: int) -> None:
        """Note that node `node`'s free GPUs changed."""
        changed = self.changed
        changed.append(node)
        if len(changed) > LOG_LIMIT:
            changed.clear()
            self.generation += 1


class PodSlots:
    """Free slots for pods of `gpus` GPUs: per node, per domain, on wholly free nodes, and hosts by slot count.

    Arrays are live (updated in place by `catch_up`) and must be treated as read-only by readers."""

    def __init__(self, gpus: int, paths: np.ndarray, node_free: np.ndarray, node_total: np.ndarray,
                 domains: int, log: SlotLog) -> None:
        self.gpus = max(gpus, 1)
        self.paths = paths
        self.path_lists: list[list[int]] = paths.tolist()
        self.node_total = node_total
        self.domains = domains
        self.log = log
        host_ids = paths[:, -1] if paths.size else np.zeros(0, dtype=np.int64)
        self.hosts_by_id = np.argsort(host_ids, kind="stable")
        """Node indices in ascending order of their host domain id."""
        self.host_position = np.empty_like(self.hosts_by_id)
        self.host_position[self.hosts_by_id] = np.arange(self.hosts_by_id.size)
        self.rebuild(node_free)

    def rebuild(self, node_free: np.ndarray) -> None:
        """Recompute every count from the free GPUs per node (and forget the log so far)."""
        levels = self.paths.shape[1]
        most = max(int(self.node_total.max()), int(node_free.max())) if node_free.size else 0
        self.max_slots = most // self.gpus
        self.node = node_free // self.gpus
        self.node_whole = np.where(node_free == self.node_total, self.node, 0)
        flat = self.paths.ravel()
        self.domain = np.bincount(flat, weights=np.repeat(self.node, levels), minlength=self.domains).astype(np.int64)
        self.whole = np.bincount(flat, weights=np.repeat(self.node_whole, levels),
                                 minlength=self.domains).astype(np.int64)
        self.total = int(self.node.sum())
        by_count = self.node[self.hosts_by_id]
        self.hosts_with = np.zeros((self.max_slots + 1, by_count.size), dtype=bool)
        self.hosts_with[by_count, np.arange(by_count.size)] = True
        """`hosts_with[s, p]`: the host at position p (ascending host domain id) has exactly s slots."""
        self.count_with = np.bincount(by_count, minlength=self.max_slots + 1).astype(np.int64)
        self.seen = len(self.log.changed)
        self.generation = self.log.generation

    def catch_up(self, node_free: np.ndarray) -> None:
        """Apply the changes logged since the last call (or rebuild if the log was dropped meanwhile)."""
        if self.generation != self.log.generation:
            self.rebuild(node_free)
            return
        changed = self.log.changed
        if self.seen == len(changed):
            return
        pending = changed[self.seen:]
        self.seen = len(changed)
        if len(pending) <= SMALL_CHANGE:
            for node in dict.fromkeys(pending):
                free = int(node_free[node])
                if free // self.gpus > self.max_slots:  # more free than any node had: start over
                    self.rebuild(node_free)
                    return
                self._update_node(node, free)
            return
        nodes = np.unique(np.asarray(pending, dtype=np.int64))
        if int(node_free[nodes].max()) // self.gpus > self.max_slots:
            self.rebuild(node_free)
        else:
            self._update_many(nodes, node_free)

    def _update_node(self, node: int, free: int) -> None:
        """Scalar update of one node's slots and everything derived from them."""
        slots = free // self.gpus
        whole = slots if free == self.node_total[node] else 0
        slot_change = slots - int(self.node[node])
        whole_change = whole - int(self.node_whole[node])
        if slot_change:
            before = int(self.node[node])
            self.node[node] = slots
            self.total += slot_change
            position = self.host_position[node]
            self.hosts_with[before, position] = False
            self.hosts_with[slots, position] = True
            self.count_with[before] -= 1
            self.count_with[slots] += 1
            for domain in self.path_lists[node]:
                self.domain[domain] += slot_change
        if whole_change:
            self.node_whole[node] = whole
            for domain in self.path_lists[node]:
                self.whole[domain] += whole_change

    def _update_many(self, nodes: np.ndarray, node_free: np.ndarray) -> None:
        """Vectorised update of many distinct nodes."""
        free = node_free[nodes]
        slots = free // self.gpus
        whole = np.where(free == self.node_total[nodes], slots, 0)
        slot_change = slots - self.node[nodes]
        whole_change = whole - self.node_whole[nodes]
        levels = self.paths.shape[1]
        flat = self.paths[nodes].ravel()
        self.domain += np.bincount(flat, weights=np.repeat(slot_change, levels), minlength=self.domains).astype(np.int64)
        self.whole += np.bincount(flat, weights=np.repeat(whole_change, levels), minlength=self.domains).astype(np.int64)
        positions = self.host_position[nodes]
        before = self.node[nodes]
        np.subtract.at(self.count_with, before, 1)
        np.add.at(self.count_with, slots, 1)
        self.hosts_with[before, positions] = False
        self.hosts_with[slots, positions] = True
        self.node[nodes] = slots
        self.node_whole[nodes] = whole
        self.total += int(slot_change.sum())

    def fewest_and_roomiest_hosts(self, fewest: int, need: int = 1) -> tuple[list[int], int | None]:
        """Nodes of the `fewest` hosts with the fewest slots >= `need` (ties: lower host domain id first), and
        the node of the roomiest host (ties: highest host domain id); None when no host has `need` slots."""
        found: list[int] = []
        roomiest = None
        counts = self.count_with
        for slots in range(self.max_slots, need - 1, -1):
            if counts[slots]:
                roomiest = int(self.hosts_by_id[np.flatnonzero(self.hosts_with[slots])[-1]])
                break
        if roomiest is None:
            return [], None
        for slots in range(need, self.max_slots + 1):
            if len(found) >= fewest:
                break
            if counts[slots]:
                positions = np.flatnonzero(self.hosts_with[slots])[: fewest - len(found)]
                found.extend(self.hosts_by_id[positions].tolist())
        return found, roomiest
