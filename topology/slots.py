"""Free pod slots per pod size and a by-free-GPUs host index, kept up to date instead of rebuilt per placement.

For pods of g GPUs a node holds `free // g` of them and a domain the sum over its nodes.  Placement
policies read these counts on every placement.  `PodSlots` keeps them for one pod size: changes are
logged by node (`SlotLog`) and replayed when the size is next asked for, one node at a time when few
changed, else by one pass summing level by level up the tree (a few numpy calls, no per-node loop).
`HostsByFree` groups hosts by their free GPUs, updated on every change, so the best-fitting and the
roomiest hosts for a one-pod gang of any size are found without a pass over every node.
"""

from __future__ import annotations

import numpy as np

SMALL_CHANGE = 4
"""Up to this many changed nodes are applied one by one; more are applied by one summing pass."""
LOG_LIMIT = 1 << 15
"""A log longer than this is dropped; sizes that had not caught up are recomputed on their next use."""


class SlotLog:
    """Indices of nodes whose free GPUs changed, in order, shared by every `PodSlots` of one topology."""

    def __init__(self) -> None:
        self.changed: list[int] = []
        self.generation = 0
        """Bumped when the log is dropped: a `PodSlots` from an older generation must recompute."""

    def record(self, node: int) -> None:
        """Note that node `node`'s free GPUs changed."""
        changed = self.changed
        changed.append(node)
        if len(changed) > LOG_LIMIT:
            changed.clear()
            self.generation += 1


class LevelTree:
    """The static tree as level arrays: domain ids per level and, per node and domain, its parent's position."""

    def __init__(self, paths: np.ndarray, domain_level: np.ndarray, parent: np.ndarray) -> None:
        self.paths = paths
        self.path_lists: list[list[int]] = paths.tolist()
        self.domains = domain_level.shape[0]
        self.level_ids = [np.flatnonzero(domain_level == level) for level in range(paths.shape[1])]
        position = np.zeros(self.domains, dtype=np.int64)
        for ids in self.level_ids:
            position[ids] = np.arange(ids.size)
        self.host_position = position[paths[:, -1]] if paths.size else np.zeros(0, dtype=np.int64)
        """Per node, the position of its host domain among the host domains (ascending id)."""
        self.parent_position = [position[parent[ids]] for ids in self.level_ids[1:]]
        """`parent_position[l][i]`: position at level l of the parent of the i-th domain of level l + 1."""

    def sums(self, per_node: np.ndarray) -> np.ndarray:
        """Per domain id, the sum of `per_node` over its nodes (summed level by level up the tree)."""
        out = np.zeros(self.domains, dtype=np.int64)
        if not self.level_ids:
            return out
        host_ids = self.level_ids[-1]
        values = np.bincount(self.host_position, weights=per_node, minlength=host_ids.size)
        out[host_ids] = values
        for level in range(len(self.level_ids) - 2, -1, -1):
            ids = self.level_ids[level]
            values = np.bincount(self.parent_position[level], weights=values, minlength=ids.size)
            out[ids] = values
        return out


class PodSlots:
    """Free slots for pods of `gpus` GPUs per node and per domain (live arrays: read-only for readers)."""

    def __init__(self, gpus: int, tree: LevelTree, node_free: np.ndarray, node_total: np.ndarray,
                 log: SlotLog) -> None:
        self.gpus = max(gpus, 1)
        self.tree = tree
        self.node_total = node_total
        self.log = log
        self.max_slots = 0
        """Upper bound on the slots of any one node."""
        self.only_on_free_nodes = False
        """True when a pod needs a whole node's GPUs: every slot then lies on a fully free node."""
        self.recompute(node_free)

    @property
    def domains(self) -> int:
        """Number of domains counted."""
        return self.tree.domains

    def recompute(self, node_free: np.ndarray) -> None:
        """Recompute every count from the free GPUs per node (and skip the log so far)."""
        most = max(int(self.node_total.max()), int(node_free.max())) if node_free.size else 0
        self.max_slots = most // self.gpus
        self.only_on_free_nodes = bool(node_free.size) and self.gpus >= most
        self.node = node_free // self.gpus
        self.domain = self.tree.sums(self.node)
        self._domain_list: list[int] | None = None
        self.total = int(self.node.sum())
        self._whole: np.ndarray | None = None
        self.node_free = node_free
        self.seen = len(self.log.changed)
        self.generation = self.log.generation

    def catch_up(self, node_free: np.ndarray) -> None:
        """Apply the changes logged since the last call."""
        changed = self.log.changed
        if self.generation != self.log.generation or len(changed) - self.seen > SMALL_CHANGE:
            self.recompute(node_free)
            return
        if self.seen == len(changed):
            return
        pending = changed[self.seen:]
        self.seen = len(changed)
        self._whole = None
        for node in dict.fromkeys(pending):
            slots = int(node_free[node]) // self.gpus
            change = slots - int(self.node[node])
            if slots > self.max_slots:  # more free than any node had: start over
                self.recompute(node_free)
                return
            if change:
                self.node[node] = slots
                self.total += change
                listed = self._domain_list
                for domain in self.tree.path_lists[node]:
                    self.domain[domain] += change
                    if listed is not None:
                        listed[domain] += change

    @property
    def domain_list(self) -> list[int]:
        """`domain` as a Python list (cheaper to read one domain at a time), kept in step with it once asked for."""
        if self._domain_list is None:
            self._domain_list = self.domain.tolist()
        return self._domain_list

    @property
    def whole(self) -> np.ndarray:
        """Per domain, the slots on its wholly free nodes (computed on first use after each change)."""
        if self._whole is None:
            free = self.node_free
            self._whole = self.tree.sums(np.where(free == self.node_total, self.node, 0))
        return self._whole


