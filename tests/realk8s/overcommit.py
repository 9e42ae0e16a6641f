"""Over-commit of any resource, read back from the API server: what the kubelet would refuse to admit.

Independent of meshfit's own accounting (`scheduler.kube.node_fit`): a test oracle, not a copy of the code under test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

FINISHED = ("Succeeded", "Failed")


def pod_resources(pod: dict) -> dict[str, Decimal]:
    """Every resource a pod takes on its node as the kubelet admits it: app containers summed (limits stand in for
    missing requests), each init container's maximum, the overhead, and one of `pods`."""

    def requests(container: dict) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: Decimal(parse_quantity(value)) for name, value in merged.items()}

    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.get("containers") or ():
        for name, value in requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or ():
        for name, value in requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += Decimal(parse_quantity(value))
    total["pods"] += 1
    return dict(total)


def node_resources(node: dict, field: str = "allocatable") -> dict[str, Decimal]:
    """A Node's `status.allocatable` (or `capacity`), every resource."""
    return {name: Decimal(parse_quantity(value))
            for name, value in (((node.get("status") or {}).get(field)) or {}).items()}


def overcommitted(pods: list[dict], nodes: list[dict], field: str = "allocatable") -> dict[str, dict[str, str]]:
    """{node: {resource: "requested > available (pods)"}} for every node whose bound, unfinished pods request more of
    some resource than it has."""
    on_node: dict[str, list[dict]] = defaultdict(list)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in FINISHED:
            on_node[node].append(pod)
    found: dict[str, dict[str, str]] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        have = node_resources(node, field)
        total: dict[str, Decimal] = defaultdict(Decimal)
        for pod in on_node.get(name, ()):
            for resource, value in pod_resources(pod).items():
                total[resource] += value
        over = {r: f"{v} > {have.get(r, Decimal(0))} ({', '.join(p['metadata']['name'] for p in on_node[name])})"
                for r, v in total.items() if v > 0 and v > have.get(r, Decimal(0))}
        if over:
            found[name] = over
    return found


def raw_list(core: Any, what: str) -> list[dict]:
    """Every pod (`what="pods"`) or node (`"nodes"`) as raw JSON (no client models: fast enough to poll)."""
    call = core.list_pod_for_all_namespaces if what == "pods" else core.list_node
    return json.loads(call(_preload_content=False).data).get("items") or []


def assert_no_overcommit(core: Any) -> None:
    """No node is over-committed on any resource (GPUs, cpu, memory, pods, extended resources)."""
    over = overcommitted(raw_list(core, "pods"), raw_list(core, "nodes"))
    assert not over, f"over-committed nodes (requested > allocatable, pods there): {over}"
