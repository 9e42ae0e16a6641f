"""meshfit as the group cycle's placement brain: kube-scheduler built with the MeshfitPlacement plugin
(`kubeplugin/`), a real control plane of each version that has one (1.36: `v1alpha2`, 1.37: `v1beta1`), a
Workload + PodGroup gang of index-less pods (issue 27 item 3, issue 37 item 5).

kube-scheduler runs its own PodGroup cycle (gates GenericWorkload, GangScheduling, TopologyAwareWorkloadScheduling);
the plugin asks meshfit's gRPC `PlacePodGroup` once per cycle for the whole group's placement, pins each member to
meshfit's node and binds it with its ranks.  meshfit posts no Binding of its own for these pods.

Needs, per version, the plugin-built kube-scheduler (`k8sbuild/build.sh <minor>` writes
`<cache>/k8s/<minor>/plugin-bin/meshfit-kube-scheduler`; `$MESHFIT_KS_PLUGIN_BIN` may name others, `:`-joined, told
apart by `--version`) beside that version's control plane.  Without any: skipped with the reason (failed under CI).
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.handoff.assignment import parse_assignment
from scheduler.kube.api import request_bytes
from tests.realk8s.binaries import BUILD_COMMAND, K8sInstall, absent, binary_version, find_installs
from tests.realk8s.cluster_builders import GPU, LEAF_LABEL, PARALLELISM, SCHEDULER_NAME, create_nodes, wait_for
from tests.realk8s.conftest import clean_slate
from tests.service.tls_served import client_context, make_test_pki
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, free_port, http_ok, wait_until
from tests.realk8s.workload_api import api_version_for, gated_plane_options, template_ref

PLUGIN_ENV = "MESHFIT_KS_PLUGIN_BIN"
PLUGIN = "MeshfitPlacement"
GROUP = "scheduling.k8s.io"
GROUP_LABEL = "test.meshfit.io/pod-group"
GPUS = 8

pytestmark = pytest.mark.realk8s


def plugin_builds() -> tuple[list[tuple[K8sInstall, Path]], str]:
    """(control plane, plugin-built kube-scheduler of the same minor) for every version from 1.36 that has both,
    oldest first; and why there are none."""
    given = [Path(p) for p in os.environ.get(PLUGIN_ENV, "").split(os.pathsep) if p]
    by_minor = {binary_version(p)[:2]: p for p in given if os.access(p, os.X_OK) and binary_version(p)}
    found, looked = [], []
    for install in find_installs()[0]:
        if not install.at_least(1, 36):
            continue
        path = by_minor.get(install.version[:2], install.bin_dir.parent / "plugin-bin" / "meshfit-kube-scheduler")
        if os.access(path, os.X_OK):
            found.append((install, path))
        looked.append(str(path))
    why = (f"no kube-scheduler built with the {PLUGIN} plugin beside a 1.36+ control plane (looked at: "
           f"{', '.join(looked) or 'no 1.36+ control plane found'}; ${PLUGIN_ENV}={os.environ.get(PLUGIN_ENV, '')}); "
           f"build it with {BUILD_COMMAND} 1.37")
    return found, "" if found else why


BUILDS, NO_BUILD = plugin_builds()


def plugin_scheduler_config(kubeconfig: Path, endpoint: str, tls: dict | None = None) -> dict:
    """A KubeSchedulerConfiguration whose `meshfit` profile uses the plugin as its placement generator and binder."""
    me = [{"name": PLUGIN}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 5,
        "profiles": [{
            "schedulerName": SCHEDULER_NAME,
            "plugins": {
                "placementGenerate": {"enabled": me, "disabled": [{"name": "TopologyPlacementGenerator"}]},
                "preFilter": {"enabled": me},
                "bind": {"enabled": [*me, {"name": "DefaultBinder"}], "disabled": [{"name": "DefaultBinder"}]},
            },
            "pluginConfig": [{"name": PLUGIN, "args": {"endpoint": endpoint, "timeoutSeconds": 10, **(tls or {})}}],
        }],
    }


@pytest.fixture(scope="module", params=BUILDS or [None],
                ids=[install.test_id for install, _ in BUILDS] or ["k8s-none"])
def plane(request: pytest.FixtureRequest) -> ControlPlane:
    """A 1.36+ control plane with the Workload API, gang and topology-aware workload scheduling on."""
    if request.param is None:
        absent(NO_BUILD)
    install, binary = request.param
    control = ControlPlane(install, **gated_plane_options(install))
    request.addfinalizer(control.stop)
    control.start()
    control.namespaces = []
    control.plugin_binary = binary
    control.api = api_version_for(install)
    return control


@pytest.fixture
def env(plane: ControlPlane, request: pytest.FixtureRequest, tmp_path: Path):
    """A clean namespace, meshfit serve (gRPC on) and the plugin-built kube-scheduler pointed at it.

    Parametrised indirectly with a client certificate name: meshfit then serves gRPC over mutual TLS (verbs for
    CN kube-scheduler only) and kube-scheduler presents that certificate."""
    from kubernetes.client import CustomObjectsApi
    kube = clean_slate(plane)
    grpc_port = free_port()
    cert = getattr(request, "param", None)
    flags, tls, context = [], None, None
    if cert is not None:
        pki = make_test_pki(tmp_path / "pki")
        flags = ["--tls-cert-file", str(pki / "server.crt"), "--tls-private-key-file", str(pki / "server.key"),
                 "--client-ca-file", str(pki / "ca.crt"), "--allowed-client-names", "kube-scheduler"]
        tls = {"caFile": str(pki / "ca.crt"), "certFile": str(pki / f"{cert}.crt"),
               "keyFile": str(pki / f"{cert}.key"), "serverName": "localhost"}
        context = client_context(pki)
    meshfit = MeshfitProcess(plane.kubeconfig, plane.logs / f"meshfit-{kube.namespace}.log",
                             extra_args=["--grpc-port", str(grpc_port), "--group-cycle", *flags], tls_context=context)
    scheduler: list[ManagedProcess] = []

    def finish() -> None:
        for process in scheduler:
            process.stop()
        meshfit.stop()
        kube.api_client.close()

    request.addfinalizer(finish)
    meshfit.start()
    kube.extra_logs.append(meshfit.process)
    config = plane.run_dir / f"plugin-scheduler-{kube.namespace}.json"
    config.write_text(json.dumps(plugin_scheduler_config(plane.scheduler_kubeconfig, f"127.0.0.1:{grpc_port}",
                                                         tls)))
    port = free_port()
    process = ManagedProcess("kube-scheduler+meshfit", [
        str(plane.plugin_binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        "--v=3", f"--feature-gates={plane.feature_gates}"], plane.logs / f"plugin-scheduler-{kube.namespace}.log").start()
    scheduler.append(process)
    kube.extra_logs.append(process)
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    wait_until(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure), 30, process, "/healthz")
    kube.custom = CustomObjectsApi(kube.api_client)
    kube.scheduler_log = process.log_path
    kube.meshfit_url, kube.meshfit_context = meshfit.url, context
    kube.api = plane.api
    return kube


def create_pod_group(kube: Any, name: str, min_count: int, key: str = LEAF_LABEL) -> None:
    """A Workload with one gang template and its PodGroup (minCount, required topology `key`)."""
    policy = {"gang": {"minCount": min_count}}
    constraints = {"topology": [{"key": key}]}
    kube.custom.create_namespaced_custom_object(GROUP, kube.api, kube.namespace, "workloads", {
        "apiVersion": f"{GROUP}/{kube.api}", "kind": "Workload", "metadata": {"name": name},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy,
                                        "schedulingConstraints": constraints}]}})
    kube.custom.create_namespaced_custom_object(GROUP, kube.api, kube.namespace, "podgroups", {
        "apiVersion": f"{GROUP}/{kube.api}", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {**template_ref(kube.api, name, "workers"), "schedulingPolicy": policy,
                 "schedulingConstraints": constraints}})


def create_members(kube: Any, group: str, count: int, parallelism: str, first: int = 0) -> None:
    """`count` index-less pods of the group (named from `first`): `spec.schedulingGroup.podGroupName`, no index, no
    other gang label."""
    for i in range(first, first + count):
        request_bytes(kube.api_client, "POST", f"/api/v1/namespaces/{kube.namespace}/pods", body={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{i}", "labels": {GROUP_LABEL: group},
                         "annotations": {PARALLELISM: parallelism}},
            "spec": {"schedulerName": SCHEDULER_NAME, "schedulingGroup": {"podGroupName": group},
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                     "resources": {"limits": {GPU: str(GPUS)}, "requests": {GPU: str(GPUS)}}}]}})


def members(kube: Any, group: str) -> list[Any]:
    """The group's pods, read raw (the typed client has no `schedulingGroup` field)."""
    raw = request_bytes(kube.api_client, "GET", f"/api/v1/namespaces/{kube.namespace}/pods",
                        query=[("labelSelector", f"{GROUP_LABEL}={group}")])
    return [SimpleNamespace(name=p["metadata"]["name"], annotations=p["metadata"].get("annotations") or {},
                            node_name=p["spec"].get("nodeName"), conditions=(p.get("status") or {}).get("conditions")
                            or []) for p in json.loads(raw)["items"]]


