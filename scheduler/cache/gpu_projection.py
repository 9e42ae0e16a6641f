"""`GpuProjection`: the placement engine's view of the GPUs pods hold, projected from the room ledger's claims.

The engine places on a `ClusterTopology` whose nodes count held GPUs.  A bound pod's GPUs are held there as
`pod:<namespace>/<name>` (`pod_holding_key`), and only this projection writes those holdings: every claim the room ledger
counts as bound (`bound` or `bound-unseen`) shows its pod's GPUs on its node, and a claim that leaves those states
hides them.  So the engine's count of bound GPUs and the ledger's cannot drift apart; a rebuilt topology is projected
afresh (`attach`).  Reserved gang slots (`resv:`), lone preemptors' holds and spare-pool holds are held by their own
owners, not here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol


def pod_holding_key(namespace: str, name: str) -> str:
    """Topology holding key of a bound pod."""
    return f"pod:{namespace}/{name}"


class GpuHoldings(Protocol):
    """What the projection writes to: a topology's holdings (`topology.model.ClusterTopology`)."""

    node_by_name: Mapping[str, Any]

    def add_pod(self, key: str, node_name: str, gpus: int) -> None:
        """Hold `gpus` GPUs on `node_name` as `key` (replacing what `key` held)."""

    def remove_pod(self, key: str) -> bool:
        """Release what `key` holds."""


class ProjectedClaim(Protocol):
    """What the projection reads of a room-ledger claim."""

    key: str
    node: str
    record: Any


class GpuProjection:
    """Keeps a topology's `pod:` holdings equal to the GPUs of the room ledger's bound claims."""

    def __init__(self, shows: Callable[[Any], bool]) -> None:
        self.shows = shows
        """True for a claim whose pod's GPUs the engine must see (the ledger's bound states)."""
        self.target: GpuHoldings | None = None
        self._owner: dict[str, str] = {}
        """Holding key -> key of the claim that holds it: a pod recreated under the same name never loses the new
        pod's hold when the old claim goes."""

    def attach(self, target: GpuHoldings, claims: Iterable[ProjectedClaim]) -> None:
        """Project every claim in `claims` into `target` (a freshly built topology) and follow the ledger there."""
        self.target, self._owner = target, {}
        for claim in claims:
            if self.shows(claim):
                self._show(claim)

    def move(self, old: ProjectedClaim | None, new: ProjectedClaim | None) -> None:
        """A claim changed from `old` to `new` (either may be None): its GPUs follow."""
        old_shown = old is not None and self.shows(old)
        new_shown = new is not None and self.shows(new)
        if not (old_shown or new_shown):
            return
        if old_shown and new_shown and old.key == new.key and old.node == new.node \
                and _held_of(old.record) == _held_of(new.record):
            return
        if old_shown:
            self._hide(old)
        if new_shown:
            self._show(new)

    def _show(self, claim: ProjectedClaim) -> None:
        target, record = self.target, claim.record
        if target is None or record is None or record.gpus <= 0 or claim.node not in target.node_by_name:
            return
        key = pod_holding_key(record.namespace, record.name)
        target.add_pod(key, claim.node, record.gpus)
        self._owner[key] = claim.key

    def _hide(self, claim: ProjectedClaim) -> None:
        record = claim.record
        if self.target is None or record is None:
            return
        key = pod_holding_key(record.namespace, record.name)
        if self._owner.get(key) == claim.key:
            del self._owner[key]
            self.target.remove_pod(key)


def _held_of(record: Any) -> tuple | None:
    """What a claim's pod holds in the engine's view: (namespace, name, GPUs)."""
    return (record.namespace, record.name, record.gpus) if record is not None else None
