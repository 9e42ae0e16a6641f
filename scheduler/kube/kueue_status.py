"""Writes of meshfit's Kueue admission check controller: an AdmissionCheck's `Active` condition and one check's
state on a Workload.

Both are server-side apply patches of the `status` subresource under the field manager `meshfit`, forced:
only the entry meshfit owns is sent -- `conditions` of an AdmissionCheck and `admissionChecks` of a Workload
are list-maps (keyed by `type` / `name`), so Kueue's own entries and fields are left as they are.
RBAC: `patch` of `admissionchecks/status` and `workloads/status` in `kueue.x-k8s.io`.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from scheduler.kube.api import request_bytes

KUEUE_GROUP = "kueue.x-k8s.io"
FIELD_MANAGER = "meshfit"
APPLY = "application/apply-patch+yaml"


def now_rfc3339() -> str:
    """The current time as Kubernetes writes `metav1.Time` (seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class KueueStatusWriter:
    """Applies check conditions and Workload check states through the official client's `ApiClient`."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def _apply(self, path: str, body: dict) -> None:
        request_bytes(self.api_client, "PATCH", path, [("fieldManager", FIELD_MANAGER), ("force", "true")],
                      msgspec.json.encode(body), APPLY, self.timeout)

    def set_active(self, name: str, version: str, generation: int, message: str, since: str | None = None) -> None:
        """Mark AdmissionCheck `name` Active (reason Active) for its `generation`."""
        condition = {"type": "Active", "status": "True", "reason": "Active", "message": message,
                     "observedGeneration": generation, "lastTransitionTime": since or now_rfc3339()}
        self._apply(f"/apis/{KUEUE_GROUP}/{version}/admissionchecks/{name}/status",
                    {"apiVersion": f"{KUEUE_GROUP}/{version}", "kind": "AdmissionCheck", "metadata": {"name": name},
                     "status": {"conditions": [condition]}})

    def set_check_state(self, namespace: str, name: str, version: str, check: str, state: str, message: str,
                        since: str | None = None) -> None:
        """Set check `check` of Workload `namespace/name` to `state` (Pending, Ready, Retry, Rejected)."""
        entry = {"name": check, "state": state, "message": message, "lastTransitionTime": since or now_rfc3339()}
        self._apply(f"/apis/{KUEUE_GROUP}/{version}/namespaces/{namespace}/workloads/{name}/status",
                    {"apiVersion": f"{KUEUE_GROUP}/{version}", "kind": "Workload",
                     "metadata": {"name": name, "namespace": namespace}, "status": {"admissionChecks": [entry]}})
