"""`python -m plugins.handoffs.local_runtime.spawner`: import torch once, fork one process per rank, supervise.

The runner writes a JSON job on stdin: `{"environments": [env per rank], "options": {...},
"results_dir": path}`.  Each forked rank adopts its environment and trains; the loss-owning rank
prints `{"step": n, "loss": x}` lines on stdout, and every rank leaves `rank-N.json` (its report)
or `rank-N.error` (one line) in the results directory.  SIGTERM / SIGINT are forwarded to every
rank as SIGTERM; if a rank fails, the others are killed so nothing hangs in a collective.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch._dynamo  # noqa: F401  (autograd imports it on first backward: load it once, before forking)

from plugins.handoffs.local_runtime.worker import TrainOptions, worker_main


class FileEvents:
    """Event sink of one rank: step lines to stdout (one write each), reports and errors to files."""

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = results_dir

    def put(self, event: tuple) -> None:
        """Record ("step", rank, (step, loss)), ("result", rank, report) or ("error", rank, message)."""
        kind, rank, payload = event
        if kind == "step":
            step, loss = payload
            os.write(1, (json.dumps({"rank": rank, "step": step, "loss": loss}) + "\n").encode())
            return
        suffix = "json" if kind == "result" else "error"
        temp = self.results_dir / f".rank-{rank}.{suffix}.tmp"
        temp.write_text(json.dumps(payload) if kind == "result" else str(payload))
        os.replace(temp, self.results_dir / f"rank-{rank}.{suffix}")


def _fork_rank(environment: dict[str, str], options: TrainOptions, events: FileEvents) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        worker_main(environment, options, events)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _supervise(pids: list[int]) -> int:
    """Wait for every rank; on the first failure kill the rest. Returns 0 or the first failing status."""
    alive, status = set(pids), 0
    while alive:
        pid, wait_status = os.wait()
        if pid not in alive:
            continue
        alive.discard(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        if code != 0 and status == 0:
            status = code if code > 0 else 128 - code
            time.sleep(0.5)  # let the other ranks write their own reason first
            for other in alive:
                try:
                    os.kill(other, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return status


def main() -> int:
    """Read the job from stdin, fork the ranks, forward signals, and return a process exit status."""
    job = json.loads(sys.stdin.read())
    options = TrainOptions(**job["options"])
    events = FileEvents(Path(job["results_dir"]))
    pids: list[int] = []

    def forward(signum, frame) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for environment in job["environments"]:
        pids.append(_fork_rank(environment, options, events))
    return _supervise(pids)


if __name__ == "__main__":
    sys.exit(main())
