"""The system under test: two `meshfit serve --leader-elect` replicas behind a readiness-gated proxy (a Service's
stand-in) and kube-scheduler calling the proxy; a supervisor restarts whatever dies, as a Deployment would."""

from __future__ import annotations

import random
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from tests.realk8s.controlplane import ControlPlane, ManagedProcess, free_port
from tests.realk8s.tcp_proxy import ReadinessProxy
from tests.soak import kubeio
from tests.soak.timeline import Timeline


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc).encode()


class Replica:
    """One meshfit replica on a fixed port; every start is a new process with a new holder identity (`a-3`)."""

    def __init__(self, name: str, kubeconfig: Path, log_path: Path, args: Sequence[str]) -> None:
        self.name, self.kubeconfig, self.log_path, self.args = name, kubeconfig, log_path, list(args)
        self.port = free_port()
        self.incarnation = 0
        self.process: ManagedProcess | None = None
        self.down_on_purpose = False

    @property
    def identity(self) -> str:
        """The Lease holder identity of the current process."""
        return f"{self.name}-{self.incarnation}"

    @property
    def url(self) -> str:
        """http://127.0.0.1:<port>."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Launch a new process (it stands by or takes the Lease by itself)."""
        self.incarnation += 1
        exe = Path(sys.executable).parent / "meshfit"
        argv = [str(exe), "serve", "--kubeconfig", str(self.kubeconfig), "--host", "127.0.0.1", "--port",
                str(self.port), "--grpc-port", "0", "--leader-elect-identity", self.identity, *self.args]
        self.process = ManagedProcess(f"meshfit-{self.identity}", argv, self.log_path).start()
        self.down_on_purpose = False

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.alive()

    def kill(self) -> None:
        """SIGKILL (the supervisor restarts it)."""
        self.down_on_purpose = True
        if self.process is not None:
            self.process.kill()

    def terminate(self) -> None:
        """SIGTERM: drain, release the Lease, exit (the supervisor restarts it)."""
        self.down_on_purpose = True
        if self.process is not None:
            self.process.stop(grace=10.0)


