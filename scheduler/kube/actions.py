"""`KubeActions`: requeue, evict and record Events through the API server (the `ClusterActions` port).

Requeue: kube-scheduler 1.26 parks a pod that only an extender rejected until its 5-minute flush,
but moves it back at once when the pod itself is updated (`PriorityQueue.Update`, `isPodUpdated`
ignores status).  So a requeue is two merge patches: `status.nominatedNodeName` first (kube-scheduler
then evaluates that node alone before sampling any others, `evaluateNominatedNode`, and counts the
pod's request there for lower-priority pods), then the `meshfit.io/reserved-node` /
`meshfit.io/requeued-at` annotations, whose change is what requeues the pod.  Works the same on newer
kube-schedulers, which requeue on any event anyway.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.service.lifecycle.actions import EVENT_NORMAL, PodRef

MERGE_PATCH = "application/merge-patch+json"
ANNOTATION_RESERVED_NODE = "meshfit.io/reserved-node"
ANNOTATION_REQUEUED_AT = "meshfit.io/requeued-at"
COMPONENT = "meshfit"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class KubeActions:
    """Implements `scheduler.service.lifecycle.actions.ClusterActions` with the official client's ApiClient."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def _pod_path(self, pod: PodRef) -> str:
        return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"

    def _patch(self, path: str, body: dict) -> None:
        request_bytes(self.api_client, "PATCH", path, body=body, content_type=MERGE_PATCH, timeout=self.timeout)

    def requeue(self, pod: PodRef, node: str | None) -> None:
        """Nominate `node` (when given) and touch the pod's meshfit annotations so it is scheduled again now."""
        meta: dict[str, Any] = {"annotations": {ANNOTATION_RESERVED_NODE: node or None, ANNOTATION_REQUEUED_AT: _now()}}
        if pod.uid:
            meta["uid"] = pod.uid
        try:
            if node:
                self._patch(self._pod_path(pod) + "/status", {"metadata": {"uid": pod.uid} if pod.uid else {},
                                                               "status": {"nominatedNodeName": node}})
            self._patch(self._pod_path(pod), {"metadata": meta})
        except ApiStatusError as exc:
            if exc.status in (404, 409):  # gone, or replaced by a pod of another uid: nothing to requeue
                return
            raise

    def evict(self, pod: PodRef, reason: str) -> None:
        """Delete the pod (uid precondition); a pod already gone is fine."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if pod.uid:
            body["preconditions"] = {"uid": pod.uid}
        try:
            request_bytes(self.api_client, "DELETE", self._pod_path(pod), body=body,
                          content_type="application/json", timeout=self.timeout)
        except ApiStatusError as exc:
            if exc.status not in (404, 409):
                raise

    def event(self, pod: PodRef, reason: str, message: str, kind: str = EVENT_NORMAL) -> None:
        """Create a core/v1 Event on the pod, reported by component `meshfit`."""
        now = _now()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{pod.name}.{secrets.token_hex(8)}", "namespace": pod.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                                   "name": pod.name, **({"uid": pod.uid} if pod.uid else {})},
                "reason": reason, "message": message[:1024], "type": kind,
                "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                "reportingInstance": COMPONENT, "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        request_bytes(self.api_client, "POST", f"/api/v1/namespaces/{pod.namespace}/events", body=body,
                      content_type="application/json", timeout=self.timeout)
