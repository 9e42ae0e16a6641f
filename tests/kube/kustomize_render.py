"""The Kustomize base of manifests/ and its components (manifests/components/*), rendered in Python.

Tests that check the objects field by field (tests/kube) run without kubectl, so they read the objects
through `render(components)`: the base's `resources` with its `images` applied, then each component's
`resources` and its JSON 6902 `patches` (applied by the `jsonpatch` library) in the order given -- the only
kustomize features the base and components use (anything else is refused here).
tests/realk8s/test_kustomize_real.py renders every combination with `kubectl kustomize` too and checks
both give the same objects.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Iterable

import jsonpatch
import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
COMPONENTS_DIR = MANIFESTS / "components"
COMPONENTS = ("ha", "mtls", "monitoring")
"""Every component, in the order docs/deployment.md lists them."""
BASE_KEYS = {"apiVersion", "kind", "resources", "images"}
COMPONENT_KEYS = {"apiVersion", "kind", "resources", "patches"}


def combinations() -> list[tuple[str, ...]]:
    """Every subset of `COMPONENTS` (the empty one too), smallest first."""
    return [c for n in range(len(COMPONENTS) + 1) for c in itertools.combinations(COMPONENTS, n)]


def combination_id(components: Iterable[str]) -> str:
    """A test id: `base` or `base+ha+mtls`..."""
    return "+".join(("base", *components))


def identity(obj: dict) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return obj["kind"], str(meta.get("namespace") or ""), meta["name"]


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _kustomization(folder: Path, kind: str, keys: set[str]) -> dict:
    data = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert data["kind"] == kind, f"{folder}: kind {data['kind']}, expected {kind}"
    unknown = set(data) - keys
    assert not unknown, f"{folder}/kustomization.yaml uses {sorted(unknown)}: teach tests/kube/kustomize_render.py"
    return data


def base_files() -> list[str]:
    """The files the base lists (relative to manifests/)."""
    return list(_kustomization(MANIFESTS, "Kustomization", BASE_KEYS)["resources"])


def component_files(component: str) -> list[Path]:
    """The resource files a component adds."""
    folder = COMPONENTS_DIR / component
    return [folder / name for name in _kustomization(folder, "Component", COMPONENT_KEYS).get("resources") or ()]


def _set_images(objects: list[dict], images: list[dict]) -> None:
    by_name = {image["name"]: image for image in images}
    for obj in objects:
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            name, _, tag = container["image"].rpartition(":")
            if name in by_name:
                image = by_name[name]
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def _matches(obj: dict, target: dict) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    wanted = {"group": group, "version": version, "kind": obj["kind"], "name": obj["metadata"]["name"],
              "namespace": obj["metadata"].get("namespace", "")}
    unknown = set(target) - set(wanted)
    assert not unknown, f"patch target uses {sorted(unknown)}: teach tests/kube/kustomize_render.py"
    return all(wanted[key] == value for key, value in target.items())


def render(components: Iterable[str] = ()) -> list[dict]:
    """The objects `kubectl kustomize` makes of the base with `components` (in that order)."""
    base = _kustomization(MANIFESTS, "Kustomization", BASE_KEYS)
    objects = [doc for name in base["resources"] for doc in _documents(MANIFESTS / name)]
    for component in components:
        folder = COMPONENTS_DIR / component
        data = _kustomization(folder, "Component", COMPONENT_KEYS)
        objects += [doc for name in data.get("resources") or () for doc in _documents(folder / name)]
        for entry in data.get("patches") or ():
            assert set(entry) == {"target", "patch"}, f"{component}: only targeted JSON 6902 patches are rendered"
            targets = [i for i, obj in enumerate(objects) if _matches(obj, entry["target"])]
            assert len(targets) == 1, f"{component}: patch target {entry['target']} matches {len(targets)} objects"
            patch = jsonpatch.JsonPatch(yaml.safe_load(entry["patch"]))
            objects[targets[0]] = patch.apply(objects[targets[0]])
    _set_images(objects, base.get("images") or [])
    return copy.deepcopy(objects)
