"""Issue 26 item 8: the install pieces say what they really do.

- Every repository path a manifest's comments name exists (a comment pointing at a folder that was never
  made sends a platform team looking for it).
- docs/deployment.md's upgrade notes give each Deployment the strategy the manifests really set (the default,
  RollingUpdate, where they set none), in every combination of components.
- Its uninstall commands remove every Lease the install uses outside the namespace `kubectl delete -k`
  deletes (the second kube-scheduler's Lease lives in kube-system).
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.kube.kustomize_render import MANIFESTS, combination_id, combinations, render
from tests.usability.docs_blocks import ROOT, blocks

DEPLOYMENT = ROOT / "docs" / "deployment.md"
_REPO_PATH = re.compile(r"\b((?:manifests|docs|scheduler|tests)/[\w./-]*\w)")
_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=[A-Z`(*])")
STRATEGIES = ("Recreate", "RollingUpdate")


def _comment_paths() -> list[tuple[str, str]]:
    """(manifest file, repository path) for every path named in a `#` comment under manifests/."""
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for line in path.read_text().splitlines():
            comment = line.partition("#")[2] if line.lstrip().startswith("#") or " # " in line else ""
            found.extend((str(path.relative_to(ROOT)), named) for named in _REPO_PATH.findall(comment))
    return found


def test_every_repository_path_a_manifest_comment_names_exists():
    named = _comment_paths()
    assert named, "the manifests' comments name no repository path: the pattern is wrong"
    missing = [(where, path) for where, path in named if not (ROOT / path.rstrip("/.")).exists()]
    assert not missing, f"manifest comments name paths that do not exist: {missing}"


def _section(title: str) -> str:
    """The text of docs/deployment.md's `### title` section, up to the next heading."""
    text = DEPLOYMENT.read_text()
    start = text.index(f"\n### {title}\n")
    ends = [i for i in (text.find("\n## ", start + 1), text.find("\n### ", start + 1)) if i != -1]
    return text[start:min(ends)]


def _strategies_said(section: str, name: str) -> set[str]:
    """The strategies `section` says the Deployment `name` has: in its sentences "The Deployment `name` uses ..."
    or "... keeps ..." (not in sentences that only name it, such as what would happen with another strategy)."""
    sentences = _SENTENCE_END.split(" ".join(section.split()))
    said = re.compile(rf"\bDeployment `{re.escape(name)}` (?:uses|keeps)\b")
    return {s for sentence in sentences if said.search(sentence) for s in STRATEGIES if s in sentence}


@pytest.mark.parametrize("components", combinations(), ids=[combination_id(c) for c in combinations()])
def test_the_upgrade_notes_give_each_deployment_its_real_strategy(components):
    upgrade = _section("Upgrade")
    for obj in render(components):
        if obj["kind"] != "Deployment":
            continue
        name = obj["metadata"]["name"]
        real = (obj["spec"].get("strategy") or {}).get("type", "RollingUpdate")
        assert _strategies_said(upgrade, name) == {real}, f"docs/deployment.md, Upgrade: `{name}` uses {real}"


def _leases() -> set[tuple[str, str]]:
    """(namespace, name) of every Lease the install elects a leader on: meshfit's (ha) and its kube-scheduler's."""
    objects = render(("ha",))
    meshfit = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "meshfit")
    assert "--leader-elect" in meshfit["spec"]["template"]["spec"]["containers"][0]["args"]
    leases = {(meshfit["metadata"]["namespace"], "meshfit")}  # serve's --leader-elect-lease-name default
    for obj in objects:
        if obj["kind"] == "ConfigMap" and "config.yaml" in (obj.get("data") or {}):
            election = yaml.safe_load(obj["data"]["config.yaml"]).get("leaderElection") or {}
            if election.get("leaderElect"):
                leases.add((election["resourceNamespace"], election["resourceName"]))
    return leases


def test_the_uninstall_commands_remove_every_lease_outside_the_deleted_namespace():
    deleted = {o["metadata"]["name"] for o in render() if o["kind"] == "Namespace"}
    commands = "\n".join(b.text for b in blocks(DEPLOYMENT) if "kubectl delete -k" in b.text)
    outside = {lease for lease in _leases() if lease[0] not in deleted}
    assert outside, "the second kube-scheduler's Lease is in kube-system"
    for namespace, name in outside:
        assert re.search(rf"kubectl -n {namespace} delete lease {name}\b", commands), (namespace, name)
