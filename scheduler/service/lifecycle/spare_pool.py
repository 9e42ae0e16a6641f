"""Spare capacity in the service: a per-leaf pool of whole free nodes, and per-gang spare pod slots.

Spares are *holdings in the topology*, like reservations, so every placement (gangs, the queue, plain
GPU pods through `FilterVerb._filter_single`) simply sees no free GPUs there and never takes them:

- **Pool** (`--spare-fraction F`): in each leaf domain (`scheduler.gangs.spares.leaf_of`) ceil(F x nodes)
  healthy, schedulable, wholly free nodes are held whole under `spare:<node>`, highest index first
  (`scheduler.gangs.spares.pick_spares`, the simulator's rule).  A failed spare leaves the pool; the pool
  refills from nodes that free up or are repaired, every tick.
- **Per gang** (`meshfit.io/spares: "N"` on its pods): while the gang has a bound member, N pod
  slots of its GPUs per pod are held next to it (nearest domain first, off its own nodes) under
  `spare:<ns>/<gang>/<j>`, for that gang only; released when the gang ends.

Replacements (`scheduler.service.lifecycle.replacement`) take the gang's own spares first, then the pool's
nearest, then any free room.  A rebuilt topology gets every hold back (`ClusterState.rebuilt`).
Call everything under `ClusterState.lock`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from scheduler.gangs.ledger import SLOT_RELEASED
from scheduler.gangs.spares import leaf_members, leaf_of, replacement_order, target_of
from scheduler.cache.state import ClusterState
from topology.model import ClusterTopology

POOL = "pool"
GANG = "gang"


def pool_key(node: str) -> str:
    """Topology holding key of a pool spare node."""
    return f"spare:{node}"


def gang_spare_key(gang_key: str, slot: int) -> str:
    """Topology holding key of spare pod slot `slot` of one gang."""
    return f"spare:{gang_key}/{slot}"


@dataclass(frozen=True)
class SpareHold:
    """One spare holding: its topology key, node, GPUs, and the gang it belongs to ("" for the pool)."""

    key: str
    node: str
    gpus: int
    gang: str = ""

    @property
    def kind(self) -> str:
        """`pool` or `gang`."""
        return GANG if self.gang else POOL


class SparePool:
    """The spare pool and the per-gang spares of one `ClusterState`; see the module docstring."""

    def __init__(self, state: ClusterState, fraction: float = 0.0) -> None:
        self.state = state
        self.fraction = float(fraction)
        self.holds: dict[str, SpareHold] = {}
        """Holding key -> hold (pool and per-gang)."""
        self.used = Counter()
        """Spares taken by replacements, by kind (`pool`, `gang`)."""
        self.on_used: Callable[[str, int], None] | None = None
        """Called with (kind, count) when replacements take spares (the metrics)."""
        state.rebuilt.append(self.rehold)

    # ----- holdings ---------------------------------------------------------------------------
    def rehold(self, topo: ClusterTopology) -> None:
        """Hold every spare again in a rebuilt topology (holds on vanished nodes are dropped)."""
        for key, hold in list(self.holds.items()):
            if hold.node in topo.node_by_name:
                topo.add_pod(key, hold.node, hold.gpus)
            else:
                del self.holds[key]

    def _add(self, hold: SpareHold) -> None:
        self.state.topology.add_pod(hold.key, hold.node, hold.gpus)
        self.holds[hold.key] = hold

    def _drop(self, key: str) -> None:
        self.state.topology.remove_pod(key)
        self.holds.pop(key, None)

    def gpus_held(self) -> dict[str, int]:
        """Spare GPUs held, by kind."""
        held = {POOL: 0, GANG: 0}
        for hold in self.holds.values():
            held[hold.kind] += hold.gpus
        return held

    def of_gang(self, gang_key: str) -> list[SpareHold]:
        """The spare pod slots held for one gang."""
        return [h for h in self.holds.values() if h.gang == gang_key]

    def pool_nodes(self) -> list[str]:
        """Names of the pool's spare nodes."""
        return sorted(h.node for h in self.holds.values() if not h.gang)

    # ----- taking spares ----------------------------------------------------------------------
    def lend(self, gang_key: str, nodes: set[str]) -> list[SpareHold]:
        """Release, for one placement attempt, the gang's own spares and the pool's on `nodes`; returns them
        (give them to `settle` afterwards)."""
        lent = [h for h in self.holds.values() if h.node in nodes and h.gang in ("", gang_key)]
        for hold in lent:
            self.state.topology.remove_pod(hold.key)
        return lent

    def settle(self, lent: list[SpareHold], placed: Counter) -> Counter:
        """After the attempt (`placed`: node -> pods placed there, empty when it failed): a gang spare is spent
        per pod placed on its node, a pool spare when anything was placed on its node (it becomes an ordinary
        node); the others are held again.  Returns the spares spent by kind."""
        left, spent = Counter(placed), Counter()
        for hold in sorted(lent, key=lambda h: h.kind != GANG):
            if hold.gang and left[hold.node] > 0:
                left[hold.node] -= 1
            elif not hold.gang and placed[hold.node] > 0:
                pass
            else:
                self.state.topology.add_pod(hold.key, hold.node, hold.gpus)
                continue
            self.holds.pop(hold.key, None)
            spent[hold.kind] += 1
        self.used.update(spent)
        for kind, count in spent.items():
            if self.on_used is not None:
                self.on_used(kind, count)
        return spent

    # ----- upkeep -----------------------------------------------------------------------------
    def upkeep(self, now: float) -> None:
        """Drop spares on failed nodes, refill the pool per leaf, hold / release per-gang spares."""
        topo = self.state.topology
        for key, hold in list(self.holds.items()):
            node = topo.node_by_name.get(hold.node)
            if node is None or not node.schedulable or node.gpus_used > node.gpus_total:
                self._drop(key)  # failed, gone, or a pod landed there anyway (another scheduler): not a spare
        if self.fraction > 0 and topo.nodes:
            self._refill_pool(topo)
        self._gang_spares(topo)

    def _refill_pool(self, topo: ClusterTopology) -> None:
        have = Counter(leaf_of(topo, topo.node_by_name[h.node].index) for h in self.holds.values() if not h.gang)
        for leaf, members in leaf_members(topo).items():
            missing = target_of(len(members), self.fraction) - have[leaf]
            if missing <= 0:
                continue
            free = [n for n in sorted(members, reverse=True)
                    if topo.nodes[n].schedulable and topo.nodes[n].gpus_used == 0 and topo.nodes[n].gpus_total > 0]
            for index in free[:missing]:
                node = topo.nodes[index]
                self._add(SpareHold(pool_key(node.name), node.name, node.gpus_total))

    def _gang_spares(self, topo: ClusterTopology) -> None:
        ledger = self.state.ledger.entries
        for gang in {h.gang for h in self.holds.values() if h.gang} - set(ledger):
            for hold in self.of_gang(gang):  # the gang ended: its spares go back
                self._drop(hold.key)
        for key, entry in ledger.items():
            members = self.state.gang_index.get(key, {}).values()
            wanted = max((r.spares for r in members), default=0) if entry.has_bound() else 0
            held = sorted(self.of_gang(key), key=lambda h: h.key)
            for hold in held[wanted:]:
                self._drop(hold.key)
            if len(held) < wanted:
                self._hold_gang_spares(topo, entry, wanted - len(held), {h.key for h in held})

    def _hold_gang_spares(self, topo: ClusterTopology, entry, count: int, taken: set[str]) -> None:
        gpus = entry.gang.gpus_per_pod
        own = {s.node for s in entry.slots.values() if s.state != SLOT_RELEASED}
        home_name = entry.node_of(0) or next(iter(sorted(own)), None)
        if home_name not in topo.node_by_name or gpus <= 0:
            return
        room = [n.index for n in topo.nodes if n.name not in own and n.gpus_free >= gpus]
        slot = 0
        for index in replacement_order(topo, topo.node_by_name[home_name].index, room):
            node = topo.nodes[index]
            while count > 0 and node.gpus_free >= gpus:
                while gang_spare_key(entry.gang_key, slot) in taken:
                    slot += 1
                self._add(SpareHold(gang_spare_key(entry.gang_key, slot), node.name, gpus, entry.gang_key))
                taken.add(gang_spare_key(entry.gang_key, slot))
                count -= 1
            if count == 0:
                return
