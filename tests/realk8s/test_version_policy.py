"""Which Kubernetes versions a realk8s test runs on (`k8s_versions` marker): no binaries needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realk8s.binaries import K8sInstall
from tests.realk8s.conftest import version_skip_reason


def install(minor: int) -> K8sInstall:
    """A stand-in install of 1.<minor>.0 (only its version is read)."""
    return K8sInstall(Path("/nonexistent"), Path("/nonexistent/etcd"), (1, minor, 0))


NEWEST = install(36)
EVERY = pytest.mark.k8s_versions(every=True, why="binding path").mark
V1ALPHA1 = pytest.mark.k8s_versions(every=True, min="1.35", max="1.35", why="v1alpha1 objects").mark
FROM_136 = pytest.mark.k8s_versions(every=True, min="1.36", why="v1alpha2 objects").mark


@pytest.mark.parametrize("minor,all_versions,runs", [(26, False, False), (35, False, False), (36, False, True),
                                                     (26, True, True)])
def test_an_unmarked_test_runs_on_the_newest_version_only_unless_asked(minor, all_versions, runs):
    reason = version_skip_reason(None, install(minor), NEWEST, all_versions)
    assert (reason is None) == runs
    if not runs:
        assert "newest" in reason and "MESHFIT_REALK8S_ALL_VERSIONS=1" in reason


def test_a_version_dependent_test_runs_on_every_version():
    assert all(version_skip_reason(EVERY, install(m), NEWEST, False) is None for m in (26, 35, 36))


def test_a_test_tied_to_one_api_version_says_so_elsewhere():
    assert version_skip_reason(V1ALPHA1, install(35), NEWEST, False) is None
    assert "1.35 and older only (v1alpha1 objects)" in version_skip_reason(V1ALPHA1, install(36), NEWEST, False)
    assert "needs Kubernetes 1.35 or newer" in version_skip_reason(V1ALPHA1, install(26), NEWEST, True)
    assert version_skip_reason(FROM_136, install(36), NEWEST, False) is None
    assert "needs Kubernetes 1.36 or newer (v1alpha2 objects)" in version_skip_reason(FROM_136, install(35), NEWEST,
                                                                                         False)
