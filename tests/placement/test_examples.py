"""The shipped example manifests: each is placed on every preset its `# fits-presets:` line claims, and a
preset it leaves out is refused with a reason (never silently dropped from the claim)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.placement.engine import place
from scheduler.handoff.manifests import load_job
from tests.builders import make_cluster
from topology.presets import PRESETS

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
EXAMPLES = sorted([MANIFESTS / "example-pytorchjob.yaml", *(MANIFESTS / "examples").glob("*.yaml")])
CLUSTER_NODES = 32


def claimed_presets(path: Path) -> list[str]:
    """The presets named on the example's `# fits-presets:` comment line."""
    match = re.search(r"^# fits-presets: (.+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} has no '# fits-presets:' line"
    return [name.strip() for name in match.group(1).split(",")]


@pytest.fixture(scope="module")
def clusters():
    return {name: make_cluster(name, nodes=CLUSTER_NODES) for name in PRESETS}


def test_every_kind_has_an_example():
    kinds = {load_job(path).key for path in EXAMPLES}
    assert len(EXAMPLES) >= 5 and len(kinds) == len(EXAMPLES)
    names = {path.name for path in EXAMPLES}
    assert {"jobset.yaml", "trainjob.yaml", "volcano-job.yaml", "indexed-job.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_fits_every_preset_it_claims(path, clusters):
    claimed = claimed_presets(path)
    assert set(claimed) <= set(PRESETS), f"unknown preset in {path.name}: {claimed}"
    gang = load_job(path)
    for preset, topo in clusters.items():
        placement = place(gang, topo, "meshfit")
        if preset in claimed:
            assert placement.placed, f"{path.name} on {preset}: {placement.reason}"
        else:
            assert not placement.placed and placement.reason
