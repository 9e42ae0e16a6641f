"""The Kustomize base in manifests/ builds (`kubectl apply -k manifests/`): every listed file exists and parses,
the image it sets is one the manifests use, and, when kubectl is installed, `kubectl kustomize` renders exactly
those objects and an overlay can change the image.  Server-side dry run is tests/realk8s's job."""

from __future__ import annotations

import os
import re
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


# ----- the image reference and the documented overlay ---------------------------------------------------
REPO = MANIFESTS.parent
IMAGE = "ghcr.io/meshfit/meshfit"


def package_version() -> str:
    """The version in pyproject.toml."""
    import tomllib  # noqa: PLC0415

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_one_image_reference_everywhere_matching_the_package_version():
    """The image is `ghcr.io/meshfit/meshfit:<package version>` in the manifests, the base's `images`, the
    Dockerfile's label and build line, and every `image:` a document shows for meshfit (no placeholder
    registry: a user's own registry goes in the overlay's `images`, as docs/deployment.md says)."""
    version = package_version()
    reference = f"{IMAGE}:{version}"
    (meshfit,) = [o for o in python_render() if _identity(o) == ("Deployment", "meshfit-system", "meshfit")]
    assert meshfit["spec"]["template"]["spec"]["containers"][0]["image"] == reference
    assert {"name": IMAGE, "newTag": version} in _kustomization()["images"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"ARG VERSION={version}\n" in dockerfile and f"docker build -t {reference} ." in dockerfile
    shown = []
    for document in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in document.read_text().splitlines():
            found = re.search(r"\bimage:\s*(\S+)", line)
            if found and "meshfit" in found.group(1).rsplit("/", 1)[-1]:
                shown.append((document.name, found.group(1)))
    assert shown and all(image == reference for _, image in shown), shown


def documented_overlay() -> dict:
    """The recommended overlay of docs/deployment.md (the yaml block that lists `components`)."""
    text = (REPO / "docs" / "deployment.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    (overlay,) = [b for b in blocks if isinstance(b, dict) and "components" in b]
    return overlay


def test_the_documented_overlay_uses_every_component_and_sets_both_images(kubectl, tmp_path):
    overlay = documented_overlay()
    assert overlay["resources"] == ["../manifests"]
    assert overlay["components"] == [f"../manifests/components/{c}" for c in ("ha", "mtls", "monitoring")]
    folder = tmp_path / "my-meshfit"
    folder.mkdir()
    (tmp_path / "manifests").symlink_to(MANIFESTS)  # `next to the manifests/ folder`, as the page says
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    rendered = {_identity(o): o for o in _kustomize(kubectl, folder)}
    images = {_identity(o)[2]: o["spec"]["template"]["spec"]["containers"][0]["image"]
              for o in rendered.values() if o["kind"] == "Deployment"}
    assert images == {"meshfit": "registry.example.com/meshfit:0.1.0",
                      "meshfit-scheduler": "registry.k8s.io/kube-scheduler:v1.35.4"}
    assert ("PrometheusRule", "meshfit-system", "meshfit") in rendered
    assert rendered[("Deployment", "meshfit-system", "meshfit")]["spec"]["replicas"] == 2
