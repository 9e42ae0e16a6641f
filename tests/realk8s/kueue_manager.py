"""A real Kueue manager run against the loopback control plane (../shared/k8s/KUEUE.md), for tests.

No Kueue binary ships with the repository (`k8sbuild/build_kueue.sh` builds one from its Go module into the cache).
Lookup, like the Kubernetes binaries':

1. `MESHFIT_KUEUE_BIN`: a folder holding the `kueue` manager binary (or the binary itself), several
   joined with `:`; its source tree's `config/` is `$MESHFIT_KUEUE_CONFIG`, else `<folder>/../config`;
2. otherwise every `<cache>/kueue/<version>/bin/kueue` with `<cache>/kueue/<version>/config/`.

The version is the install's `VERSION` file (else its folder name).  `KueueManager.start` makes a serving
certificate for 127.0.0.1, installs the CRDs (conversion webhooks on loopback), starts the manager with
its webhooks on a free port, and registers the Job and Kueue webhooks once `/readyz` passes; `stop`
undoes all of it (the metrics certificate under /etc/kueue only if it created it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.realk8s.binaries import cache_root
from tests.realk8s.controlplane import ControlPlane, ManagedProcess, free_port, http_ok, wait_until
from tests.realk8s.pki import _openssl

KUEUE_BIN_ENV = "MESHFIT_KUEUE_BIN"
KUEUE_CONFIG_ENV = "MESHFIT_KUEUE_CONFIG"
MIN_KUBERNETES = (1, 31)
"""Kueue 0.19's CRDs declare `selectableFields` (CustomResourceFieldSelectors, on by default from 1.31)."""
CONVERTED_CRDS = ("workloads", "clusterqueues", "localqueues", "cohorts", "multikueueclusters")
"""CRDs whose versions convert through Kueue's webhook (the set Kueue's own kustomize patches)."""
WEBHOOK_PATH_PARTS = ("kueue-x-k8s-io", "batch-v1-job")
"""Webhooks registered: Kueue's own kinds and batch/v1 Jobs (the one integration enabled)."""
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Read by the manager at start even with metrics off (no flag moves it)."""
FIELD_MANAGER = "meshfit-tests"

_SERVING_CNF = """[req]
distinguished_name = dn
req_extensions = v3_req
[dn]
[v3_req]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
"""


@dataclass(frozen=True)
class KueueInstall:
    """One Kueue version: its manager binary, its source tree's `config/` and its version."""

    binary: Path
    config: Path
    version: str

    @property
    def test_id(self) -> str:
        """Test-id fragment, e.g. `kueue-0.19.2`."""
        return f"kueue-{self.version.lstrip('v')}"


def _install_from(binary: Path) -> tuple[KueueInstall | None, str]:
    root = binary.parent.parent
    config = Path(os.environ[KUEUE_CONFIG_ENV]) if os.environ.get(KUEUE_CONFIG_ENV) else root / "config"
    if not os.access(binary, os.X_OK):
        return None, f"{binary}: not an executable kueue manager"
    if not (config / "components" / "crd" / "bases").is_dir():
        return None, f"{config}: no components/crd/bases (the Kueue source tree's config/)"
    version_file = root / "VERSION"
    version = version_file.read_text().strip() if version_file.is_file() else root.name
    return KueueInstall(binary, config, version), ""


def find_kueue_installs() -> tuple[list[KueueInstall], list[str]]:
    """(usable Kueue installs, one per version; why other candidates were not usable)."""
    if os.environ.get(KUEUE_BIN_ENV):
        entries = [Path(p) for p in os.environ[KUEUE_BIN_ENV].split(os.pathsep) if p]
        binaries = [p / "kueue" if p.is_dir() else p for p in entries]
    else:
        root = cache_root() / "kueue"
        binaries = sorted(root.glob("*/bin/kueue")) if root.is_dir() else []
    installs: dict[str, KueueInstall] = {}  # one per version (the cache may hold `v0.19.2 -> 0.19.2` links)
    problems = []
    for binary in binaries:
        install, problem = _install_from(binary)
        if install is None:
            problems.append(problem)
        else:
            installs.setdefault(install.version.lstrip("v"), install)
    return list(installs.values()), problems


