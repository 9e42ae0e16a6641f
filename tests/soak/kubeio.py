"""Thin, fast API calls for the soak's threads: raw JSON lists (no client models), creates and deletes that
tolerate the races a busy cluster has (already exists, already gone)."""

from __future__ import annotations

import json
from typing import Any


GPU = "nvidia.com/gpu"


def new_client(kubeconfig: str) -> Any:
    """A `kubernetes` ApiClient of its own (one per thread: no shared connection pool)."""
    from kubernetes import config
    return config.new_client_from_config(config_file=str(kubeconfig))


def core(api_client: Any) -> Any:
    """CoreV1Api over `api_client`."""
    from kubernetes.client import CoreV1Api
    return CoreV1Api(api_client)


def _items(response: Any) -> list[dict]:
    return json.loads(response.data)["items"]


def list_pods(core_api: Any, namespace: str | None = None) -> list[dict]:
    """Every pod (of `namespace`, else all namespaces) as plain dicts, from the API server's watch cache."""
    if namespace:
        return _items(core_api.list_namespaced_pod(namespace, resource_version="0", _preload_content=False))
    return _items(core_api.list_pod_for_all_namespaces(resource_version="0", _preload_content=False))


def list_nodes(core_api: Any) -> list[dict]:
    """Every Node as plain dicts, from the watch cache."""
    return _items(core_api.list_node(resource_version="0", _preload_content=False))


def create_pod(core_api: Any, namespace: str, body: dict) -> bool:
    """Create a pod; False when one of that name still exists (409)."""
    from kubernetes.client.exceptions import ApiException
    try:
        core_api.create_namespaced_pod(namespace, body, _preload_content=False)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def delete_pod(core_api: Any, namespace: str, name: str, grace: int | None = None, uid: str | None = None) -> bool:
    """Delete a pod (with `grace` seconds, and only that `uid` when given); False when it is already gone."""
    from kubernetes.client import V1DeleteOptions, V1Preconditions
    from kubernetes.client.exceptions import ApiException
    options = V1DeleteOptions(grace_period_seconds=grace,
                              preconditions=V1Preconditions(uid=uid) if uid else None)
    try:
        core_api.delete_namespaced_pod(name, namespace, body=options, _preload_content=False)
        return True
    except ApiException as exc:
        if exc.status in (404, 409):  # gone, or a newer pod of that name (uid precondition)
            return False
        raise


def lease_holder(api_client: Any, namespace: str, name: str = "meshfit") -> str | None:
    """The Lease's holderIdentity, None when there is no Lease or no holder."""
    from kubernetes.client import CoordinationV1Api
    from kubernetes.client.exceptions import ApiException
    try:
        response = CoordinationV1Api(api_client).read_namespaced_lease(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return (json.loads(response.data).get("spec") or {}).get("holderIdentity") or None


def pod_gpus(pod: dict) -> int:
    """GPUs a pod requests (app containers; limits when no request)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(GPU, (resources.get("limits") or {}).get(GPU, 0))
        total += int(value)
    return total


def node_gpus(node: dict, field: str) -> int:
    """A Node's `status.capacity` or `status.allocatable` GPUs."""
    return int(((node.get("status") or {}).get(field) or {}).get(GPU, 0))


def terminating(pod: dict) -> bool:
    """True once a deletion was requested."""
    return bool(pod["metadata"].get("deletionTimestamp"))


def node_name(pod: dict) -> str | None:
    """The node the pod is bound to, None while pending."""
    return (pod.get("spec") or {}).get("nodeName") or None
