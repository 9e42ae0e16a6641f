"""`KubeBinder`: create a pod's v1 Binding carrying its rank assignment annotations, in one call.

The API server copies a Binding's `metadata.annotations` onto the pod in the same update that sets
`spec.nodeName` (pkg/registry/core/pod/storage `setPodHostAndAnnotations`), so the assignment and
the binding land together or not at all: a failed or timed-out POST leaves the pod exactly as it
was (no half-annotated pod whose siblings then "disagree").  By the time the kubelet sees the pod
on its node, `meshfit launch` can read the assignment through the downward API.  A 409 (already
bound, or a different pod under the same name) or a 404 (the pod is gone) is a `BindConflict`;
anything else is a `BindError`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.service.binding.binder import BindConflict


class BindError(RuntimeError):
    """The API server refused or failed the binding for a reason other than a conflict."""


def binding_body(namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> dict:
    """The v1 Binding: target node, the pod's uid as precondition, the assignment as annotations."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


class KubeBinder:
    """Implements the service's `Binder` protocol against the API server."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        """POST the Binding with the `meshfit.io/*` annotations; BindConflict on 409/404, BindError otherwise."""
        try:
            request_bytes(self.api_client, "POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                          body=binding_body(namespace, name, uid, node, annotations),
                          content_type="application/json", timeout=self.timeout)
        except ApiStatusError as exc:
            text = (f"binding of pod {namespace}/{name} to node {node} failed: {exc.message or exc.reason} "
                    f"(HTTP {exc.status})")
            if exc.status in (404, 409):
                raise BindConflict(text) from None
            raise BindError(text) from None


class _WrittenMeta(msgspec.Struct):
    """The one field of a written object's metadata the nominator reads (the rest is skipped, not decoded)."""

    resourceVersion: str = ""


class _Written(msgspec.Struct):
    """A written object's answer, as far as the nominator reads it."""

    metadata: _WrittenMeta = msgspec.field(default_factory=_WrittenMeta)


def written_version(answer: bytes) -> str | None:
    """`metadata.resourceVersion` of the object in an API answer, or None when it is not there or not readable."""
    try:
        return msgspec.json.decode(answer, type=_Written).metadata.resourceVersion or None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class KubeNominator:
    """Implements the service's `Nominator` protocol: one merge patch of the pod's status subresource."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def nominate(self, namespace: str, name: str, uid: str, node: str | None) -> str | None:
        """PATCH `status.nominatedNodeName` (uid as precondition); the pod's `resourceVersion` after the write (None if
        the answer does not say); BindConflict on 404/409, BindError otherwise."""
        body: dict[str, Any] = {"status": {"nominatedNodeName": node}}
        if uid:
            body["metadata"] = {"uid": uid}
        try:
            answer = request_bytes(self.api_client, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                                   body=body, content_type="application/merge-patch+json", timeout=self.timeout)
        except ApiStatusError as exc:
            text = f"nominating node {node} for pod {namespace}/{name} failed: {exc.message or exc.reason} (HTTP {exc.status})"
            if exc.status in (404, 409):
                raise BindConflict(text) from None
            raise BindError(text) from None
        return written_version(answer)
