"""Generate realistic `NodeList` / `List` objects (as `kubectl get -o json` prints them) from presets.

Deterministic for a given seed: the same arguments always give byte-identical JSON.  With
`used_fraction > 0` the result is a `List` of Nodes and running Pods that hold that fraction of the
GPUs (mostly whole-node training workers, some smaller pods, scattered at random); `unhealthy`
nodes are made NotReady, cordoned or GPU-tainted in turn.
"""

from __future__ import annotations

import random
import string
from typing import Any

from topology.model import ClusterTopology, TopologyError
from topology.presets import Preset, PresetLevel, get_preset

_BASE36 = string.digits + string.ascii_lowercase
_UNHEALTHY_KINDS = ("not-ready", "cordoned", "gpu-taint")
GPU_TAINT_KEY = "nvidia.com/gpu.unhealthy"
"""Taint key the generator puts on nodes with failed GPUs."""


def _stable_ids(seed: int, label: str, index: int) -> dict[str, str]:
    rng = random.Random(f"{seed}:{label}:{index}")
    bits = rng.getrandbits(128)
    hex_id = f"{bits:032x}"
    uuid = f"{hex_id[:8]}-{hex_id[8:12]}-4{hex_id[13:16]}-a{hex_id[17:20]}-{hex_id[20:32]}"
    return {"hex8": hex_id[:8], "hex16": hex_id[:16], "hex17": hex_id[:17], "uuid": uuid}


def _level_value(level: PresetLevel, node_index: int, seed: int) -> str:
    domain = node_index // level.nodes_per_domain if level.nodes_per_domain else 0
    return level.value.format(i=domain, **_stable_ids(seed, level.label, domain))


def _base36(number: int, width: int) -> str:
    digits = []
    for _ in range(width):
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits))


