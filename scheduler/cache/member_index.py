"""Stable indexes for index-less gang members, kept by the cluster state (a mixin of `ClusterState`).

`give_index` runs under the state's lock when a pod record is indexed: a member whose source found no index of
its own (`GangMembership.own_index` False: a Kubernetes PodGroup member) gets one from
`scheduler.gangs.stable_index.choose_index`.  A member beyond its gang's size (every index held) gets an error
record instead, and is remembered: when a member of that gang goes, it is identified again and may take the
freed index.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.cache.pod_record import PodRecord
from scheduler.gangs.stable_index import choose_index


class MemberIndexes:
    """`give_index` and the members waiting for an index; mixed into `ClusterState` (it provides `lock`, `pods`,
    `gang_index`, `ledger`, `_uid_by_name`, `_awaiting_index` and `upsert_pod`)."""

    lock: Any
    pods: dict
    gang_index: dict
    ledger: Any
    _uid_by_name: dict
    _awaiting_index: dict

    def _awaiting(self) -> dict[str, dict[str, tuple[dict, bool]]]:
        """Gang key -> uid -> (pod, from_watch) of members beyond their gang's size."""
        return self._awaiting_index

    def _live_pod(self, namespace: str, name: str) -> bool:
        uid = self._uid_by_name.get((namespace, name))
        record = self.pods.get(uid) if uid is not None else None
        return record is not None and not record.terminating

    def give_index(self, record: PodRecord, pod: dict | None = None) -> PodRecord:
        """`record` with meshfit's stable index for a member that has none of its own (see the module docstring)."""
        member = record.member
        if member is None or member.own_index:
            return record
        key = member.gang_key
        index = choose_index(member, record.uid, record.name, self.pods.get(record.uid),
                             self.gang_index.get(key, {}).items(), self.ledger.get(key),
                             lambda name: self._live_pod(record.namespace, name), record.terminating)
        if index is None:
            if pod is not None:
                self._awaiting().setdefault(key, {})[record.uid] = (pod, record.from_watch)
            record.member, record.cached_signature = None, None
            record.member_error = (f"pod {record.key}: gang {key} already has its {member.size} members (every "
                                   f"index is held); this pod waits until one of them goes")
            return record
        waiting = self._awaiting().get(key)
        if waiting is not None:
            waiting.pop(record.uid, None)
        if index != member.index:
            record.member = replace(member, index=index)
        return record

    def retry_awaiting(self, gang_key: str) -> None:
        """A member of `gang_key` went: identify its waiting pods again (each may take the freed index)."""
        waiting = self._awaiting().pop(gang_key, None)
        for uid, (pod, from_watch) in (waiting or {}).items():
            record = self.pods.get(uid)
            if record is None or record.member is not None:
                continue
            record.fingerprint = ()  # identify it afresh, not from the cached error
            self.upsert_pod(pod, from_watch=from_watch)
