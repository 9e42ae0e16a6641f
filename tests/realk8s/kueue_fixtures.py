"""Fixtures running a real Kueue beside the real control plane (imported by conftest.py).

`kueue` (session, once per Kueue version found: test ids carry `kueue-0.19.2`) installs Kueue's CRDs and
webhooks into the session's control plane and runs the manager until the control plane stops; it skips,
with the reason, when no Kueue binary is found, when the API server is too old for its CRDs, or when
the metrics certificate folder cannot be written (the manager reads /etc/kueue/metrics/certs).
`kueue_objects` gives a test a `KueueObjects` for its namespace and deletes what the test created.
"""

from __future__ import annotations

import os

import pytest

from tests.realk8s.binaries import absent
from tests.realk8s.controlplane import ControlPlane
from tests.realk8s.kueue_manager import (
    METRICS_CERTS, KueueInstall, KueueManager, find_kueue_installs, missing_kueue_reason, too_old_reason,
)
from tests.realk8s.kueue_objects import KueueObjects


def _kueue_installs() -> list[KueueInstall | None]:
    installs, _ = find_kueue_installs()
    return list(installs) or [None]


KUEUE_INSTALLS = _kueue_installs()


def _metrics_folder_problem() -> str | None:
    if (METRICS_CERTS / "tls.crt").is_file():
        return None
    existing = next((p for p in (METRICS_CERTS, *METRICS_CERTS.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):
        return (f"Kueue's manager reads {METRICS_CERTS}/tls.crt at start and it cannot be created here "
                "(run as root, or provide the pair)")
    return None


@pytest.fixture(scope="session", params=KUEUE_INSTALLS,
                ids=[i.test_id if i else "kueue-none" for i in KUEUE_INSTALLS])
def kueue(request: pytest.FixtureRequest, control_plane: ControlPlane) -> KueueManager:
    """The Kueue manager running against the session's control plane (see the module docstring)."""
    install = request.param
    if install is None:
        absent(missing_kueue_reason(find_kueue_installs()[1]))
    reason = too_old_reason(control_plane, install) or _metrics_folder_problem()
    if reason:
        pytest.skip(reason)
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    manager = KueueManager(install, control_plane, api_client)
    request.addfinalizer(manager.stop)
    try:
        manager.start()
    except Exception as exc:  # noqa: BLE001 - show the manager's log, not only the exception
        pytest.fail(f"Kueue {install.version} did not start: {exc}\n{manager.tail(60)}", pytrace=False)
    return manager


@pytest.fixture
def kueue_objects(kube, kueue: KueueManager) -> KueueObjects:
    """Kueue objects of this test (its namespace); everything it created is deleted at the end."""
    objects = KueueObjects(kube.api_client, kube.namespace)
    if kueue.process is not None:
        kube.extra_logs.append(kueue.process)
    yield objects
    from kubernetes.client import BatchV1Api

    try:
        BatchV1Api(kube.api_client).delete_collection_namespaced_job(kube.namespace, propagation_policy="Background",
                                                                     grace_period_seconds=0)
        kube.core.delete_collection_namespaced_pod(kube.namespace, grace_period_seconds=0)
    except Exception:  # noqa: BLE001 - best effort: the next test's wipe does it again
        pass
    objects.cleanup()
