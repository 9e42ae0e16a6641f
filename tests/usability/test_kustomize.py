"""The Kustomize base in manifests/ builds (`kubectl apply -k manifests/`): every listed file exists and parses,
the image it sets is one the manifests use, and, when kubectl is installed, `kubectl kustomize` renders exactly
those objects and an overlay can change the image.  Server-side dry run is tests/realk8s's job."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def _kustomization() -> dict:
    return yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())


def _identity(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj["kind"], str(meta.get("namespace") or ""), meta["name"]


def python_render() -> list[dict]:
    """What the base's `resources` list holds (a minimal kustomize: files, in order, documents concatenated)."""
    objects = []
    for entry in _kustomization()["resources"]:
        path = MANIFESTS / entry
        assert path.is_file() and path.resolve().parent == MANIFESTS.resolve(), entry
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def test_base_lists_existing_manifests_and_sets_an_image_they_use():
    kustomization = _kustomization()
    assert kustomization["kind"] == "Kustomization" and "meshfit.yaml" in kustomization["resources"]
    objects = python_render()
    assert ("Deployment", "meshfit-system", "meshfit") in {_identity(o) for o in objects}
    images = {c["image"].rpartition(":")[0] for o in objects if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert {entry["name"] for entry in kustomization["images"]} <= images


@pytest.fixture(scope="module")
def kubectl() -> str:
    """The kubectl binary, or a skip with the reason."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed (Debian: apt-get install kubernetes-client); the Python check ran")
    return found


def _kustomize(kubectl: str, folder: Path) -> list[dict]:
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kubectl_kustomize_renders_exactly_the_listed_objects(kubectl):
    rendered = _kustomize(kubectl, MANIFESTS)
    assert sorted(map(_identity, rendered)) == sorted(map(_identity, python_render()))


def test_an_overlay_sets_the_image(kubectl, tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(MANIFESTS, tmp_path)],
        "images": [{"name": "ghcr.io/meshfit/meshfit", "newName": "registry.example.com/meshfit", "newTag": "1.2.3"}]}))
    deployment = next(o for o in _kustomize(kubectl, tmp_path) if _identity(o) == ("Deployment", "meshfit-system",
                                                                                   "meshfit"))
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/meshfit:1.2.3"