def bound(kube: Any, group: str) -> tuple[int, int]:
    """(bound, created) members."""
    pods = members(kube, group)
    return sum(1 for p in pods if p.node_name), len(pods)


def meshfit_bindings(kube: Any) -> float:
    """Binding API calls meshfit itself made (`meshfit_binding_seconds_count`, every label)."""
    with urllib.request.urlopen(f"{kube.meshfit_url}/metrics", timeout=10, context=kube.meshfit_context) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("meshfit_binding_seconds_count"))


def logs(kube: Any) -> str:
    """Tail of kube-scheduler's and meshfit's logs."""
    return kube.tail_logs(30)


def test_a_pod_group_binds_whole_through_the_plugin_in_one_leaf_with_ranks_and_pod_0_as_rendezvous(env):
    create_nodes(env.core, 12, gpus=GPUS, leaf_size=4)  # three leaves of 4 nodes
    create_pod_group(env, "train", 4)
    create_members(env, "train", 4, "tp=8,dp=4")
    wait_for(lambda: bound(env, "train") == (4, 4), timeout=60,
             message=lambda _: f"gang not bound whole: {bound(env, 'train')}\n{logs(env)}")
    pods = members(env, "train")
    assignments = {p.name: parse_assignment(p.annotations) for p in pods}
    nodes = {p.name: p.node_name for p in pods}
    by_index = {a.pod_index: nodes[name] for name, a in assignments.items()}
    assert sorted(by_index) == [0, 1, 2, 3], assignments  # meshfit gave the index-less members indexes 0..3
    assert len(set(nodes.values())) == 4
    leaves = {env.core.read_node(n).metadata.labels[LEAF_LABEL] for n in nodes.values()}
    assert len(leaves) == 1, nodes  # one domain of the required key
    assert sorted(r for a in assignments.values() for r in a.ranks) == list(range(4 * GPUS))
    assert {a.master_addr for a in assignments.values()} == {by_index[0]}  # pod 0's real node
    # kube-scheduler bound them through the plugin's one placement (named after meshfit's leaf), not meshfit's binder
    leaf = leaves.pop()
    assert f'placement="meshfit:{LEAF_LABEL}={leaf}"' in env.scheduler_log.read_text(), logs(env)
    assert meshfit_bindings(env) == 0, "meshfit posted Bindings of its own for PodGroup members"