def _node_names(preset: Preset, nodes: int, seed: int) -> list[str]:
    suffixes = random.Random(f"{seed}:names").sample(range(36**4), nodes)
    names = []
    for i, suffix in enumerate(suffixes):
        names.append(preset.node_name.format(
            i=i, rack=i // 18, slot=i % 18, pool=_stable_ids(seed, "pool", i // 128)["hex8"],
            hex4=_base36(suffix, 4), b=(i // 254) // 256, c=(i // 254) % 256, d=i % 254 + 1))
    return names


def _node_labels(preset: Preset, name: str, index: int, nodes: int, seed: int) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": preset.architecture,
        "node.kubernetes.io/instance-type": preset.instance_type,
        "nvidia.com/gpu.product": preset.gpu_product, "nvidia.com/gpu.count": str(preset.gpus_per_node),
        "nvidia.com/gpu.present": "true",
    }
    labels.update(preset.extra_labels)
    for level in preset.levels:
        if nodes > level.min_nodes:
            labels[level.label] = _level_value(level, index, seed)
    return labels


def _node_info(preset: Preset, seed: int, index: int) -> dict[str, str]:
    """`status.nodeInfo` with every field the API marks required (typed clients refuse a Node without them)."""
    ids = _stable_ids(seed, "node", index)
    return {"architecture": preset.architecture, "bootID": _stable_ids(seed, "boot", index)["uuid"],
            "containerRuntimeVersion": "containerd://1.7.20", "kernelVersion": "5.15.0-119-generic",
            "kubeProxyVersion": "", "kubeletVersion": "v1.30.4", "machineID": ids["uuid"].replace("-", ""),
            "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS", "systemUUID": ids["uuid"]}


def _node_object(preset: Preset, name: str, labels: dict[str, str], node_info: dict[str, str]) -> dict[str, Any]:
    resources = {"cpu": preset.cpu, "memory": preset.memory, "ephemeral-storage": "3748905484Ki",
                 "nvidia.com/gpu": str(preset.gpus_per_node), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": dict(resources), "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "nodeInfo": node_info,
        },
    }


def _make_unhealthy(node: dict[str, Any], kind: str) -> None:
    spec, status = node["spec"], node["status"]
    if kind == "not-ready":
        status["conditions"][0].update(status="False", reason="KubeletNotReady", message="PLEG is not healthy")
        spec["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    elif kind == "cordoned":
        spec["unschedulable"] = True
        spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    else:
        spec["taints"] = [{"key": GPU_TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"}]


def _pod_object(job: int, node_name: str, gpus: int, resource: str) -> dict[str, Any]:
    gpu = {resource: str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"train-{job:05d}-worker-0", "namespace": f"team-{'abc'[job % 3]}",
                     "labels": {"app": "training", "job-name": f"train-{job:05d}"}},
        "spec": {"nodeName": node_name, "containers": [{
            "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"requests": {**gpu, "cpu": "16"}, "limits": dict(gpu)}}]},
        "status": {"phase": "Running"},
    }


def _busy_pods(preset: Preset, names: list[str], healthy: list[int], target: int, seed: int) -> list[dict[str, Any]]:
    """Running pods that hold `target` GPUs on healthy nodes: whole-node workers and a few smaller ones."""
    rng = random.Random(f"{seed}:pods")
    gpn = preset.gpus_per_node
    sizes = [gpn] * 6 + [s for s in (1, 2, 4) if s < gpn]
    free = {i: gpn for i in healthy}
    open_nodes = list(healthy)
    pods: list[dict[str, Any]] = []
    used = 0
    while used < target and open_nodes:
        slot = rng.randrange(len(open_nodes))
        node = open_nodes[slot]
        gpus = min(rng.choice(sizes), free[node], target - used)
        pods.append(_pod_object(len(pods), names[node], gpus, "nvidia.com/gpu"))
        free[node] -= gpus
        used += gpus
        if free[node] == 0:
            open_nodes[slot] = open_nodes[-1]
            open_nodes.pop()
    return pods


def _check_arguments(nodes: int, used_fraction: float, unhealthy: int) -> None:
    if nodes < 1:
        raise TopologyError(f"--nodes must be at least 1, got {nodes}")
    if not 0.0 <= used_fraction <= 1.0:
        raise TopologyError(f"--used-fraction must be between 0 and 1, got {used_fraction}")
    if not 0 <= unhealthy <= nodes:
        raise TopologyError(f"--unhealthy must be between 0 and the node count ({nodes}), got {unhealthy}")


def generate_nodelist(
    preset: str, nodes: int, seed: int = 0, used_fraction: float = 0.0, unhealthy: int = 0,
) -> dict[str, Any]:
    """A `NodeList` (or a `List` of Nodes and running Pods when `used_fraction > 0`) for a preset."""
    _check_arguments(nodes, used_fraction, unhealthy)
    spec = get_preset(preset)
    names = _node_names(spec, nodes, seed)
    items = [_node_object(spec, name, _node_labels(spec, name, i, nodes, seed), _node_info(spec, seed, i))
             for i, name in enumerate(names)]
    broken = sorted(random.Random(f"{seed}:unhealthy").sample(range(nodes), unhealthy))
    for k, index in enumerate(broken):
        _make_unhealthy(items[index], _UNHEALTHY_KINDS[k % len(_UNHEALTHY_KINDS)])
    broken_set = set(broken)
    healthy = [i for i in range(nodes) if i not in broken_set]
    target = round(used_fraction * nodes * spec.gpus_per_node)
    pods = _busy_pods(spec, names, healthy, target, seed) if target else []
    return {"apiVersion": "v1", "kind": "List" if pods else "NodeList",
            "metadata": {"resourceVersion": ""}, "items": items + pods}


def generate_cluster(
    preset: str, nodes: int, seed: int = 0, used_fraction: float = 0.0, unhealthy: int = 0,
) -> ClusterTopology:
    """The `ClusterTopology` of `generate_nodelist(...)`, with the preset's default links."""
    from topology.loaders import topology_from_objects

    nodelist = generate_nodelist(preset, nodes, seed, used_fraction, unhealthy)
    return topology_from_objects(nodelist["items"], {"profile": get_preset(preset).link_profile})
