"""Every combination of the Kustomize components (manifests/components/{ha,mtls,monitoring}), rendered in Python
(tests/kube/kustomize_render.py, which tests/realk8s/test_kustomize_real.py keeps equal to `kubectl kustomize`):
each object strictly valid, and each component doing what it says and nothing else -- ha the replicas, the
election flag, its Lease RBAC and the disruption budget; mtls the TLS flags, the Secrets, HTTPS probes and the
scheduler's TLS config (manifests/kube-scheduler-config.yaml verbatim); monitoring its three objects."""

from __future__ import annotations

import pytest
import yaml

from tests.kube.kustomize_render import MANIFESTS, combination_id, combinations, identity, render
from tests.kube.test_manifests import validate

COMBINATIONS = combinations()
IDS = [combination_id(c) for c in COMBINATIONS]


def by_identity(components) -> dict:
    """The render of `components`, by (kind, namespace, name)."""
    return {identity(o): o for o in render(components)}


def meshfit_container(objects: dict) -> dict:
    """The meshfit container of a render."""
    return objects[("Deployment", "meshfit-system", "meshfit")]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("components", COMBINATIONS, ids=IDS)
def test_every_object_of_every_combination_is_strictly_valid(components):
    objects = render(components)
    assert len({identity(o) for o in objects}) == len(objects)  # no object twice
    errors = {identity(o): validate(o) for o in objects if not o["apiVersion"].startswith("kubescheduler")}
    assert not {k: v for k, v in errors.items() if v}


@pytest.mark.parametrize("components", COMBINATIONS, ids=IDS)
def test_each_component_changes_only_what_it_owns(components):
    objects = by_identity(components)
    deployment = objects[("Deployment", "meshfit-system", "meshfit")]
    container = meshfit_container(objects)
    args = container["args"]
    scheduler = objects[("Deployment", "kube-system", "meshfit-scheduler")]
    ha, mtls, monitoring = ("ha" in components), ("mtls" in components), ("monitoring" in components)
    # ha
    assert deployment["spec"]["replicas"] == scheduler["spec"]["replicas"] == (2 if ha else 1)
    assert ("--leader-elect" in args) == ha
    assert (("Role", "meshfit-system", "meshfit-leader-election") in objects) == ha
    assert (("PodDisruptionBudget", "meshfit-system", "meshfit") in objects) == ha  # 1 replica: a PDB blocks drains
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # always: one ledger answering at a time
    # mtls
    tls_flags = {"--tls-cert-file", "--tls-private-key-file", "--client-ca-file", "--allowed-client-names"}
    assert (tls_flags <= set(args)) == mtls and (tls_flags & set(args) == set()) == (not mtls)
    assert {container["readinessProbe"]["httpGet"]["scheme"], container["livenessProbe"]["httpGet"]["scheme"]} == {
        "HTTPS" if mtls else "HTTP"}
    secrets = {v["secret"]["secretName"] for o in (deployment, scheduler)
               for v in o["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert secrets == ({"meshfit-tls", "meshfit-scheduler-client-tls"} if mtls else set())
    config = yaml.safe_load(objects[("ConfigMap", "kube-system", "meshfit-scheduler-config")]["data"]["config.yaml"])
    shipped = yaml.safe_load((MANIFESTS / "kube-scheduler-config.yaml").read_text())
    assert len(config["extenders"]) == 2  # the main extender and the guard
    if mtls:
        assert config == shipped
    else:  # the same configuration, over plain HTTP
        plain = []
        for extender, shipped_extender in zip(config["extenders"], shipped["extenders"]):
            assert extender["urlPrefix"].startswith("http://") and "tlsConfig" not in extender
            plain.append({**shipped_extender, "urlPrefix": extender["urlPrefix"]})
            del plain[-1]["enableHTTPS"], plain[-1]["tlsConfig"]
        assert {**config, "extenders": plain} == config
    # monitoring
    monitoring_objects = {("ServiceMonitor", "meshfit-system", "meshfit"), ("PrometheusRule", "meshfit-system", "meshfit"),
                          ("ConfigMap", "meshfit-system", "meshfit-grafana-dashboard")}
    assert (monitoring_objects <= set(objects)) == monitoring and (monitoring_objects & set(objects) == set()) == (
        not monitoring)
    # the metrics port the ServiceMonitor scrapes is plain HTTP whatever else is chosen
    assert "--metrics-port" in args and {p["name"] for p in container["ports"]} == {"extender", "grpc", "metrics"}


def sorted_args(objects: list[dict]) -> dict:
    """The render by identity, each container's args sorted (components append flags in the order applied)."""
    out = {}
    for obj in objects:
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or ():
            container["args"] = sorted(container.get("args") or [])
            container["volumeMounts"] = sorted(container.get("volumeMounts") or [], key=lambda m: m["name"])
        if pod:
            pod["volumes"] = sorted(pod.get("volumes") or [], key=lambda v: v["name"])
        out[identity(obj)] = obj
    return out


def test_the_components_do_not_depend_on_their_order():
    assert sorted_args(render(("ha", "mtls", "monitoring"))) == sorted_args(render(("monitoring", "mtls", "ha")))