def test_a_replacement_member_placed_by_the_plugin_gets_the_deleted_members_index_ranks_and_node(env):
    """Replacement keeps holding on the plugin path: kube-scheduler's group cycle asks meshfit about the one new pod,
    meshfit answers with the slot it kept (the lost member's index, ranks and node), and kube-scheduler binds it."""
    create_nodes(env.core, 8, gpus=GPUS, leaf_size=4)
    create_pod_group(env, "rep", 4)
    create_members(env, "rep", 4, "tp=8,dp=4")
    wait_for(lambda: bound(env, "rep") == (4, 4), timeout=60,
             message=lambda _: f"gang not bound whole: {bound(env, 'rep')}\n{logs(env)}")
    before = {p.name: (parse_assignment(p.annotations), p.node_name) for p in members(env, "rep")}
    lost, (assignment, node) = next((n, v) for n, v in before.items() if v[0].pod_index == 2)
    env.core.delete_namespaced_pod(lost, env.namespace, grace_period_seconds=0)
    wait_for(lambda: all(p.name != lost for p in members(env, "rep")), timeout=30, message="member not deleted")
    create_members(env, "rep", 1, "tp=8,dp=4", first=4)
    wait_for(lambda: bound(env, "rep") == (4, 4), timeout=60,
             message=lambda _: f"replacement not bound: {bound(env, 'rep')}\n{logs(env)}")
    new = next(p for p in members(env, "rep") if p.name == "rep-4")
    got = parse_assignment(new.annotations)
    assert (got.pod_index, got.ranks, new.node_name) == (2, assignment.ranks, node), (got, new.node_name, node)
    assert got.master_addr == next(v[1] for v in before.values() if v[0].pod_index == 0)
    assert meshfit_bindings(env) == 0, "meshfit posted a Binding of its own for the replacement"


