"""`MemberIndexes`: stable indexes for index-less gang members, given as the cluster state indexes their pods.

`give_index` runs under the state's lock when a pod record is indexed: a member whose source found no index of
its own (`GangMembership.own_index` False: a Kubernetes PodGroup member) gets one from
`scheduler.gangs.stable_index.choose_index`.  A member beyond its gang's size (every index held) gets an error
record instead, and is remembered: when a member of that gang goes, it is identified again and may take the
freed index.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.ledger import ReservationLedger
from scheduler.gangs.stable_index import choose_index


class MemberIndexes:
    """`give_index` and the members waiting for an index (a gang already full), over the state's pods and ledger."""

    def __init__(self, pod_by_uid: Callable[[str], PodRecord | None],
                 pod_named: Callable[[str, str], PodRecord | None],
                 members_of: Callable[[str], dict[str, PodRecord]], ledger: ReservationLedger,
                 upsert: Callable[..., PodRecord]) -> None:
        self.pod_by_uid, self.pod_named = pod_by_uid, pod_named
        """The held record of a pod by uid / by (namespace, name), or None (read under the state's lock)."""
        self.members_of = members_of
        """Gang key -> uid -> record of its known members."""
        self.ledger = ledger
        """The reservations: a gang's held slots keep their indexes."""
        self.upsert = upsert
        """`ClusterState.upsert_pod(pod, from_watch=...)`: identify a waiting pod again."""
        self.awaiting: dict[str, dict[str, tuple[dict, bool]]] = {}
        """Gang key -> uid -> (pod, from_watch) of members beyond their gang's size."""

    def clear(self) -> None:
        """Forget every waiting member (a relist identifies them again)."""
        self.awaiting = {}

    def _live_pod(self, namespace: str, name: str) -> bool:
        record = self.pod_named(namespace, name)
        return record is not None and not record.terminating

    def give_index(self, record: PodRecord, pod: dict | None = None) -> PodRecord:
        """`record` with meshfit's stable index for a member that has none of its own (see the module docstring)."""
        member = record.member
        if member is None or member.own_index:
            return record
        key = member.gang_key
        index = choose_index(member, record.uid, record.name, self.pod_by_uid(record.uid),
                             self.members_of(key).items(), self.ledger.get(key),
                             lambda name: self._live_pod(record.namespace, name), record.terminating)
        if index is None:
            if pod is not None:
                self.awaiting.setdefault(key, {})[record.uid] = (pod, record.from_watch)
            record.member, record.cached_signature = None, None
            record.member_error = (f"pod {record.key}: gang {key} already has its {member.size} members (every "
                                   f"index is held); this pod waits until one of them goes")
            return record
        waiting = self.awaiting.get(key)
        if waiting is not None:
            waiting.pop(record.uid, None)
        if index != member.index:
            record.member = replace(member, index=index)
        return record

    def retry_awaiting(self, gang_key: str) -> None:
        """A member of `gang_key` went: identify its waiting pods again (each may take the freed index)."""
        waiting = self.awaiting.pop(gang_key, None)
        for uid, (pod, from_watch) in (waiting or {}).items():
            record = self.pod_by_uid(uid)
            if record is None or record.member is not None:
                continue
            record.fingerprint = ()  # identify it afresh, not from the cached error
            self.upsert(pod, from_watch=from_watch)
