"""A real Kueue (version in the test id) on the real control plane: the example manifest, and meshfit's
admission check controller activating a check and answering Workloads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.realk8s.cluster_builders import wait_for
from tests.realk8s.kueue_objects import admission_check, condition

pytestmark = pytest.mark.realk8s

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "kueue-example.yaml"


def example_objects(namespace: str) -> list[dict]:
    """manifests/kueue-example.yaml, its LocalQueue moved into the test's namespace."""
    objects = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for obj in objects:
        if obj["metadata"].get("namespace"):
            obj["metadata"]["namespace"] = namespace
    return objects


def test_example_manifest_applies_and_meshfit_activates_its_check(kube, kueue_objects, meshfit_scheduler):
    """Every object of the example is accepted by Kueue's webhooks at v1beta2; with meshfit running, its
    AdmissionCheck turns Active and so does the ClusterQueue listing it."""
    for obj in example_objects(kube.namespace):
        kueue_objects.create(obj)
    meshfit_scheduler()
    check = wait_for(lambda: (c := condition(kueue_objects.get("AdmissionCheck", "meshfit-topology"), "Active"))
                     and c["status"] == "True" and c, timeout=60, message="AdmissionCheck Active",
                     describe=kube.tail_logs)
    assert check["reason"] == "Active"
    queue = wait_for(lambda: (c := condition(kueue_objects.get("ClusterQueue", "training"), "Active"))
                     and c["status"] == "True" and c, timeout=60, message="ClusterQueue Active",
                     describe=kube.tail_logs)
    assert queue["status"] == "True"


def test_a_check_for_another_controller_is_left_alone(kube, kueue_objects, meshfit_scheduler):
    """meshfit sets `Active` only on checks whose controllerName is meshfit.io/topology."""
    kueue_objects.create(admission_check(f"{kube.namespace}-other", controller="example.com/other"))
    kueue_objects.create(admission_check(f"{kube.namespace}-mine"))
    meshfit_scheduler()
    wait_for(lambda: condition(kueue_objects.get("AdmissionCheck", f"{kube.namespace}-mine"), "Active"),
             timeout=60, message="meshfit's check Active", describe=kube.tail_logs)
    assert condition(kueue_objects.get("AdmissionCheck", f"{kube.namespace}-other"), "Active") is None
