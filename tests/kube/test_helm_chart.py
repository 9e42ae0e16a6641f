"""The Helm chart charts/meshfit against the Kustomize base and components it mirrors.

- `helm lint --strict` is clean, with every switch off and on.
- For every combination of ha, mtls and monitoring, `helm template` (in meshfit-system, `namespace.create=true`)
  renders exactly the objects of the Kustomize render of the same combination (tests/kube/kustomize_render.py,
  which tests/realk8s/test_kustomize_real.py keeps equal to `kubectl kustomize`), field for field.
- values.schema.json closes every object (additionalProperties: false): a misspelled key fails the install.
- managedControlPlane renders the toleration policy for the configured taint, and nothing without it.
tests/realk8s/test_helm_real.py sends every combination through a server-side dry run on a real kube-apiserver.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests.kube.helm_chart import (CHART, by_identity, like_kustomize, require_helm, run_helm, template,
                                   value_flags)
from tests.kube.kustomize_render import COMPONENTS, combination_id, combinations, identity, render

COMBINATIONS = combinations()
IDS = [combination_id(c) for c in COMBINATIONS]
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary (a skip naming k8sbuild/build_helm.sh without one; a failure under CI=true)."""
    return require_helm()


@pytest.mark.parametrize("extra", [{}, {**{f"{c}.enabled": "true" for c in COMPONENTS},
                                        "managedControlPlane.enabled": "true", "namespace.create": "true"}],
                         ids=["defaults", "every-switch-on"])
def test_helm_lint_is_clean(helm, extra):
    result = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", "meshfit-system",
                      *value_flags((), extra))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


SCHEDULER_CONFIG = ("ConfigMap", "kube-system", "meshfit-scheduler-config")


def comparable(objects: list[dict]) -> dict:
    """Objects by identity, the scheduler configuration's text without its final newline (the mtls component's
    JSON patch, a `|-` block, drops it; the chart's ends every line alike). Everything else is compared as is."""
    out = by_identity(objects)
    if SCHEDULER_CONFIG in out:
        data = out[SCHEDULER_CONFIG]["data"]
        data["config.yaml"] = data["config.yaml"].rstrip("\n")
    return out


@pytest.mark.parametrize("components", COMBINATIONS, ids=IDS)
def test_helm_template_renders_what_kustomize_renders(helm, components):
    charted = comparable(like_kustomize(helm, components))
    kustomized = comparable(render(components))
    assert sorted(charted) == sorted(kustomized), "objects differ: " + str(
        sorted(set(charted) ^ set(kustomized)))
    for key, expected in kustomized.items():
        assert charted[key] == expected, key


def test_a_default_install_leaves_the_namespace_to_helm(helm):
    """`helm install -n meshfit-system` into a namespace made beforehand: the chart does not render it (Helm
    cannot adopt a namespace it did not create), and everything else is the base's."""
    objects = by_identity(template(helm))
    base = by_identity(render(()))
    assert set(base) - set(objects) == {("Namespace", "", "meshfit-system")}
    assert set(objects) == set(base) - {("Namespace", "", "meshfit-system")}


def test_another_release_namespace_is_followed_everywhere(helm):
    """Installed in `gpu-sched`, meshfit's objects, its RBAC subject, the scheduler's URL and the ServiceMonitor
    all name that namespace."""
    objects = template(helm, ("mtls", "monitoring"), namespace="gpu-sched")
    text = yaml.safe_dump_all(objects)
    assert "meshfit-system" not in text
    by_id = by_identity(objects)
    assert ("Deployment", "gpu-sched", "meshfit") in by_id
    config = yaml.safe_load(by_id[("ConfigMap", "kube-system", "meshfit-scheduler-config")]["data"]["config.yaml"])
    assert {e["urlPrefix"] for e in config["extenders"]} == {"https://meshfit.gpu-sched.svc:8888/scheduler"}


@pytest.mark.parametrize("key", ["ha.enabeld", "mtls.enable", "image.tagg", "monitorng.enabled",
                                 "managedControlPlane.gpuNodeTaint.efect", "scheduler.image.version"])
def test_an_unknown_value_key_is_refused(helm, key):
    result = run_helm(helm, "template", "meshfit", str(CHART), "--set", f"{key}=x")
    assert result.returncode != 0
    assert "additional properties" in result.stderr.lower() or "additionalproperties" in result.stderr.lower(), (
        result.stderr)


def closed_objects(schema: dict, path: str = "") -> list[str]:
    """Paths of the schema's objects that leave additionalProperties open (`global` excepted: Helm's own)."""
    open_paths = []
    if schema.get("type") == "object" and path != ".global" and schema.get("additionalProperties") is not False:
        open_paths.append(path or ".")
    for name, sub in (schema.get("properties") or {}).items():
        open_paths += closed_objects(sub, f"{path}.{name}")
    return open_paths


def test_the_values_schema_closes_every_object():
    assert closed_objects(SCHEMA) == []


def test_values_yaml_is_valid_and_every_key_is_in_the_schema():
    jsonschema.Draft7Validator(SCHEMA).validate(VALUES)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate({**VALUES, "replicas": 2})


def test_every_value_is_documented():
    """Each key of values.yaml has a comment line right above it (`# -- ...` or a plain comment)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        above = lines[number - 1].strip() if number else ""
        is_parent = stripped.endswith(":")
        if not above.startswith("#") and not is_parent:
            undocumented.append(stripped)
    assert undocumented == []


def test_the_managed_control_plane_switch_renders_the_toleration_policy(helm):
    assert not [o for o in template(helm) if o["kind"].startswith("ValidatingAdmissionPolicy")]
    objects = by_identity(template(helm, (), {"managedControlPlane.enabled": "true",
                                              "managedControlPlane.gpuNodeTaint.key": "example.com/gpu-only"}))
    policy = objects[("ValidatingAdmissionPolicy", "", "meshfit-gpu-toleration")]
    binding = objects[("ValidatingAdmissionPolicyBinding", "", "meshfit-gpu-toleration")]
    assert binding["spec"] == {"policyName": "meshfit-gpu-toleration", "validationActions": ["Deny"]}
    (validation,) = policy["spec"]["validations"]
    assert "'example.com/gpu-only'" in validation["expression"] and "example.com/gpu-only" in validation["message"]
    assert {c["name"] for c in policy["spec"]["matchConditions"]} == {"meshfit-profile", "requests-gpus"}


def test_every_object_is_named_once_and_valid(helm):
    from tests.kube.test_manifests import validate
    objects = template(helm, COMPONENTS, {"managedControlPlane.enabled": "true", "namespace.create": "true"})
    assert len({identity(o) for o in objects}) == len(objects)
    errors = {identity(o): validate(o) for o in objects
              if not o["kind"].startswith("ValidatingAdmissionPolicy")}
    assert not {k: v for k, v in errors.items() if v}
