"""What the direct binder (`scheduler.service.binding.gang_binding.GangBinding`) is wired with: its parts and hooks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.service.binding.bind_fence import DEFAULT_FENCE_SECONDS
from scheduler.service.binding.binder import Nominator

DEFAULT_BACKLOG_LIMIT = 128
"""Members reserved and not yet bound (Bindings in flight, members held) at which no further gang is reserved.  At
5,000 nodes on 1.35, 128 against 256 in one run: reserved -> bound p99 1.74 s against 3.52 s, the same pods/s
(docs/architecture.md, "Throughput control")."""

DEFAULT_WORKERS = 16
"""Binding workers: Bindings posted at once."""


@dataclass(frozen=True)
class DirectBinding:
    """What meshfit binds members with: the node-fit check, the fence's race test, the nominator, the fence's
    limit, the worker count, the bind backlog at which no further gang is reserved and whether every member is
    nominated first (`scheduler.kube.node_fit.state_fit_check` / `state_collision_check` and
    `scheduler.kube.binder.KubeNominator` in Kubernetes mode)."""

    fits: Callable[..., str]
    collides: Callable[..., bool]
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
