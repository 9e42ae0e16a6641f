"""Fixtures of the soak suite: one real control plane (etcd + kube-apiserver, from `tests.realk8s`) per Kubernetes
version, the newest found by default (`MESHFIT_SOAK_VERSIONS=all` for every version, or e.g. `1.26,1.35`); the test
is skipped with the binaries' reason when none are installed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

from tests.realk8s.binaries import K8sInstall, absent, find_installs
from tests.realk8s.conftest import _admin_client, _create_namespace
from tests.realk8s.controlplane import ControlPlane, missing_prerequisites

VERSIONS_ENV = "MESHFIT_SOAK_VERSIONS"


def pytest_configure(config: pytest.Config) -> None:
    """Register the `soak` marker (and `realk8s`, when tests/realk8s is not collected)."""
    config.addinivalue_line("markers", "soak: the soak suite on a real control plane (MESHFIT_SOAK_MINUTES, "
                                       "MESHFIT_SOAK_VERSIONS)")
    config.addinivalue_line("markers", "realk8s: needs real etcd / kube-apiserver / kube-scheduler binaries "
                                       "($MESHFIT_K8S_BIN)")


def soak_installs() -> list[K8sInstall | None]:
    """The versions to soak: the newest installed, all with `MESHFIT_SOAK_VERSIONS=all`, or the listed minors."""
    installs, _ = find_installs()
    wanted = os.environ.get(VERSIONS_ENV, "").strip()
    if not installs:
        return [None]
    if wanted == "all":
        return list(installs)
    if wanted:
        chosen = [i for i in installs if i.minor in {w.strip() for w in wanted.split(",")}]
        return chosen or [None]
    return [installs[-1]]


INSTALLS = soak_installs()


@pytest.fixture(params=INSTALLS, ids=[i.test_id if i else "k8s-none" for i in INSTALLS])
def soak_install(request: pytest.FixtureRequest) -> K8sInstall:
    """One Kubernetes version's binaries; skips with the reason when there are none."""
    reason = missing_prerequisites()
    if reason or request.param is None:
        wanted = os.environ.get(VERSIONS_ENV)
        absent(reason or f"no installed Kubernetes version matches {VERSIONS_ENV}={wanted}")
    return request.param


@dataclass
class SoakEnv:
    """A control plane of its own for one soak run, its admin client and a fresh namespace."""

    plane: ControlPlane
    core: Any
    namespace: str


@pytest.fixture
def soak_env(soak_install: K8sInstall, request: pytest.FixtureRequest) -> SoakEnv:
    """etcd + kube-apiserver (no controller-manager: the soak plays the controllers), stopped after the test."""
    from kubernetes.client import CoreV1Api

    plane = ControlPlane(soak_install)
    request.addfinalizer(plane.stop)
    try:
        plane.start()
    except Exception as exc:  # noqa: BLE001 - show the logs, not only the exception
        plane.stop(keep_run_dir=True)
        pytest.fail(f"control plane did not start: {exc}\n{plane.tail_logs()}", pytrace=False)
    api_client = _admin_client(plane)
    request.addfinalizer(api_client.close)
    core = CoreV1Api(api_client)
    return SoakEnv(plane=plane, core=core, namespace=_create_namespace(core))
