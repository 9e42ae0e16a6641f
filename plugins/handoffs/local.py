"""The `local` handoff: run a placed job on this machine, one process per rank, over torch.distributed (gloo).

Each process gets exactly the environment `meshfit launch` would compute inside the pod the
placement gave its rank (`scheduler.handoff.assignment.launch.rank_environment`), with the rendezvous on loopback.
The runner forwards SIGTERM / Ctrl-C to every rank as SIGTERM; the ranks agree to stop at the
next step, write an emergency checkpoint and exit cleanly.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from scheduler.handoff.assignment import assignment_for_pod
from scheduler.handoff.launch import rank_environment
from scheduler.placement.result import Placement

NAME = "local"
LOCAL_ADDRESS = "127.0.0.1"


class LocalRunError(RuntimeError):
    """A rank failed (its one-line reason is the message); the other ranks were stopped."""


@dataclass
class LocalRunResult:
    """What a local run did: status, steps reached, the loss of each step run now, each rank's pod, node and
    observed groups."""

    status: str
    steps: int
    start_step: int
    losses: list[float]
    ranks: list[dict[str, Any]]
    checkpoint: str | None = None
    coords: dict[int, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The `meshfit run -o json` summary of DESIGN.md (plus `start_step` after a resume)."""
        return {"status": self.status, "steps": self.steps, "start_step": self.start_step,
                "losses": list(self.losses), "ranks": list(self.ranks), "checkpoint": self.checkpoint}


def loopback_interface() -> str:
    """Name of the loopback network interface ("lo" on Linux, "lo0" on macOS)."""
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as probe:
        probe.bind((LOCAL_ADDRESS, 0))
        return probe.getsockname()[1]


def local_environments(placement: Placement, port: int) -> list[dict[str, str]]:
    """The launch environment of every rank, in rank order, with the rendezvous and transports on loopback."""
    interface = loopback_interface()
    transport = {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface, "NCCL_IB_DISABLE": "1",
                 "MESHFIT_FABRIC": "loopback", "OMP_NUM_THREADS": "1"}
    environments = []
    for pod in placement.gang.pods:
        assignment = assignment_for_pod(placement, pod.index, LOCAL_ADDRESS, port)
        environments += [rank_environment(assignment, local, transport) for local in range(pod.gpus)]
    return environments


def _start_spawner(environments: list[dict[str, str]], options, results_dir: Path) -> subprocess.Popen:
    job = {"environments": environments, "options": asdict(options), "results_dir": str(results_dir)}
    process = subprocess.Popen([sys.executable, "-m", "plugins.handoffs.local_runtime.spawner"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=open(results_dir / "stderr.log", "wb"), text=True)
    process.stdin.write(json.dumps(job))
    process.stdin.close()
    return process


def _forward_signals(process: subprocess.Popen) -> Callable[[], None]:
    """Forward SIGTERM and SIGINT to the spawner (which stops every rank); returns a restore function."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def forward(signum, frame) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _stream_steps(process: subprocess.Popen, on_step: Callable[[int, float], None] | None) -> None:
    for line in process.stdout:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if on_step is not None:
            on_step(int(event["step"]), float(event["loss"]))


def _read_results(results_dir: Path, world_size: int, exit_code: int) -> dict[int, dict]:
    errors = sorted(results_dir.glob("rank-*.error"), key=lambda path: path.stat().st_mtime)
    if errors:
        raise LocalRunError(f"{errors[0].stem.replace('-', ' ')}: {errors[0].read_text().strip()}")
    results = {}
    for rank in range(world_size):
        path = results_dir / f"rank-{rank}.json"
        if not path.is_file():
            log = (results_dir / "stderr.log").read_text(errors="replace").strip().splitlines()
            detail = log[-1] if log else f"exit status {exit_code}"
            raise LocalRunError(f"rank {rank} did not finish: {detail}")
        results[rank] = json.loads(path.read_text())
    return results


def _summarise(results: dict[int, dict], placement: Placement) -> LocalRunResult:
    """The run's result; each rank with the pod whose environment it ran in and that pod's placed node."""
    ordered = [results[rank] for rank in sorted(results)]
    owner = next(r for r in ordered if r["losses"] is not None)
    interrupted = any(r["interrupted"] for r in ordered)
    return LocalRunResult(
        status="interrupted" if interrupted else "completed", steps=owner["final_step"],
        start_step=owner["start_step"], losses=[float(x) for x in owner["losses"]],
        ranks=[{"rank": r["rank"], "pod_index": r["pod_index"], "node": placement.pod_nodes[r["pod_index"]],
                "groups": r["groups"]} for r in ordered],
        checkpoint=ordered[0]["checkpoint"], coords={r["rank"]: r["coords"] for r in ordered})


def _check_resumable(placement: Placement, options, model_config: dict) -> None:
    from plugins.handoffs.local_runtime.checkpoint import CheckpointError, check_compatible, layout_meta, read_meta

    if not options.checkpoint_dir:
        raise LocalRunError("resume needs a checkpoint directory")
    try:
        check_compatible(read_meta(Path(options.checkpoint_dir)),
                         layout_meta(placement.gang.parallelism, placement.rank_order, model_config))
    except CheckpointError as exc:
        raise LocalRunError(str(exc)) from None


def run_local(placement: Placement, options, on_step: Callable[[int, float], None] | None = None) -> LocalRunResult:
    """Run the placed job here, one process per rank; `options` is a local_runtime TrainOptions."""
    from plugins.handoffs.local_runtime import require_torch
    from plugins.handoffs.local_runtime.model import ModelConfig

    require_torch()
    if not placement.placed:
        raise LocalRunError(f"job {placement.gang.key} is not placed: {placement.reason}")
    config = ModelConfig.for_parallelism(placement.gang.parallelism, options.seed)
    if options.resume:
        _check_resumable(placement, options, config.as_dict())
    with tempfile.TemporaryDirectory(prefix="meshfit-run-") as scratch:
        results_dir = Path(scratch)
        process = _start_spawner(local_environments(placement, free_port()), options, results_dir)
        restore = _forward_signals(process)
        try:
            _stream_steps(process, on_step)
            exit_code = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            restore()
        return _summarise(_read_results(results_dir, placement.gang.world_size, exit_code), placement)


class LocalHandoff:
    """Handoff that runs the placed job on this machine (the example model, gloo over loopback)."""

    name = NAME

    def run(self, placement: Placement, options, on_step: Callable[[int, float], None] | None = None) -> LocalRunResult:
        """Run `placement` locally (see `run_local`)."""
        return run_local(placement, options, on_step)


def factory(**options: object) -> LocalHandoff:
    """Registry factory for the `local` handoff."""
    return LocalHandoff()
