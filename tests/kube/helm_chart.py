"""The Helm chart charts/meshfit, rendered with a real helm: where helm is, and what `helm template` makes of it.

helm is found at `$MESHFIT_HELM`, else in the per-user cache where `k8sbuild/build_helm.sh` builds it
(`<cache>/tools/helm-v4.3.2/bin/helm`, the cache as tests/realk8s/binaries.py has it), else on the PATH.  Without
one the chart tests skip with the reason naming build_helm.sh; under `CI=true` a missing helm fails them instead
(`require_helm`): CI builds helm from its module and must run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

import pytest
import yaml

from tests.kube.kustomize_render import MANIFESTS, identity
from tests.realk8s.binaries import cache_root

REPO = MANIFESTS.parent
CHART = REPO / "charts" / "meshfit"
HELM_ENV = "MESHFIT_HELM"
HELM_VERSION = "v4.3.2"
"""The helm k8sbuild/build_helm.sh builds by default."""
RELEASE = "meshfit"
NAMESPACE = "meshfit-system"
"""The release namespace the Kustomize base uses."""
BUILD_HINT = "build it with k8sbuild/build_helm.sh (Go 1.26 and the module proxy), or set MESHFIT_HELM"
CHART_ONLY_SWITCHES = ("managedControlPlane",)
"""Values switches with no Kustomize component (rendered and dry-run on their own)."""


def cached_helm() -> Path:
    """Where k8sbuild/build_helm.sh puts helm."""
    return cache_root() / "tools" / f"helm-{HELM_VERSION}" / "bin" / "helm"


def find_helm() -> str | None:
    """`$MESHFIT_HELM`, else the cached build, else `helm` on the PATH (None when none is executable)."""
    configured = os.environ.get(HELM_ENV)
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    cached = cached_helm()
    if os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which("helm")


def missing_helm_reason() -> str:
    """Why no helm was found, and how to get one."""
    where = f"${HELM_ENV}={os.environ[HELM_ENV]} is not executable" if os.environ.get(HELM_ENV) else (
        f"${HELM_ENV} unset, no {cached_helm()} and no helm on the PATH")
    return f"no helm ({where}): {BUILD_HINT}"


def require_helm() -> str:
    """The helm binary; a skip with the reason when there is none, a failure under CI=true."""
    found = find_helm()
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {missing_helm_reason()}", pytrace=False)
        pytest.skip(missing_helm_reason())
    return found


def helm_env() -> dict[str, str]:
    """The environment helm runs in: its cache, config and data folders in a temporary place, not the user's."""
    scratch = Path(tempfile.gettempdir()) / f"meshfit-helm-{os.getuid()}"
    return {**os.environ, "HELM_CACHE_HOME": str(scratch / "cache"), "HELM_CONFIG_HOME": str(scratch / "config"),
            "HELM_DATA_HOME": str(scratch / "data")}


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess:
    """helm with `args`, its output captured (never raises on a non-zero exit)."""
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, env=helm_env())


def value_flags(components: Iterable[str], extra: dict[str, str] | None = None) -> list[str]:
    """`--set` flags turning on each Kustomize component's switch (`<component>.enabled=true`) and `extra`."""
    sets = {f"{c}.enabled": "true" for c in components} | dict(extra or {})
    return [flag for key, value in sets.items() for flag in ("--set", f"{key}={value}")]


def template(helm: str, components: Iterable[str] = (), extra: dict[str, str] | None = None,
             namespace: str = NAMESPACE) -> list[dict]:
    """`helm template` of the chart with the components' switches on, parsed; fails the test on an error."""
    result = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", namespace,
                      *value_flags(components, extra))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def like_kustomize(helm: str, components: Iterable[str]) -> list[dict]:
    """The chart rendered the way the Kustomize base is: in meshfit-system, with the Namespace object."""
    return template(helm, components, {"namespace.create": "true"})


def by_identity(objects: list[dict]) -> dict[tuple[str, str, str], dict]:
    """Objects keyed by (kind, namespace, name)."""
    return {identity(o): o for o in objects}


def dump(objects: list[dict]) -> str:
    """A multi-document YAML stream of `objects`."""
    return yaml.safe_dump_all(objects, sort_keys=False)
