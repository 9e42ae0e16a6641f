"""Issue 22 item 11: docs/deployment.md walks from an empty cluster to a placed job and says how a training image
gets `meshfit` for its `meshfit launch` entrypoint; the init-container way it documents works as written."""

from __future__ import annotations

import json
import subprocess
import tomllib

import yaml
from typer.testing import CliRunner

from scheduler.cli import app
from tests.usability.docs_blocks import ROOT, blocks

DEPLOYMENT = ROOT / "docs" / "deployment.md"
PODINFO = ROOT / "tests" / "runtime" / "fixtures" / "podinfo-annotations"
RUNNER = CliRunner()


def test_the_walkthrough_goes_from_an_empty_cluster_to_a_placed_job():
    text = DEPLOYMENT.read_text()
    steps = [line for line in text.splitlines() if line.startswith("## ")]
    for words in ("What you need", "command line", "service image", "Kustomize", "training image", "first job"):
        assert any(words in step for step in steps), words
    assert "kubectl apply -k" in text and "schedulerName: meshfit" in text and "meshfit gangs" in text


def test_the_training_image_recipe_names_the_current_wheel():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    [dockerfile] = [b for b in blocks(DEPLOYMENT) if b.language == "dockerfile"]
    assert f"meshfit-{version}-py3-none-any.whl" in dockerfile.text
    assert "python3 -m venv /opt/meshfit" in dockerfile.text and "ln -s /opt/meshfit/bin/meshfit" in dockerfile.text


def test_the_init_container_recipe_mounts_what_launch_reads():
    [template] = [yaml.safe_load(b.text) for b in blocks(DEPLOYMENT) if b.language == "yaml" and "initContainers" in b.text]
    init, trainer = template["initContainers"][0], template["containers"][0]
    assert "meshfit launch --print-env > /meshfit/env" in init["command"][-1]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/etc/podinfo", "/meshfit"}
    assert ". /meshfit/env" in trainer["command"][-1]


def test_print_env_is_read_back_exactly_by_the_shell(tmp_path):
    fabric = tmp_path / "fabric.yaml"
    fabric.write_text(yaml.safe_dump({"fabrics": [{"name": "any", "match": {},
                                                   "env": {"NCCL_DEBUG_SUBSYS": "INIT NET", "NCCL_X": "a'b$c"}}]}))
    labels = tmp_path / "labels.json"
    labels.write_text("{}")
    common = ["launch", "--annotations-file", str(PODINFO), "--print-env", "--fabric-config", str(fabric),
              "--node-labels", str(labels)]
    as_json = RUNNER.invoke(app, [*common, "-o", "json"])
    as_lines = RUNNER.invoke(app, common)
    assert as_json.exit_code == 0 and as_lines.exit_code == 0, as_json.output + as_lines.output
    expected = json.loads(as_json.stdout)
    env_file = tmp_path / "env"
    env_file.write_text(as_lines.stdout)
    names = " ".join(expected)
    script = f"set -a && . {env_file} && set +a && for n in {names}; do printf '%s=%s\\0' \"$n\" \"${{!n}}\"; done"
    read_back = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={}).stdout
    assert dict(item.split("=", 1) for item in read_back.split("\0") if item) == expected
    assert expected["NCCL_DEBUG_SUBSYS"] == "INIT NET" and expected["RANK"] == "8"
