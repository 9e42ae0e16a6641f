"""Publish a gang's rank-table ConfigMap (`meshfit-<job>-ranks`): create it, or replace it if it exists.

`KubeRankTablePublisher` is the service's `RankTablePublisher` in real mode (`meshfit serve --kubeconfig`).
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.placement.result import Placement
from scheduler.handoff.rank_table import rank_table_configmap


class ConfigMapError(RuntimeError):
    """The ConfigMap could not be created or replaced."""


def _path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def _create(api_client: Any, namespace: str, configmap: dict, timeout: float) -> dict | None:
    """POST the ConfigMap; None when it already exists (409)."""
    try:
        return msgspec.json.decode(request_bytes(api_client, "POST", _path(namespace), body=configmap,
                                                 content_type="application/json", timeout=timeout))
    except ApiStatusError as exc:
        if exc.status == 409:
            return None
        raise ConfigMapError(f"creating ConfigMap {namespace}/{configmap['metadata'].get('name')} failed: {exc}") from None


def _replace(api_client: Any, namespace: str, name: str, configmap: dict, timeout: float) -> dict:
    """GET the current version and PUT ours over it (resourceVersion as precondition)."""
    current = msgspec.json.decode(request_bytes(api_client, "GET", _path(namespace, name), timeout=timeout))
    meta = {**configmap["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
    return msgspec.json.decode(request_bytes(api_client, "PUT", _path(namespace, name), body={**configmap, "metadata": meta},
                                             content_type="application/json", timeout=timeout))


def publish_configmap(api_client: Any, configmap: dict, timeout: float = 10.0, attempts: int = 3) -> dict:
    """Create `configmap` or replace the existing one, retrying races (deleted / updated meanwhile)."""
    meta = configmap.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    if not name:
        raise ConfigMapError("the ConfigMap has no metadata.name")
    configmap = {**configmap, "metadata": {**meta, "namespace": namespace}}
    last: ApiStatusError | None = None
    for _ in range(attempts):
        created = _create(api_client, namespace, configmap, timeout)
        if created is not None:
            return created
        try:
            return _replace(api_client, namespace, name, configmap, timeout)
        except ApiStatusError as exc:
            last = exc
            if exc.status not in (404, 409):
                break
    raise ConfigMapError(f"replacing ConfigMap {namespace}/{name} failed: {last}")


def publish_rank_table(api_client: Any, placement: Placement, master_addr: str, **options: Any) -> dict:
    """Build the gang's rank-table ConfigMap (`scheduler.handoff.rank_table`) and publish it."""
    bound = options.pop("bound_pods", None)
    configmap = rank_table_configmap(placement, master_addr, bound_pods=bound, **options)
    return publish_configmap(api_client, configmap)


class KubeRankTablePublisher:
    """Implements the service's `RankTablePublisher` against the API server (keeps the last copy published)."""

    def __init__(self, api_client: Any, timeout: float = 5.0, attempts: int = 3) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.attempts = attempts
        self._lock = threading.Lock()
        self._published: dict[tuple[str, str], dict] = {}

    def publish(self, configmap: dict) -> None:
        """Create or replace the ConfigMap; ConfigMapError (or the transport's error) on failure."""
        publish_configmap(self.api_client, configmap, timeout=self.timeout, attempts=self.attempts)
        meta = configmap["metadata"]
        with self._lock:
            self._published[(str(meta.get("namespace") or "default"), str(meta["name"]))] = configmap

    def get(self, namespace: str, name: str) -> dict | None:
        """The last ConfigMap published under `namespace/name` by this process, or None."""
        with self._lock:
            return self._published.get((namespace, name))
