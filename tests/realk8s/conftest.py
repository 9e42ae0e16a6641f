"""Fixtures for tests against a real etcd + kube-apiserver (+ kube-scheduler with meshfit as extender).

`control_plane` (session) starts etcd and kube-apiserver once; `kube` gives each test a clean slate
(no Nodes, no pods left from earlier tests, a fresh namespace); `meshfit_scheduler(**options)`
starts `meshfit serve` and then kube-scheduler pointed at it, and stops both at the test's end.
Tests here are marked `realk8s` and are collected once per Kubernetes version found (`tests.realk8s.binaries`:
`$MESHFIT_K8S_BIN`, else the per-user cache; test ids carry `k8s-1.26`, `k8s-1.35`, ...), and are skipped
with the reason when no binaries or no openssl are present.

Which versions a test runs on (`k8s_versions` marker, see `version_skip_reason`): a test whose subject differs
between versions (kube-scheduler's binding, nomination, requeue and preemption paths, the Job controller, an API
that exists in some versions only) says so with `k8s_versions(every=True, why=...)` and runs on each version,
within `min` / `max` when given; every other test is version-independent and runs on the newest version found
only, unless `MESHFIT_REALK8S_ALL_VERSIONS=1`.  The skips say why.
"""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from tests.realk8s.binaries import K8sInstall, absent, find_installs
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, MeshfitProcess, missing_prerequisites
from tests.realk8s.kueue_fixtures import kueue, kueue_objects  # noqa: F401 - fixtures: a real Kueue beside it

_HERE = Path(__file__).resolve().parent
_COUNTER = itertools.count(1)


ALL_VERSIONS_ENV = "MESHFIT_REALK8S_ALL_VERSIONS"
"""Set to 1: version-independent tests run on every version found, not only the newest."""


def pytest_configure(config: pytest.Config) -> None:
    """Register the `realk8s` and `k8s_versions` markers."""
    config.addinivalue_line("markers", "realk8s: needs real etcd / kube-apiserver / kube-scheduler binaries "
                                       "($MESHFIT_K8S_BIN)")
    config.addinivalue_line("markers", "k8s_versions(every=False, min=None, max=None, why=''): which Kubernetes "
                                       "versions a realk8s test runs on (tests/realk8s/conftest.py)")


def _minor(text: str | None) -> tuple[int, int] | None:
    return tuple(int(p) for p in str(text).split(".")[:2]) if text else None  # type: ignore[return-value]


def version_skip_reason(marker: pytest.Mark | None, install: K8sInstall, newest: K8sInstall,
                        all_versions: bool) -> str | None:
    """Why a realk8s test does not run on `install` (None: it runs).  See the module docstring."""
    options = dict(marker.kwargs) if marker is not None else {}
    why = str(options.get("why") or "")
    low, high = _minor(options.get("min")), _minor(options.get("max"))
    if low is not None and install.version[:2] < low:
        return f"needs Kubernetes {options['min']} or newer ({why}); these binaries are {install.full}"
    if high is not None and install.version[:2] > high:
        return f"Kubernetes {options['max']} and older only ({why}); these binaries are {install.full}"
    if options.get("every") or all_versions or install.version[:2] == newest.version[:2]:
        return None
    return (f"version-independent: runs on the newest Kubernetes found ({newest.full}) only; "
            f"{ALL_VERSIONS_ENV}=1 runs it on every version")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/realk8s with `realk8s`, and skip it on the versions it does not
    concern (`version_skip_reason`)."""
    newest = next((i for i in reversed(INSTALLS) if i is not None), None)
    all_versions = os.environ.get(ALL_VERSIONS_ENV, "") not in ("", "0")
    for item in items:
        if _HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.realk8s)
        install = getattr(getattr(item, "callspec", None), "params", {}).get("k8s_install")
        if install is None or newest is None:
            continue
        reason = version_skip_reason(item.get_closest_marker("k8s_versions"), install, newest, all_versions)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _installs() -> list[K8sInstall | None]:
    installs, _ = find_installs()
    return list(installs) or [None]


INSTALLS = _installs()


@pytest.fixture(scope="session", params=INSTALLS, ids=[i.test_id if i else "k8s-none" for i in INSTALLS])
def k8s_install(request: pytest.FixtureRequest) -> K8sInstall:
    """One Kubernetes version's binaries (the suite runs once per version found); skips when there are none."""
    reason = missing_prerequisites()
    if reason or request.param is None:
        absent(reason or "no Kubernetes binaries")
    return request.param


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, k8s_install: K8sInstall) -> ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager when present) on loopback, once per version."""
    plane = ControlPlane(k8s_install)
    request.addfinalizer(plane.stop)
    try:
        plane.start()
    except Exception as exc:  # noqa: BLE001 - show the logs, not only the exception
        plane.stop(keep_run_dir=True)
        pytest.fail(f"control plane did not start: {exc}\n{plane.tail_logs()}", pytrace=False)
    if k8s_install.has("kube-controller-manager"):
        try:
            plane.start_controller_manager()
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"kube-controller-manager did not start: {exc}\n{plane.tail_logs()}", pytrace=False)
    plane.namespaces = []  # namespaces tests created (pods there are wiped before each test)
    return plane


@dataclass
class KubeEnv:
    """What a test gets from `kube`: the official client, its namespace and the control plane."""

    core: Any
    api_client: Any
    namespace: str
    control_plane: ControlPlane
    extra_logs: list = field(default_factory=list)

    def tail_logs(self, lines: int = 40) -> str:
        """Last log lines of the control plane's processes and meshfit (when started)."""
        return self.control_plane.tail_logs(lines, self.extra_logs)


