"""`PodRecord`: what the cluster state keeps of one pod (identity, GPUs, node, gang membership)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.gangs.membership import membership_signature
from scheduler.gangs.rendezvous import GivenRendezvous


@dataclass
class PodRecord:
    """What the state keeps of one pod: identity, the node it holds GPUs on, and its gang."""

    uid: str
    namespace: str
    name: str
    gpus: int
    node: str | None
    phase: str
    member: Any = None
    member_error: str | None = None
    fingerprint: tuple = ()
    """What identification depended on; an unchanged fingerprint skips identifying again."""
    given: GivenRendezvous | None = None
    """The rendezvous its `meshfit.io/*` bind annotations state (bound gang members only)."""
    priority: int = 0
    """`spec.priority` (filled in from the PriorityClass by admission)."""
    nominated: str = ""
    """`status.nominatedNodeName` (meshfit nominates a member's reserved node when it requeues it)."""
    cached_signature: tuple | None = field(default=None, repr=False, compare=False)
    from_watch: bool = True
    """Known from the API server (list/watch), not only from a request body."""
    scheduler_name: str = ""
    """`spec.schedulerName` (meshfit queues pending gangs of its own profile straight from the watch)."""
    spares: int = 0
    """Spare pod slots its gang asks for (`meshfit.io/spares`; see `scheduler.gangs.spares`)."""
    preemption_policy: str = ""
    """`spec.preemptionPolicy` ("Never": its gang never preempts others)."""
    owner: Any = None
    """Its controller's ownerReference (`apiVersion`, `kind`, `name`, `uid`), else itself as one (bare pods)."""
    terminating: bool = False
    """`metadata.deletionTimestamp` is set: the pod is going (evicted, deleted); it still holds its node."""
    needs: Any = None
    """What kube-scheduler's node-local filters check of it (`ClusterState.needs_of`; None when not read)."""
    since: str = ""
    """A gang member's RFC 3339 time of its latest step: bound, when it was bound (its `PodScheduled` condition's
    `lastTransitionTime`, which the API server sets with the Binding); else when it was created (`since_of`)."""
    invalid_gang: str = ""
    """For a pod of meshfit's (`scheduler.gangs.profile`) with a `member_error`: the gang `GET /gangs` lists as invalid."""

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    def signature(self) -> tuple | None:
        """`membership_signature` of its gang membership, computed once (each filter compares all members')."""
        if self.cached_signature is None and self.member is not None:
            self.cached_signature = membership_signature(self.member)
        return self.cached_signature


def since_of(pod: dict, bound: bool) -> str:
    """`PodRecord.since` of `pod` ("" when the API server's object does not say)."""
    if bound:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if isinstance(condition, dict) and condition.get("type") == "PodScheduled" \
                    and condition.get("status") == "True":
                return str(condition.get("lastTransitionTime") or "")
        return ""
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def int_or_zero(value: object) -> int:
    """An integer field of a pod (priority), 0 when absent or malformed."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def controller_of(pod: dict, name: str, uid: str) -> dict[str, str] | None:
    """The pod's controller ownerReference as {apiVersion, kind, name, uid}; the pod itself when it has none."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return {k: str(ref.get(k) or "") for k in ("apiVersion", "kind", "name", "uid")}
    if not uid or uid == name or "/" in uid:  # no real uid (a request body): no owner
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}