def test_a_pod_group_that_does_not_fit_waits_whole_with_a_reason_then_binds_whole(env):
    create_nodes(env.core, 3, gpus=GPUS, leaf_size=4)  # 24 GPUs in one leaf: 4 x 8 does not fit
    create_pod_group(env, "big", 4)
    create_members(env, "big", 4, "tp=8,dp=4")
    deadline = time.monotonic() + 8.0
    while time.monotonic() < deadline:
        assert bound(env, "big")[0] == 0, f"partly bound: {bound(env, 'big')}"
        time.sleep(0.5)

    def reason() -> str:
        group = env.custom.get_namespaced_custom_object(GROUP, env.api, env.namespace, "podgroups", "big")
        conditions = (group.get("status") or {}).get("conditions") or []
        return " ".join(c.get("message", "") for c in conditions if c.get("status") == "False")

    text = wait_for(lambda: "meshfit" in reason() and reason(), timeout=30,
                    message=lambda _: f"no meshfit reason on the PodGroup: {reason()!r}\n{logs(env)}")
    assert f"gang {env.namespace}/big" in text and "does not fit" in text, text
    create_nodes(env.core, 1, gpus=GPUS, leaf_size=4, start=3)  # room for the whole gang in the same leaf
    wait_for(lambda: bound(env, "big") == (4, 4), timeout=90,
             message=lambda _: f"not bound whole after room appeared: {bound(env, 'big')}\n{logs(env)}")


@pytest.mark.parametrize("env", ["kube-scheduler"], indirect=True, ids=["mtls"])
def test_over_mutual_tls_the_gang_binds_whole(env):
    create_nodes(env.core, 8, gpus=GPUS, leaf_size=4)
    create_pod_group(env, "secure", 2)
    create_members(env, "secure", 2, "tp=8,dp=2")
    wait_for(lambda: bound(env, "secure") == (2, 2), timeout=60,
             message=lambda _: f"gang not bound whole over mTLS: {bound(env, 'secure')}\n{logs(env)}")
    assert meshfit_bindings(env) == 0


@pytest.mark.parametrize("env", ["intruder"], indirect=True, ids=["wrong-client"])
def test_a_scheduler_meshfit_does_not_allow_places_nothing(env):
    create_nodes(env.core, 8, gpus=GPUS, leaf_size=4)
    create_pod_group(env, "denied", 2)
    create_members(env, "denied", 2, "tp=8,dp=2")
    wait_for(lambda: "PERMISSION_DENIED" in env.scheduler_log.read_text() or "PermissionDenied"
             in env.scheduler_log.read_text(), timeout=30, message=lambda _: logs(env))
    assert bound(env, "denied")[0] == 0
    assert env.meshfit_url.startswith("https://")
