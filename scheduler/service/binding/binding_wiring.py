"""What the direct binder (`scheduler.service.binding.gang_binding.GangBinding`) is wired with: its parts and hooks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from scheduler.cache.pod_record import PodRecord
from scheduler.service.binding.bind_fence import DEFAULT_FENCE_SECONDS
from scheduler.service.binding.binder import Nominator

DEFAULT_BACKLOG_LIMIT = 128
"""Members reserved and not yet bound (Bindings in flight, members held) at which no further gang is reserved.  At
5,000 nodes on 1.35, 128 against 256 in one run: reserved -> bound p99 1.74 s against 3.52 s, the same pods/s
(docs/architecture.md, "Throughput control")."""

DEFAULT_WORKERS = 16
"""Binding workers: Bindings posted at once."""


class RoomCheck(Protocol):
    """Fit answered in one place over the room ledger (`scheduler.kube.node_fit.RoomFit` in Kubernetes mode)."""

    def fits(self, record: Any, node_name: str, extra: Mapping[str, Any] | None = None) -> str:
        """"" when `record` fits `node_name` in meshfit's view (with `extra` taken there too), else why not."""

    def collides(self, other: Any, member: Any, node_name: str, memo: dict | None = None) -> bool:
        """Whether pod `other` may land on `node_name` in kube-scheduler's view and leave no room for `member`."""


@dataclass(frozen=True)
class DirectBinding:
    """What meshfit binds members with: the fit check over the room ledger (the fence's race test too), the
    nominator, the fence's limit, the worker count, the bind backlog at which no further gang is reserved and whether
    every member is nominated first (`scheduler.kube.node_fit.RoomFit` and `scheduler.kube.binder.KubeNominator` in
    Kubernetes mode)."""

    fit: RoomCheck
    nominator: Nominator
    fence_seconds: float = DEFAULT_FENCE_SECONDS
    workers: int = DEFAULT_WORKERS
    backlog_limit: int = DEFAULT_BACKLOG_LIMIT
    always_nominate: bool = False
    """Nominate every member before its Binding, even one that can be bound at once (`meshfit serve
    --always-nominate`): for a kube-scheduler that runs meshfit's profile without the `/guard` entry."""


@dataclass(frozen=True)
class BindingHooks:
    """What the direct binder tells and asks the rest of the service."""

    on_bound: Callable[[str], None]
    """A member of this gang was bound (publish the rank table when whole)."""
    rolling_back: Callable[[str], bool]
    """Whether a gang is being rolled back (no member of it may bind)."""
    scheduler_names: Callable[[], frozenset[str]]
    """meshfit's kube-scheduler profile names."""
    on_drained: Callable[[], None]
    """Called under the state lock when the Bindings in flight fall to `DRAINED_AT` (the queue may admit more)."""
    observe: Callable[[float, bool], None]
    """Called with (seconds, succeeded) after each Binding call."""
    re_place: Callable[[PodRecord, str], bool]
    """A member no longer fits its reserved node (the reason given): move its slot to a node where it fits near its
    peers, or release its gang whole while nothing of it is bound; True when either was done (under the lock)."""
    slots_changed: Callable[[str], object]
    """The direct binder marked some of this gang's slots binding, bound, or reserved again (under the lock): the
    lifecycle observes the gang's phase, so no phase it passes through goes unseen."""