class HostsByFree:
    """Hosts grouped by their free GPUs: best-fit and roomiest hosts for one pod of any size.

    Each group is a Python integer used as a bit set over host positions (ascending host domain id), so moving a
    host is two bit flips and the lowest / highest host of a group is one bit operation.  Changes are replayed
    from the topology's `SlotLog` when the index is next read, each changed node once."""

    def __init__(self, tree: LevelTree, node_free: np.ndarray, node_total: np.ndarray, log: SlotLog) -> None:
        self.tree = tree
        self.log = log
        positions = tree.host_position
        self.position: list[int] = positions.tolist()
        self.one_node_per_host = bool(positions.size == tree.level_ids[-1].size) if tree.level_ids else False
        node_of_position = np.empty(positions.size, dtype=np.int64)
        node_of_position[positions] = np.arange(positions.size)
        self.node_of_position: list[int] = node_of_position.tolist()
        self.most_free = max(int(node_total.max()), int(node_free.max())) if node_free.size else 0
        self.free_of: list[int] = node_free.tolist()
        """Free GPUs of every node as this index last saw them."""
        self.hosts_with = [0] * (self.most_free + 1)
        """`hosts_with[f]`: bit p is set when the host at position p has exactly f free GPUs."""
        for position, free in zip(self.position, self.free_of):
            self.hosts_with[free] |= 1 << position
        self.seen, self.generation = len(log.changed), log.generation

    def catch_up(self, node_free: np.ndarray) -> bool:
        """Apply the changes logged since the last call; False if the index must be rebuilt instead."""
        changed = self.log.changed
        if self.generation != self.log.generation:
            return False
        pending, self.seen = changed[self.seen:], len(changed)
        hosts, free_of, position = self.hosts_with, self.free_of, self.position
        for node in dict.fromkeys(pending):
            before, after = free_of[node], int(node_free[node])
            if after > self.most_free:
                return False
            if before != after:
                bit = 1 << position[node]
                hosts[before] &= ~bit
                hosts[after] |= bit
                free_of[node] = after
        return True

    def _holding(self, gpus: int, slots: int) -> int:
        """Bit set of the hosts with exactly `slots` pods of `gpus` GPUs free."""
        found = 0
        for free in range(slots * gpus, min((slots + 1) * gpus - 1, self.most_free) + 1):
            found |= self.hosts_with[free]
        return found

    def fewest_and_roomiest(self, gpus: int, fewest: int) -> tuple[list[int], int | None]:
        """Nodes of the `fewest` hosts with the fewest free slots >= 1 for pods of `gpus` GPUs (ties: lower host
        domain id first), and the node of the roomiest host (ties: highest host domain id); ([], None) if none."""
        gpus = max(gpus, 1)
        top = self.most_free // gpus
        roomiest = None
        for slots in range(top, 0, -1):
            hosts = self._holding(gpus, slots)
            if hosts:
                roomiest = self.node_of_position[hosts.bit_length() - 1]
                break
        if roomiest is None:
            return [], None
        found: list[int] = []
        for slots in range(1, top + 1):
            hosts = self._holding(gpus, slots) if len(found) < fewest else 0
            while hosts and len(found) < fewest:
                lowest = hosts & -hosts
                found.append(self.node_of_position[lowest.bit_length() - 1])
                hosts ^= lowest
        return found, roomiest