class SoakStack:
    """Replicas `a` and `b`, the proxy, kube-scheduler, and the supervisor thread restarting them after 1-3 s."""

    def __init__(self, plane: ControlPlane, namespace: str, timeline: Timeline, seed: int,
                 meshfit_args: Sequence[str], lease: tuple[float, float, float]) -> None:
        self.plane, self.namespace, self.timeline = plane, namespace, timeline
        self.rng = random.Random(seed)
        self.lease_duration = lease[0]
        args = ["--leader-elect", "--leader-elect-namespace", namespace,
                "--leader-elect-lease-duration", str(lease[0]), "--leader-elect-renew-deadline", str(lease[1]),
                "--leader-elect-retry-period", str(lease[2]), *meshfit_args]
        self.replicas = [Replica(n, plane.kubeconfig, plane.logs / f"meshfit-{n}.log", args) for n in ("a", "b")]
        self.proxy: ReadinessProxy | None = None
        self.disruptions: list[tuple[float, str]] = []  # (monotonic time, what): kills, stops, unexpected exits
        self.unexpected_exits: list[str] = []
        self.scheduler_down_on_purpose = False
        self._restart_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True)
        self._api: Any = None

    def start(self) -> "SoakStack":
        """Start replica a (it takes the Lease and becomes ready), then b (standby), the proxy and kube-scheduler."""
        a, b = self.replicas
        a.start()
        self._wait(lambda: http_get(f"{a.url}/readyz", 2)[0] == 200, 60, f"replica a ready\n{a.process.tail()}")
        b.start()
        self._wait(lambda: http_get(f"{b.url}/readyz", 2)[0] == 503, 60, f"replica b standing by\n{b.process.tail()}")
        self.proxy = ReadinessProxy([("127.0.0.1", r.port) for r in self.replicas]).start()
        self.plane.start_scheduler(self.proxy.url, profiles=("meshfit", "default-scheduler"))
        self._thread.start()
        return self

    @staticmethod
    def _wait(check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def _lease_api(self) -> Any:
        if self._api is None:
            self._api = kubeio.new_client(str(self.plane.kubeconfig))
        return self._api

    def holder(self) -> str | None:
        """The Lease's current holder identity."""
        return kubeio.lease_holder(self._lease_api(), self.namespace)

    def leader(self) -> Replica | None:
        """The replica whose running process holds the Lease, None when none does."""
        holder = self.holder()
        return next((r for r in self.replicas if r.identity == holder and r.alive()), None)

    def standby(self) -> Replica | None:
        """The running replica that does not hold the Lease."""
        leader = self.leader()
        return next((r for r in self.replicas if r is not leader and r.alive()), None) if leader else None

    def settled(self) -> bool:
        """Both replicas and kube-scheduler run and the leader is ready: safe to inject the next process fault."""
        leader = self.leader()
        scheduler = self.plane.scheduler
        return (leader is not None and all(r.alive() for r in self.replicas) and scheduler is not None
                and scheduler.alive() and http_get(f"{leader.url}/readyz", 3)[0] == 200)

    def disrupted(self, what: str) -> None:
        """Record a meshfit disruption (a fail-over window starts now)."""
        self.disruptions.append((time.monotonic(), what))
        self.timeline.cluster(what)

    def in_failover(self, at: float, window: float, slack: float = 5.0) -> bool:
        """True when a meshfit disruption happened within `window` seconds before monotonic time `at` (or up to
        `slack` seconds after it: an exit is noticed up to a supervisor round late)."""
        return any(-slack <= at - when <= window for when, _ in self.disruptions)

    def _holder_quietly(self) -> str | None:
        try:
            return self.holder()
        except Exception:  # noqa: BLE001 - the API server is busy: unknown, like no holder
            return None

    def kill_scheduler(self) -> None:
        """SIGKILL kube-scheduler (the supervisor restarts it)."""
        self.scheduler_down_on_purpose = True
        if self.plane.scheduler is not None:
            self.plane.scheduler.kill()

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            for replica in self.replicas:
                self._revive(replica.name, replica.alive(), replica.down_on_purpose, now, replica.start,
                             lambda r=replica: r.process.tail(15) if r.process else "")
            scheduler = self.plane.scheduler
            self._revive("kube-scheduler", scheduler is not None and scheduler.alive(),
                         self.scheduler_down_on_purpose, now, self._start_scheduler,
                         lambda: scheduler.tail(15) if scheduler else "")

    def _revive(self, name: str, alive: bool, on_purpose: bool, now: float, start, tail) -> None:
        if alive or self._stop.is_set():
            self._restart_at.pop(name, None)
            return
        if name not in self._restart_at:
            self._restart_at[name] = now + self.rng.uniform(1.0, 3.0)
            if not on_purpose:
                self.unexpected_exits.append(f"{name} exited on its own at t={self.timeline.now():.1f}s:\n{tail()}")
                replica = next((r for r in self.replicas if r.name == name), None)
                holder = self._holder_quietly()
                if replica is not None and holder in (None, replica.identity):
                    self.disrupted(f"meshfit leader {replica.identity} exited on its own")
                else:
                    self.timeline.cluster(f"{name} exited on its own")
            return
        if self._restart_at[name] <= now:
            del self._restart_at[name]
            try:
                start()
                self.timeline.cluster(f"supervisor restarted {name}")
            except Exception as exc:  # noqa: BLE001 - try again on the next round
                self.timeline.cluster(f"supervisor could not restart {name}: {exc}")

    def _start_scheduler(self) -> None:
        self.scheduler_down_on_purpose = False
        self.plane.start_scheduler(**self.plane.scheduler_options)

    def wait_settled(self, timeout: float = 60.0) -> bool:
        """Wait until `settled()`; False if it did not happen in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.settled():
                return True
            time.sleep(0.5)
        return False

    def logs(self) -> list[ManagedProcess]:
        """The replicas' current processes (for log tails)."""
        return [r.process for r in self.replicas if r.process is not None]

    def stop(self) -> None:
        """Stop the supervisor, kube-scheduler, the proxy and both replicas."""
        self._stop.set()
        self._thread.join(10)
        self.plane.stop_scheduler()
        if self.proxy is not None:
            self.proxy.stop()
        for replica in self.replicas:
            if replica.process is not None:
                replica.process.stop()
