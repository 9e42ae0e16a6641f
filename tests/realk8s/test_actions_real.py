"""`KubeActions` and `KubeBinder` against the real API server: what the gang lifecycle relies on."""

from __future__ import annotations

import pytest

from scheduler.kube.actions import ANNOTATION_RESERVED_NODE, KubeActions
from scheduler.kube.binder import KubeBinder
from scheduler.service.lifecycle.actions import EVENT_WARNING, PodRef
from tests.realk8s.cluster_builders import create_nodes, gang_pod_body

pytestmark = [pytest.mark.realk8s, pytest.mark.k8s_versions(
    every=True, why="what kube-apiserver keeps of a nomination and a Binding's annotations differs by version")]


def pod_ref(kube, name: str = "g-worker-0") -> PodRef:
    """Create one gang pod (nobody schedules it) and return its reference with the uid."""
    created = kube.core.create_namespaced_pod(kube.namespace, gang_pod_body(kube.namespace, "g", 0, 2, 8, "tp=8,dp=2"))
    return PodRef(kube.namespace, created.metadata.name, created.metadata.uid)


def test_requeue_nominates_the_node_and_touches_the_annotations(kube):
    create_nodes(kube.core, 1)
    ref = pod_ref(kube)
    KubeActions(kube.api_client).requeue(ref, "n000")
    pod = kube.core.read_namespaced_pod(ref.name, kube.namespace)
    assert pod.status.nominated_node_name == "n000"
    assert pod.metadata.annotations[ANNOTATION_RESERVED_NODE] == "n000"
    assert "meshfit.io/requeued-at" in pod.metadata.annotations


def test_evict_deletes_the_pod_and_tolerates_it_being_gone(kube):
    ref = pod_ref(kube)
    actions = KubeActions(kube.api_client)
    actions.evict(ref, "rolled back")
    assert ref.name not in {p.metadata.name for p in kube.core.list_namespaced_pod(kube.namespace).items
                            if p.metadata.deletion_timestamp is None}
    actions.evict(ref, "rolled back")  # already gone: no error


def test_event_is_recorded_on_the_pod(kube):
    ref = pod_ref(kube)
    KubeActions(kube.api_client).event(ref, "GangRolledBack", "gang rolled back: test", EVENT_WARNING)
    [event] = kube.core.list_namespaced_event(kube.namespace, field_selector=f"involvedObject.name={ref.name}").items
    assert (event.reason, event.type, event.source.component, event.involved_object.uid) == \
        ("GangRolledBack", "Warning", "meshfit", ref.uid)


def test_binding_carries_the_assignment_annotations_atomically(kube):
    create_nodes(kube.core, 1)
    ref = pod_ref(kube)
    KubeBinder(kube.api_client).bind(ref.namespace, ref.name, ref.uid, "n000",
                                     {"meshfit.io/ranks": "0-7", "meshfit.io/master-addr": "n000"})
    pod = kube.core.read_namespaced_pod(ref.name, kube.namespace)
    assert pod.spec.node_name == "n000"
    assert pod.metadata.annotations["meshfit.io/ranks"] == "0-7"
