"""`KubeBinder`: record a pod's rank assignment as annotations, then create its v1 Binding.

Order matters: the annotations are patched first (a JSON merge patch carrying the pod's uid as a
precondition), so by the time the kubelet sees the pod on its node, `meshfit launch` can read the
assignment through the downward API.  A 409 (already bound, or a different pod under the same
name) or a 404 (the pod is gone) is a `BindConflict`; anything else is a `BindError`.
"""

from __future__ import annotations

from typing import Any

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.service.binding import BindConflict

MERGE_PATCH = "application/merge-patch+json"


class BindError(RuntimeError):
    """The API server refused or failed the binding for a reason other than a conflict."""


class KubeBinder:
    """Implements the service's `Binder` protocol against the API server."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def _call(self, what: str, namespace: str, name: str, method: str, path: str, body: dict,
              content_type: str) -> None:
        try:
            request_bytes(self.api_client, method, path, body=body, content_type=content_type, timeout=self.timeout)
        except ApiStatusError as exc:
            text = f"{what} of pod {namespace}/{name} failed: {exc.message or exc.reason} (HTTP {exc.status})"
            if exc.status in (404, 409):
                raise BindConflict(text) from None
            raise BindError(text) from None

    def patch_annotations(self, namespace: str, name: str, uid: str, annotations: dict[str, str]) -> None:
        """Merge `annotations` into the pod's metadata (uid as precondition when given)."""
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if uid:
            metadata["uid"] = uid
        self._call("annotating", namespace, name, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                   {"metadata": metadata}, MERGE_PATCH)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        """Patch the `meshfit.io/*` annotations, then POST the Binding; BindConflict on 409/404."""
        if annotations:
            self.patch_annotations(namespace, name, uid, annotations)
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._call(f"binding to node {node}", namespace, name, "POST",
                   f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding, "application/json")
