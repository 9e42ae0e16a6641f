"""Start and stop a loopback-only etcd + kube-apiserver (+ kube-scheduler, + meshfit serve) for tests.

The envtest idea with genuine upstream binaries, found by `tests.realk8s.binaries` (`MESHFIT_K8S_BIN`, else
the per-user cache, one folder per version); `missing_prerequisites()` says why tests must be skipped
when a binary or openssl is absent.  Every process runs in its own session with its log in the run
directory, and every process still alive when the interpreter exits is killed (atexit).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Sequence

from tests.realk8s.binaries import K8sInstall, find_installs, missing_reason
from tests.realk8s.pki import make_pki, write_kubeconfig
from tests.realk8s.scheduler_config import scheduler_config

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
CONTROLLERS = ("job-controller", "garbage-collector-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "replicaset-controller", "deployment-controller")
"""kube-controller-manager's controllers the tests run (1.27+ names; node lifecycle and pod GC stay off:
no kubelet heartbeats, and pods bound to deleted fake Nodes must stay)."""

_LIVE: set["ManagedProcess"] = set()
_PLANES: list["ControlPlane"] = []


def missing_prerequisites() -> str | None:
    """Why no real control plane can start here (no binaries, no openssl), None when one can."""
    installs, problems = find_installs()
    if not installs:
        return missing_reason(problems)
    if shutil.which("openssl") is None:
        return "openssl not found on PATH (needed to make the control plane's PKI)"
    return None


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and that this process has not handed out before.

    The kernel may give a port just released back at once, so two calls in a row could name the same
    port (etcd's peer port and kube-apiserver's once did); each port is handed out only once."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no fresh free port on 127.0.0.1 after 100 tries")


PORT_TAKEN = "address already in use"


def tail_file(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a text file ('' when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """One child process in its own session, logging to a file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: dict | None = None) -> None:
        self.name, self.argv, self.log_path, self.env = name, list(argv), log_path, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ManagedProcess":
        """Launch the process (appending to its log)."""
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        _LIVE.add(self)
        return self

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def _signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)  # its own session/group: only what it started
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL at once and reap."""
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        _LIVE.discard(self)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait up to `grace` seconds, then SIGKILL."""
        if self.proc is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def tail(self, lines: int = 40) -> str:
        """Last lines of this process's log, with a header."""
        state = "running" if self.alive() else f"exited {self.proc.returncode if self.proc else '-'}"
        return f"--- {self.name} ({state}) {self.log_path}\n{tail_file(self.log_path, lines)}"


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE):
        process.kill()
    for plane in list(_PLANES):  # interrupted before its fixture's teardown: remove the run dir too
        plane.stop()


