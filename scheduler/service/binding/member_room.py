"""How many members of one shape fit on each node besides their GPUs: the room CPU-aware placement offers a gang."""

from __future__ import annotations

from typing import Any, Callable, Mapping


def member_room(record: Any, nodes: Mapping[str, Any], refusal: Callable[[str, Mapping[str, Any]], str]) -> dict[str, int]:
    """Node -> GPUs that members asking what `record` asks can use there: as many members as pass kube-scheduler's
    node-local filters on everything together (`refusal(node, extra requests)` is "" when one more fits beside
    `extra` and all the room ledger counts there), times the member's GPUs;
    only nodes where one fits.  Two 4-GPU members on one 8-GPU node need their CPU and memory twice: a node with
    room for one member's CPU offers 4 GPUs, not 8."""
    room: dict[str, int] = {}
    for name, node in nodes.items():
        if node.gpus_free < record.gpus:
            continue
        if refusal(name, {}):
            continue
        copies, most = 1, node.gpus_free // record.gpus if record.gpus else 1
        while copies < most:
            more: dict[str, Any] = {}
            for resource, value in record.needs.requests.items():
                more[resource] = more.get(resource, 0) + copies * value
            if refusal(name, more):
                break
            copies += 1
        room[name] = copies * record.gpus if record.gpus else node.gpus_free
    return room