def missing_kueue_reason(problems: list[str]) -> str:
    """Why no Kueue can run here."""
    where = (f"${KUEUE_BIN_ENV}={os.environ[KUEUE_BIN_ENV]}" if os.environ.get(KUEUE_BIN_ENV)
             else f"${KUEUE_BIN_ENV} unset and no {cache_root() / 'kueue' / '<version>' / 'bin' / 'kueue'}")
    return (f"no Kueue manager binary: {where}" + (f" ({'; '.join(problems)})" if problems else "")
            + "; build it with k8sbuild/build_kueue.sh (Kueue v0.19.2 from its Go module)")


def too_old_reason(plane: ControlPlane, install: KueueInstall) -> str | None:
    """Why Kueue cannot run on this control plane (its CRDs need a newer API server), None when it can."""
    if plane.install.at_least(*MIN_KUBERNETES):
        return None
    return (f"Kueue {install.version}'s CRDs declare selectableFields, which kube-apiserver "
            f"{plane.install.full} does not accept (needs >= {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]})")


def make_serving_pair(folder: Path) -> None:
    """A CA (`ca.crt`) and a serving certificate for 127.0.0.1 (`tls.crt`, `tls.key`) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "serving.cnf").write_text(_SERVING_CNF)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-subj", "/CN=kueue-test-ca",
             "-days", "2", "-out", "ca.crt", cwd=folder)
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-subj", "/CN=127.0.0.1",
             "-out", "tls.csr", "-config", "serving.cnf", cwd=folder)
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
             "-extensions", "v3_req", "-extfile", "serving.cnf", "-out", "tls.crt", cwd=folder)


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict:
    """The `config.kueue.x-k8s.io/v1beta2` Configuration the test manager runs with."""
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"VisibilityOnDemand": False}}  # no API server of its own on 0.0.0.0:8082


class KueueManager:
    """The Kueue manager process with its CRDs and webhooks installed in one control plane."""

    def __init__(self, install: KueueInstall, plane: ControlPlane, api_client: Any) -> None:
        self.install, self.plane, self.api_client = install, plane, api_client
        self.folder = plane.run_dir / "kueue"
        self.certs = self.folder / "certs"
        self.webhook_port = self.health_port = 0
        self.process: ManagedProcess | None = None
        self.crds: list[str] = []
        self.webhooks: list[tuple[str, str]] = []
        self._made_metrics_dirs: list[Path] = []
        self._made_metrics_certs = False

    @property
    def url(self) -> str:
        """Base URL of the manager's webhook server."""
        return f"https://127.0.0.1:{self.webhook_port}"

    def ca_bundle(self) -> str:
        """The serving CA, base64 (a clientConfig `caBundle`)."""
        return base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()

    def start(self) -> "KueueManager":
        """Certificates, CRDs, the manager, then its webhooks (raises with the log tail on failure)."""
        make_serving_pair(self.certs)
        self.webhook_port, self.health_port = free_port(), free_port()
        self._metrics_certs()
        self.apply_crds()
        config = self.folder / "config.yaml"
        config.write_text(json.dumps(manager_config(self.webhook_port, self.health_port, self.certs), indent=2))
        self.process = ManagedProcess("kueue", [str(self.install.binary), f"--config={config}",
                                                f"--kubeconfig={self.plane.kubeconfig}", "--zap-log-level=2"],
                                      self.plane.logs / "kueue.log").start()
        wait_until(lambda: http_ok(f"http://127.0.0.1:{self.health_port}/readyz"), 180, self.process, "/readyz")
        self.register_webhooks()
        insecure = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        wait_until(lambda: _webhook_answers(self.url, insecure), 60, self.process, "webhook server")
        return self

    def _metrics_certs(self) -> None:
        if (METRICS_CERTS / "tls.crt").is_file() and (METRICS_CERTS / "tls.key").is_file():
            return  # another run's (or a real install's): any valid pair does, leave it alone
        self._made_metrics_dirs = [d for d in (METRICS_CERTS, *METRICS_CERTS.parents[:2]) if not d.exists()]
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(self.certs / name, METRICS_CERTS / name)
        self._made_metrics_certs = True

    def apply_crds(self) -> None:
        """Create (or replace) every Kueue CRD, conversion pointed at this manager; wait until established."""
        from kubernetes.client import ApiextensionsV1Api
        from kubernetes.client.exceptions import ApiException

        api = ApiextensionsV1Api(self.api_client)
        for path in sorted((self.install.config / "components" / "crd" / "bases").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            if crd["spec"]["names"]["plural"] in CONVERTED_CRDS:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": f"{self.url}/convert", "caBundle": self.ca_bundle()}}}
            name = crd["metadata"]["name"]
            try:
                api.create_custom_resource_definition(crd)
            except ApiException as exc:
                if exc.status != 409:
                    raise RuntimeError(f"CRD {name}: {exc.status} {exc.body}") from None
                crd["metadata"]["resourceVersion"] = api.read_custom_resource_definition(name).metadata.resource_version
                api.replace_custom_resource_definition(name, crd)
            self.crds.append(name)
        for name in self.crds:
            wait_until(lambda n=name: _established(api, n), 60, self.plane.apiserver, f"CRD {name} established")

    def register_webhooks(self) -> None:
        """Mutating and validating webhook configurations for Jobs and Kueue's kinds, at this manager's URL."""
        from kubernetes.client import AdmissionregistrationV1Api

        api = AdmissionregistrationV1Api(self.api_client)
        manifests = self.install.config / "components" / "webhook" / "manifests.yaml"
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            hooks = [h for h in doc["webhooks"] if any(p in h["clientConfig"]["service"]["path"]
                                                       for p in WEBHOOK_PATH_PARTS)]
            for hook in hooks:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{self.url}{path}", "caBundle": self.ca_bundle()}
                hook["namespaceSelector"] = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                                   "operator": "NotIn",
                                                                   "values": ["kube-system", "kueue-system"]}]}
            name = f"kueue-{doc['metadata']['name']}"
            body = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": name}, "webhooks": hooks}
            if doc["kind"] == "MutatingWebhookConfiguration":
                api.create_mutating_webhook_configuration(body)
            else:
                api.create_validating_webhook_configuration(body)
            self.webhooks.append((doc["kind"], name))

    def stop(self) -> None:
        """Webhooks first (nothing may call a stopped manager), the manager, the CRDs, our metrics pair."""
        from kubernetes.client import AdmissionregistrationV1Api, ApiextensionsV1Api

        admission = AdmissionregistrationV1Api(self.api_client)
        for kind, name in self.webhooks:
            _quietly(admission.delete_mutating_webhook_configuration if kind.startswith("Mutating")
                     else admission.delete_validating_webhook_configuration, name)
        self.webhooks = []
        if self.process is not None:
            self.process.stop()
        extensions = ApiextensionsV1Api(self.api_client)
        for name in self.crds:
            _quietly(extensions.delete_custom_resource_definition, name)
        self.crds = []
        if self._made_metrics_certs:
            for name in ("tls.crt", "tls.key"):
                (METRICS_CERTS / name).unlink(missing_ok=True)
            for folder in self._made_metrics_dirs:  # innermost first: only the folders it made
                try:
                    folder.rmdir()
                except OSError:
                    break
            self._made_metrics_certs = False

    def tail(self, lines: int = 40) -> str:
        """Last lines of the manager's log."""
        return self.process.tail(lines) if self.process else "--- kueue (not started)"


def _established(api: Any, name: str) -> bool:
    conditions = api.read_custom_resource_definition(name).status.conditions or ()
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _webhook_answers(url: str, context: ssl.SSLContext) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{url}/convert", timeout=2, context=context)
    except urllib.error.HTTPError:
        return True  # any HTTP answer: the server is up and its certificate is the one registered
    except (urllib.error.URLError, OSError):
        return False
    return True


def _quietly(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except Exception:  # noqa: BLE001 - teardown: the object may be gone, the API server going away
        pass