def _admin_client(plane: ControlPlane) -> Any:
    from kubernetes import config
    return config.new_client_from_config(config_file=str(plane.kubeconfig))


def _wipe(api_client: Any, core: Any, namespaces: Sequence[str]) -> None:
    """Delete earlier tests' Jobs (no controller recreates their pods), their pods (grace 0: no kubelet would
    confirm) and all Nodes."""
    from kubernetes.client import BatchV1Api
    batch = BatchV1Api(api_client)
    for namespace in namespaces:
        batch.delete_collection_namespaced_job(namespace, propagation_policy="Background", grace_period_seconds=0)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_collection_node()


def _create_namespace(core: Any) -> str:
    """A fresh namespace with its `default` ServiceAccount (no controller-manager would create it)."""
    name = f"t{next(_COUNTER)}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    from kubernetes.client.exceptions import ApiException
    try:
        core.create_namespaced_service_account(name, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                      "metadata": {"name": "default"}})
    except ApiException as exc:
        if exc.status != 409:  # the ServiceAccount controller made it first
            raise
    return name


def clean_slate(plane: ControlPlane) -> KubeEnv:
    """No Nodes, no pods from earlier tests on `plane`, and a fresh namespace (close `api_client` when done)."""
    from kubernetes.client import CoreV1Api
    api_client = _admin_client(plane)
    core = CoreV1Api(api_client)
    _wipe(api_client, core, plane.namespaces)
    namespace = _create_namespace(core)
    plane.namespaces.append(namespace)
    return KubeEnv(core=core, api_client=api_client, namespace=namespace, control_plane=plane)


@pytest.fixture
def kube(control_plane: ControlPlane) -> KubeEnv:
    """A clean slate: no Nodes, no pods from earlier tests, and a fresh namespace for this test."""
    env = clean_slate(control_plane)
    yield env
    env.api_client.close()


@dataclass
class SchedulerStack:
    """meshfit serve + kube-scheduler (extender = that meshfit) started for one test."""

    meshfit: MeshfitProcess
    control_plane: ControlPlane

    @property
    def scheduler(self) -> ManagedProcess | None:
        """The kube-scheduler process."""
        return self.control_plane.scheduler

    def restart_scheduler(self, **changes: Any) -> ManagedProcess:
        """Restart kube-scheduler (same options, updated by `changes`)."""
        return self.control_plane.restart_scheduler(**changes)

    def tail_logs(self, lines: int = 40) -> str:
        """Last log lines of every process involved."""
        return self.control_plane.tail_logs(lines, [self.meshfit.process] if self.meshfit.process else [])

    def stop(self) -> None:
        """Stop kube-scheduler first, then meshfit."""
        self.control_plane.stop_scheduler()
        self.meshfit.stop()


@pytest.fixture
def meshfit_scheduler(kube: KubeEnv, request: pytest.FixtureRequest) -> Callable[..., SchedulerStack]:
    """Factory `meshfit_scheduler(meshfit_args=(), **scheduler_options)`: meshfit serve, then kube-scheduler.

    Scheduler options are those of `ControlPlane.start_scheduler` (node_cache_capable,
    percentage_of_nodes_to_score, pod_initial_backoff_seconds, pod_max_backoff_seconds, verbosity,
    extra_args).  Both are stopped at the test's end, kube-scheduler first.
    """
    plane = kube.control_plane
    stacks: list[SchedulerStack] = []
    kubelets: list = []

    def start(meshfit_args: Sequence[str] = (), **scheduler_options: Any) -> SchedulerStack:
        if stacks:
            raise RuntimeError("meshfit_scheduler() already started in this test")
        log = plane.logs / f"meshfit-{kube.namespace}.log"
        meshfit = MeshfitProcess(plane.kubeconfig, log, meshfit_args)
        stack = SchedulerStack(meshfit=meshfit, control_plane=plane)
        stacks.append(stack)
        from tests.realk8s.scenario import KubeletStandIn

        kubelets.append(KubeletStandIn(kube.core, kube.namespace).start())
        try:
            meshfit.start()
            kube.extra_logs.append(meshfit.process)
            plane.start_scheduler(meshfit.url, **scheduler_options)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"meshfit / kube-scheduler did not start: {exc}\n{stack.tail_logs()}", pytrace=False)
        return stack

    def finish() -> None:
        for stack in stacks:
            stack.stop()
        for kubelet in kubelets:
            kubelet.stop()

    request.addfinalizer(finish)
    return start


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """On a failing realk8s test, append the processes' log tails to the report."""
    if call.when != "call" or call.excinfo is None or os.environ.get("MESHFIT_K8S_QUIET_LOGS"):
        return
    env = item.funcargs.get("kube") if hasattr(item, "funcargs") else None
    if isinstance(env, KubeEnv):
        item.add_report_section("call", "realk8s logs", env.tail_logs(30))
