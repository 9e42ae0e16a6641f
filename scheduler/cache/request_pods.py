"""`RequestPods`: the pods named in scheduling requests -- what a request body may select, and what not.

In Kubernetes mode the API server is the truth: a body selects a pod the watch reported, never overwrites it,
and a pod the watch has not shown is looked up with at most one GET -- a request never creates state.  In the
embedded mode (and tests) bodies are the pods; how many such pods are kept is bounded.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Callable

from scheduler.cache.pod_record import PodRecord

MAX_REQUEST_ONLY_PODS = 20_000
"""Pods known only from request bodies kept at most (a forged-body flood cannot grow memory without end)."""


class RequestPods:
    """`observe_pending_pod` and the bound on pods known only from request bodies, over the state's pods (reached
    through the lock, lookups and changes it is given)."""

    def __init__(self, lock: AbstractContextManager[Any], read: Callable[[dict], PodRecord],
                 pod: Callable[[str, str], PodRecord | None], pod_by_uid: Callable[[str], PodRecord | None],
                 upsert: Callable[..., PodRecord], forget: Callable[[PodRecord], None]) -> None:
        self.lock = lock
        """The state's lock (re-entrant)."""
        self.read = read
        """Pod dict -> record (not kept)."""
        self.pod, self.pod_by_uid = pod, pod_by_uid
        """The held record of a pod by (namespace, name) / by uid, or None."""
        self.upsert = upsert
        """`ClusterState.upsert_pod(pod, from_watch=...)`: index a pod."""
        self.forget = forget
        """Drop a held pod as if deleted."""
        self.watch_is_truth = False
        """Kubernetes mode: pods come from the watch; a request body may select a pod, never overwrite it."""
        self.pod_lookup: Callable[[str, str], dict | None] | None = None
        """Kubernetes mode: one direct GET of a pod the watch has not shown yet (None: no lookup, such pods are
        refused)."""
        self.max_request_only_pods = MAX_REQUEST_ONLY_PODS
        self._request_only: dict[str, None] = {}
        """Uids of pods known only from request bodies, oldest first (insertion order)."""
        self._missing: dict[tuple[str, str, str], float] = {}
        """(namespace, name, uid) -> monotonic time until which a failed lookup is not tried again."""

    def track(self, record: PodRecord) -> None:
        """Bound the pods known only from request bodies: past `max_request_only_pods`, forget the oldest
        that hold nothing (unbound; a gang member's slot stays held for it, see `ClusterState._forget`)."""
        self._request_only.pop(record.uid, None)
        if record.from_watch:
            return
        self._request_only[record.uid] = None
        while len(self._request_only) > self.max_request_only_pods:
            uid = next(iter(self._request_only))
            del self._request_only[uid]
            old = self.pod_by_uid(uid)
            if old is not None and not old.node and not old.from_watch:
                self.forget(old)

    def record_from_request(self, pod: dict) -> PodRecord:
        """A record of the pod in a request body, not kept (a pod the watch has not shown yet, asked about at `/guard`)."""
        return self.read(pod)

    def observe_pending_pod(self, pod: dict) -> PodRecord:
        """Note a pod seen in a scheduling request, unless the state already knows it bound.

        In Kubernetes mode (`watch_is_truth`) a body only *selects*: a pod the watch already reported is
        taken as the watch has it; a body whose uid contradicts the watch (a forged or stale body reusing a
        name or a uid) gets an unindexed record carrying an error, changing nothing; and a pod the watch has
        not shown is looked up with at most one direct GET (`pod_lookup`: a brand-new pod may be ahead of
        the watch) -- if the API server has no such pod, the answer is an error and nothing is reserved.
        """
        namespace, name = _meta_of(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self.lock:
            answer = self._select(pod, namespace, name, uid)
            if answer is not None or not self.watch_is_truth:
                return answer if answer is not None else self.upsert(pod, from_watch=False)
        found = self._look_up(namespace, name, uid)  # off the lock: one API round trip
        with self.lock:
            answer = self._select(pod, namespace, name, uid)  # the watch may have delivered it meanwhile
            if answer is not None:
                return answer
            found_uid = str(((found or {}).get("metadata") or {}).get("uid") or "")
            if found is None or (uid and found_uid != uid):
                return PodRecord(uid, namespace, name, 0, None, "Pending", member_error=(
                    f"pod {namespace}/{name} (uid {uid or 'none'}) does not exist in the API server (not in "
                    f"meshfit's watch, and a direct GET found {'another uid' if found else 'nothing'}); "
                    f"nothing is reserved for it"))
            return self.upsert(found, from_watch=True)

    def _select(self, pod: dict, namespace: str, name: str, uid: str) -> PodRecord | None:
        """The record a request body selects, an error record, or None (not known: look it up / upsert)."""
        known = self.pod(namespace, name)
        if self.watch_is_truth:
            by_uid = self.pod_by_uid(uid)
            if known is not None and known.from_watch and known.uid == uid:
                return known
            if (known is not None and known.from_watch) or (by_uid is not None and by_uid.from_watch):
                return PodRecord(uid, namespace, name, 0, None, "Pending", member_error=(
                    f"pod {namespace}/{name} (uid {uid or 'none'}) does not match the pod the API server has "
                    f"under that name or uid; not scheduling it until the watch catches up"))
            return None
        if known is not None and known.node and not (pod.get("spec") or {}).get("nodeName"):
            return known
        return None

    def _look_up(self, namespace: str, name: str, uid: str) -> dict | None:
        """`pod_lookup(namespace, name)`, remembering misses for a second (a flood of unknown names costs one GET
        each at most once a second, never state)."""
        key, now = (namespace, name, uid), time.monotonic()
        if self.pod_lookup is None or self._missing.get(key, 0.0) > now:
            return None
        try:
            found = self.pod_lookup(namespace, name)
        except Exception:  # noqa: BLE001 - an unreachable API server: treat as not found, the pod comes back
            found = None
        if found is None:
            if len(self._missing) > 10_000:
                self._missing = {k: t for k, t in self._missing.items() if t > now}
            self._missing[key] = now + 1.0
        return found


def _meta_of(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")