def wait_until(check: Callable[[], bool], timeout: float, process: ManagedProcess, what: str,
               interval: float = 0.1) -> None:
    """Poll `check` until true; RuntimeError with the log tail if `process` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - connection refused etc. while starting
            pass
        if not process.alive():
            raise RuntimeError(f"{process.name} exited before {what}\n{process.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.name}: {what} not reached after {timeout:.0f}s\n{process.tail()}")
        time.sleep(interval)


def http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    """True when GET `url` answers 200."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports in a temp run dir; kube-scheduler started on demand."""

    def __init__(self, install: K8sInstall | None = None, run_dir: Path | None = None,
                 feature_gates: str = "", runtime_config: str = "") -> None:
        self.install = install or find_installs()[0][-1]
        self.bin_dir = self.install.bin_dir
        self.feature_gates, self.runtime_config = feature_gates, runtime_config
        self._own_run_dir = run_dir is None
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="meshfit-realk8s-"))
        self.pki, self.logs = self.run_dir / "pki", self.run_dir / "logs"
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.scheduler: ManagedProcess | None = None
        self.controller_manager: ManagedProcess | None = None
        self.scheduler_options: dict = {}
        self.api_port = 0
        self.startup_seconds = 0.0
        _PLANES.append(self)

    @property
    def version(self) -> tuple[int, int, int]:
        """The Kubernetes version of the binaries (what kube-apiserver --version prints)."""
        return self.install.version

    def _gates(self) -> list[str]:
        return [f"--feature-gates={self.feature_gates}"] if self.feature_gates else []

    @property
    def server(self) -> str:
        """The API server URL (https://127.0.0.1:<port>)."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (group system:masters)."""
        return self.run_dir / "admin.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        """kube-scheduler's kubeconfig (user system:kube-scheduler)."""
        return self.run_dir / "scheduler.kubeconfig"

    @property
    def admin_token(self) -> str:
        """Admin bearer token."""
        return (self.pki / "admin.token").read_text().strip()

    def ssl_context(self) -> ssl.SSLContext:
        """TLS context trusting the control plane's CA."""
        return ssl.create_default_context(cafile=str(self.pki / "ca.crt"))

    def start(self, attempts: int = 3) -> "ControlPlane":
        """Make PKI and kubeconfigs, start etcd then kube-apiserver, wait for /readyz.

        A port taken by another process between choosing it and binding it (xdist workers choose theirs
        at the same time) is a start-up race, not a failure: the plane starts again on fresh ports."""
        began = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        make_pki(self.pki)
        for attempt in range(1, attempts + 1):
            try:
                self._start_processes()
                break
            except RuntimeError as failure:
                if PORT_TAKEN not in str(failure) or attempt == attempts:
                    raise
                for process in (self.apiserver, self.etcd):
                    if process is not None:
                        process.stop()
                shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_processes(self) -> None:
        etcd_port, peer_port, self.api_port = free_port(), free_port(), free_port()
        ca = self.pki / "ca.crt"
        write_kubeconfig(self.kubeconfig, self.server, ca, "admin", self.admin_token)
        write_kubeconfig(self.scheduler_kubeconfig, self.server, ca, "system:kube-scheduler",
                         (self.pki / "scheduler.token").read_text().strip())
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        self.etcd = ManagedProcess("etcd", [
            str(self.install.etcd), "--name", "local", "--data-dir", str(self.run_dir / "etcd-data"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"local={peer_url}", "--quota-backend-bytes", "2147483648",
            "--logger", "zap", "--log-level", "warn"], self.logs / "etcd.log").start()
        wait_until(lambda: http_ok(f"{etcd_url}/health"), 30, self.etcd, "/health")
        p = self.pki
        self.apiserver = ManagedProcess("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"), "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}", f"--etcd-servers={etcd_url}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={ca}", f"--token-auth-file={p / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
            "--authorization-mode=RBAC", "--allow-privileged=true", "--profiling=false",
            "--disable-admission-plugins=TaintNodesByCondition", "--v=1", *self._gates(),
            *([f"--runtime-config={self.runtime_config}"] if self.runtime_config else [])],
            self.logs / "kube-apiserver.log").start()
        context, token = self.ssl_context(), self.admin_token
        wait_until(lambda: http_ok(f"{self.server}/readyz", context, token), 60, self.apiserver, "/readyz")

    def start_scheduler(self, extender_url: str, node_cache_capable: bool = False,
                        percentage_of_nodes_to_score: int | None = None, pod_initial_backoff_seconds: int = 1,
                        pod_max_backoff_seconds: int = 10, verbosity: int = 2,
                        extra_args: Sequence[str] = (), extender_tls: dict | None = None,
                        profiles: Sequence[str] = ("meshfit",)) -> ManagedProcess:
        """Start kube-scheduler (profile `meshfit`, meshfit as extender) and wait for its /healthz."""
        if self.scheduler is not None and self.scheduler.alive():
            raise RuntimeError("kube-scheduler already running; stop_scheduler() first")
        self.scheduler_options = dict(
            extender_url=extender_url, node_cache_capable=node_cache_capable,
            percentage_of_nodes_to_score=percentage_of_nodes_to_score,
            pod_initial_backoff_seconds=pod_initial_backoff_seconds, pod_max_backoff_seconds=pod_max_backoff_seconds,
            verbosity=verbosity, extra_args=tuple(extra_args), extender_tls=extender_tls, profiles=tuple(profiles))
        config_path = self.run_dir / "scheduler-config.yaml"
        config_path.write_text(json.dumps(scheduler_config(
            self.scheduler_kubeconfig, extender_url, node_cache_capable, percentage_of_nodes_to_score,
            pod_initial_backoff_seconds, pod_max_backoff_seconds, extender_tls, profiles), indent=2))
        port = free_port()
        self.scheduler = ManagedProcess("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"), f"--config={config_path}", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--v={verbosity}", *self._gates(), *extra_args],
            self.logs / "kube-scheduler.log").start()
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        wait_until(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure), 30, self.scheduler, "/healthz")
        return self.scheduler

    def start_controller_manager(self, controllers: Sequence[str] | None = None) -> ManagedProcess:
        """Start kube-controller-manager with the real workload controllers (Job, garbage collector, ...)."""
        if not self.install.has("kube-controller-manager"):
            raise RuntimeError(f"no kube-controller-manager in {self.bin_dir}")
        if self.controller_manager is not None and self.controller_manager.alive():
            return self.controller_manager
        kubeconfig = write_kubeconfig(self.run_dir / "controller-manager.kubeconfig", self.server, self.pki / "ca.crt",
                                      "system:kube-controller-manager",
                                      (self.pki / "controller-manager.token").read_text().strip())
        port = free_port()
        self.controller_manager = ManagedProcess("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            "--use-service-account-credentials=true", f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}", f"--controllers={','.join(controllers or self._controllers())}",
            "--v=1", *self._gates()], self.logs / "kube-controller-manager.log").start()
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        wait_until(lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure), 60, self.controller_manager,
                   "/healthz")
        return self.controller_manager

    def _controllers(self) -> tuple[str, ...]:
        """The test controllers under the names this version knows (`*-controller` from 1.28 on)."""
        if self.install.at_least(1, 28):
            return CONTROLLERS
        return tuple(c.removesuffix("-controller").replace("garbage-collector", "garbagecollector") for c in CONTROLLERS)

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler if it runs."""
        if self.scheduler is not None:
            self.scheduler.stop()

    def restart_scheduler(self, **changes) -> ManagedProcess:
        """Stop kube-scheduler and start it again with the same options (updated by `changes`)."""
        if not self.scheduler_options and "extender_url" not in changes:
            raise RuntimeError("kube-scheduler was never started")
        self.stop_scheduler()
        return self.start_scheduler(**{**self.scheduler_options, **changes})

    def tail_logs(self, lines: int = 40, extra: Sequence[ManagedProcess] = ()) -> str:
        """Last log lines of every process (plus `extra` ones), for failure messages."""
        own = [p for p in (self.etcd, self.apiserver, self.scheduler, self.controller_manager) if p is not None]
        return "\n".join(p.tail(lines) for p in [*own, *extra])

    def stop(self, keep_run_dir: bool = False) -> None:
        """Stop scheduler, apiserver, etcd (SIGTERM, then SIGKILL); remove the temp run dir."""
        for process in (self.controller_manager, self.scheduler, self.apiserver, self.etcd):
            if process is not None:
                process.stop()
        if self._own_run_dir and not keep_run_dir and not os.environ.get("MESHFIT_K8S_KEEP"):
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self in _PLANES:
            _PLANES.remove(self)


class MeshfitProcess:
    """`meshfit serve` in real mode against the control plane, on a free loopback port."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_args: Sequence[str] = (),
                 port: int | None = None, ready_timeout: float = 30.0,
                 tls_context: ssl.SSLContext | None = None) -> None:
        self.kubeconfig, self.log_path, self.extra_args = kubeconfig, log_path, list(extra_args)
        self.tls_context = tls_context  # meshfit serves HTTPS (TLS flags in extra_args); used for /readyz
        self.port = port or free_port()
        self.ready_timeout = ready_timeout
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """Base URL, http://127.0.0.1:<port> (https:// with a `tls_context`)."""
        return f"{'https' if self.tls_context is not None else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> "MeshfitProcess":
        """Launch and wait until GET /readyz answers 200."""
        exe = Path(sys.executable).parent / "meshfit"
        argv = [str(exe), "serve", "--kubeconfig", str(self.kubeconfig), "--host", "127.0.0.1",
                "--port", str(self.port), "--grpc-port", "0", *self.extra_args]
        self.process = ManagedProcess("meshfit", argv, self.log_path).start()
        wait_until(lambda: http_ok(f"{self.url}/readyz", self.tls_context), self.ready_timeout, self.process,
                   "/readyz 200")
        return self

    def alive(self) -> bool:
        """True while meshfit runs."""
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        if self.process is not None:
            self.process.stop()

    def restart(self) -> "MeshfitProcess":
        """Stop and start again on the same port."""
        self.stop()
        return self.start()

    def tail(self, lines: int = 40) -> str:
        """Last lines of meshfit's log."""
        return self.process.tail(lines) if self.process else f"--- meshfit (not started) {self.log_path}"
