"""High availability on the real control plane: two `meshfit serve --leader-elect` replicas behind a
readiness-gated proxy (a Service's stand-in); the leader is SIGKILLed mid-burst, the standby takes the
Lease, re-lists the cluster (rebuilding the gang ledger from what the dead leader bound and
annotated), becomes ready, and kube-scheduler carries on through it: no gang left partly bound, no
node over-committed."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.realk8s.cluster_builders import create_nodes, gang_pod_body, gang_status
from tests.realk8s.controlplane import ManagedProcess, MeshfitProcess
from tests.realk8s.scenario import KubeletStandIn, burst_shapes, create_burst, wait_settled, whole
from tests.realk8s.tcp_proxy import ReadinessProxy

pytestmark = pytest.mark.realk8s

GPUS = 8
LEASE = {"--leader-elect-lease-duration": "4", "--leader-elect-renew-deadline": "3",
         "--leader-elect-retry-period": "1"}


def get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def post(url: str, body: dict) -> tuple[int, dict]:
    """(status, JSON answer) of a POST."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def replica(kube, identity: str) -> MeshfitProcess:
    """A `meshfit serve --leader-elect` replica (Lease `meshfit` in the test's namespace), not started."""
    args = ["--leader-elect", "--leader-elect-namespace", kube.namespace, "--leader-elect-identity", identity]
    args += [item for pair in LEASE.items() for item in pair]
    # A gang the new leader cannot complete (re-placing several gangs' missing members can fragment the
    # free GPUs) is rolled back whole after this long rather than the default 300 s.
    args += ["--gang-completion-timeout", "20"]
    return MeshfitProcess(kube.control_plane.kubeconfig, kube.control_plane.logs / f"meshfit-{identity}-{kube.namespace}.log",
                          args)


def launch_standby(process: MeshfitProcess, timeout: float = 30.0) -> None:
    """Start a replica that is expected to stand by: wait until its /readyz answers 503 "standby", naming
    the holder it read on the Lease."""
    exe = Path(sys.executable).parent / "meshfit"
    argv = [str(exe), "serve", "--kubeconfig", str(process.kubeconfig), "--host", "127.0.0.1",
            "--port", str(process.port), "--grpc-port", "0", *process.extra_args]
    process.process = ManagedProcess(f"meshfit-{process.port}", argv, process.log_path).start()
    deadline = time.monotonic() + timeout
    while True:
        status, text = get(f"{process.url}/readyz")
        if status == 503 and text.startswith("meshfit standby") and "held by" in text:
            return
        assert process.alive() and time.monotonic() < deadline, f"standby never answered: {status} {text}\n{process.tail()}"
        time.sleep(0.1)


class Stack:
    """What `wait_settled` needs: log tails of every process involved."""

    def __init__(self, kube, replicas) -> None:
        self.kube, self.replicas = kube, replicas

    def tail_logs(self, lines: int = 40) -> str:
        return self.kube.control_plane.tail_logs(lines, [r.process for r in self.replicas if r.process])


def test_standby_takes_over_when_the_leader_is_killed_mid_burst(kube):
    from kubernetes.client import CoordinationV1Api

    nodes = 24
    create_nodes(kube.core, nodes, gpus=GPUS, leaf_size=8)
    plane = kube.control_plane
    a, b = replica(kube, "replica-a"), replica(kube, "replica-b")
    kubelet = KubeletStandIn(kube.core, kube.namespace).start()
    proxy = None
    try:
        a.start()  # first: wins the Lease, lists, becomes ready
        kube.extra_logs.append(a.process)
        launch_standby(b)
        kube.extra_logs.append(b.process)
        # a standby refuses the verbs with a reason rather than deciding on a cold ledger
        # (every answer is 503; the holder's name appears once the standby's latest Lease read has it)
        deadline = time.monotonic() + 10
        while True:
            status, answer = post(f"{b.url}/filter", {"Pod": {"metadata": {"name": "x", "namespace": "y"}},
                                                      "NodeNames": []})
            assert status == 503, (status, answer)
            if "held by replica-a" in answer["error"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "held by replica-a" in answer["error"], (status, answer)
        proxy = ReadinessProxy([("127.0.0.1", a.port), ("127.0.0.1", b.port)]).start()
        assert proxy.ready == [("127.0.0.1", a.port)]
        plane.start_scheduler(proxy.url)
        stack = Stack(kube, [a, b])

        shapes = burst_shapes(seed=23, capacity_gpus=nodes * GPUS)
        late = [gang_pod_body(kube.namespace, "late", i, 4, GPUS, f"tp={GPUS},dp=4") for i in range(4)]
        for body in late[:3]:  # its last member comes only after the fail-over: the gang is partly bound
            kube.core.create_namespaced_pod(kube.namespace, body)  # at the SIGKILL, whatever the timing
        create_burst(kube.core, kube.namespace, shapes, seed=23)
        deadline = time.monotonic() + 30
        while gang_status(kube.core, kube.namespace).get("late", (0, 4))[0] < 3:
            assert time.monotonic() < deadline, f"the late gang's members never bound\n{stack.tail_logs(30)}"
            time.sleep(0.05)
        a.kill()  # SIGKILL the leader with gangs partly bound: no release, the Lease must expire
        killed = time.monotonic()
        at_kill = {n: s for n, s in gang_status(kube.core, kube.namespace).items() if 0 < s[0] < s[1]}
        at_kill["late"] = (gang_status(kube.core, kube.namespace)["late"][0], 4)  # 3 of its 4 pods exist, bound

        while get(f"{b.url}/readyz")[0] != 200:
            assert b.alive() and time.monotonic() - killed < 30, f"standby never took over\n{stack.tail_logs(30)}"
            time.sleep(0.05)
        take_over = time.monotonic() - killed
        kube.core.create_namespaced_pod(kube.namespace, late[3])  # the new leader completes the late gang
        try:
            status = wait_settled(kube, stack, timeout=150)
        except AssertionError as exc:  # what the new leader holds, for the failure message
            raise AssertionError(f"{exc}\nnew leader /reservations: {get(f'{b.url}/reservations')[1][:3000]}\n"
                                 f"/gangs: {get(f'{b.url}/gangs')[1][:3000]}") from None
        settled = time.monotonic() - killed

        lease = CoordinationV1Api(kube.api_client).read_namespaced_lease("meshfit", kube.namespace)
        assert lease.spec.holder_identity == "replica-b" and lease.spec.lease_transitions == 1
        assert proxy.ready == [("127.0.0.1", b.port)]
        assert get(f"{proxy.url}/readyz")[0] == 200  # what kube-scheduler reaches now is the new leader
        assert proxy.connections[("127.0.0.1", b.port)] > 0
        # every gang partly bound when the leader died was completed by the new leader, or rolled back whole
        completed = {name for name in at_kill if status[name][0] == status[name][1]}
        assert "late" in at_kill and all(name in completed or status[name][0] == 0 for name in at_kill), (at_kill, status)
        assert 0 < len(whole(status)) < len(shapes)
        # take-over: lease duration (4 s) after the last renew, plus a retry period, plus the re-list
        assert take_over < 4 + 2 * 1 + 5, take_over
        print(f"\nHA: {len(at_kill)} gangs partly bound at SIGKILL ({len(completed)} completed by the new leader, "
              f"the others rolled back whole); standby ready {take_over:.2f} s after it; "
              f"settled {settled:.1f} s after it with {len(whole(status))}/{len(shapes)} gangs whole")
    finally:
        plane.stop_scheduler()
        if proxy is not None:
            proxy.stop()
        for process in (a, b):
            process.stop()
        kubelet.stop()
