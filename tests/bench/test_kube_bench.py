"""Benchmarks of the Kubernetes adapters: decoding a large PodList, and gang identification per pod.

The PodList has 10,000 pods under `MESHFIT_FULL_TESTS=1` and 1,000 in the default (smoke) run."""

from __future__ import annotations

import json

import pytest

from plugins.gangs import identify
from scheduler.kube.cache import _list_decoder
from tests.kube.gang_builders import ObjectStore, jobset_pods, make_jobset
from tests.sizes import pick

PODS = pick(1_000, 10_000)


@pytest.fixture(scope="module")
def pod_list_bytes() -> bytes:
    """A `PODS`-pod PodList as the API server would send it (JobSet pods, 8 GPUs each)."""
    jobset = make_jobset("big", [("w", PODS // 4, 4)])
    items = []
    for pod in jobset_pods(jobset):
        pod.pop("apiVersion"), pod.pop("kind")
        pod["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update",
                                             "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
        items.append(pod)
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"},
                       "items": items}).encode()


def test_decode_10k_pod_list_msgspec(benchmark, pod_list_bytes):
    decoded = benchmark(_list_decoder.decode, pod_list_bytes)
    assert len(decoded.items) == PODS


def test_decode_10k_pod_list_kubernetes_models(benchmark, pod_list_bytes):
    """The path meshfit avoids: the client's model classes (for comparison only)."""
    import kubernetes

    client = kubernetes.client.ApiClient()
    data = json.loads(pod_list_bytes)
    decoded = benchmark.pedantic(client._ApiClient__deserialize, args=(data, "V1PodList"), rounds=1, iterations=1)
    assert len(decoded.items) == PODS


def test_identify_jobset_member(benchmark):
    jobset = make_jobset("big", [("w", 256, 4)])
    jobset["metadata"].update(uid="uid-big", resourceVersion="7")  # as the API serves it
    pods = jobset_pods(jobset)
    store = ObjectStore(jobset)
    member = benchmark(identify, pods[777], store)
    assert member.index == 777 and member.size == 1024
