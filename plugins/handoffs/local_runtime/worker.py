"""One training process of the local runtime: reads the `meshfit launch` environment and trains its shard.

The process learns everything about its place in the job from the environment `meshfit launch`
computes (RANK, WORLD_SIZE, MASTER_ADDR/PORT, MESHFIT_PARALLELISM, MESHFIT_RANK_ORDER,
MESHFIT_*_RANK), builds the TP/PP/DP groups from the rank order, and reports per-step losses
and the groups it observed through an event queue to the runner.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from plugins.handoffs.local_runtime.checkpoint import check_compatible, layout_meta, load_shard, read_meta, save_checkpoint
from plugins.handoffs.local_runtime.model import ModelConfig, batch_for_step, build_stage, make_optimizer
from plugins.handoffs.local_runtime.parallel import (
    ParallelState, agree_to_stop, all_reduce_data_parallel_grads, build_parallel_state, global_step_loss,
    pipeline_train_step,
)
from scheduler.placement.jobs import AXES, Parallelism


@dataclass(frozen=True)
class TrainOptions:
    """What the runner asks every process to do."""

    steps: int
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    seed: int = 0
    timeout_seconds: float = 60.0


class WorkerError(RuntimeError):
    """The process's environment or checkpoint does not fit the job it was started for."""


def _state_from_environment() -> ParallelState:
    rank = int(os.environ["RANK"])
    par = Parallelism.parse(os.environ["MESHFIT_PARALLELISM"])
    state = build_parallel_state(rank, par, os.environ["MESHFIT_RANK_ORDER"])
    from_env = {axis: int(os.environ[f"MESHFIT_{axis.upper()}_RANK"]) for axis in AXES}
    if from_env != state.coords:
        raise WorkerError(f"rank {rank}: MESHFIT_*_RANK {from_env} disagree with the rank order ({state.coords})")
    return state


def _layout_meta(state: ParallelState, config: ModelConfig) -> dict[str, Any]:
    return layout_meta(state.parallelism, os.environ["MESHFIT_RANK_ORDER"], config.as_dict())


def _local_micro_batches(config: ModelConfig, state: ParallelState, step: int) -> tuple[list, list]:
    inputs, targets = batch_for_step(config, step)
    per_replica = config.micro_batch * config.micro_batches
    start = state.coords["dp"] * per_replica
    inputs, targets = inputs[start:start + per_replica], targets[start:start + per_replica]
    return list(inputs.split(config.micro_batch)), list(targets.split(config.micro_batch))


class Trainer:
    """The shard, optimizer and loop of one rank."""

    def __init__(self, options: TrainOptions, state: ParallelState, events) -> None:
        self.options, self.state, self.events = options, state, events
        coords, par = state.coords, state.parallelism
        self.config = ModelConfig.for_parallelism(par, options.seed)
        self.stage = build_stage(self.config, coords["pp"], par.pp, coords["tp"], par.tp, state.groups.get("tp"))
        self.optimizer = make_optimizer(self.stage, self.config)
        self.is_last_stage = coords["pp"] == par.pp - 1
        self.owns_loss = self.is_last_stage and all(coords[a] == 0 for a in AXES if a != "pp")
        self.root = Path(options.checkpoint_dir) if options.checkpoint_dir else None
        self.step = 0
        self.saved_step: int | None = None

    def resume(self) -> None:
        """Load this rank's shard of the latest checkpoint after checking it was written by the same layout."""
        if self.root is None:
            raise WorkerError("--resume needs a checkpoint directory")
        check_compatible(read_meta(self.root), _layout_meta(self.state, self.config))
        shard = load_shard(self.root, self.state.rank)
        self.stage.load_state_dict(shard["model"])
        self.optimizer.load_state_dict(shard["optimizer"])
        self.step = self.saved_step = int(shard["step"])

    def train_one_step(self) -> float | None:
        """Run one GPipe step with TP and DP and return the global loss (last stage) or None."""
        micro_inputs, micro_targets = _local_micro_batches(self.config, self.state, self.step)
        self.optimizer.zero_grad(set_to_none=True)
        stage_loss = pipeline_train_step(self.stage, self.state, micro_inputs, micro_targets)
        all_reduce_data_parallel_grads(self.stage, self.state)
        self.optimizer.step()
        self.step += 1
        return global_step_loss(stage_loss, self.state) if self.is_last_stage else None

    def checkpoint(self) -> str | None:
        """Collectively save the current step (once per step) and return its directory."""
        if self.root is None:
            return None
        if self.saved_step != self.step:
            shard = {"model": self.stage.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "coords": dict(self.state.coords)}
            save_checkpoint(self.root, self.step, self.state.rank, shard, _layout_meta(self.state, self.config))
            self.saved_step = self.step
        return str(self.root / f"step-{self.step:08d}")

    def run(self, stop: threading.Event) -> dict[str, Any]:
        """Train until `options.steps` or an agreed stop; checkpoint periodically and at the end."""
        start, losses, interrupted = self.step, [], False
        every = self.options.checkpoint_every
        while self.step < self.options.steps:
            if agree_to_stop(stop.is_set()):
                interrupted = True
                break
            loss = self.train_one_step()
            if self.owns_loss:
                losses.append(loss)
                self.events.put(("step", self.state.rank, (self.step, loss)))
            if every and self.step % every == 0:
                self.checkpoint()
        return {"rank": self.state.rank, "coords": dict(self.state.coords),
                "groups": self.state.observed_groups(), "losses": losses if self.owns_loss else None,
                "start_step": start, "final_step": self.step, "interrupted": interrupted,
                "checkpoint": self.checkpoint()}


def train(options: TrainOptions, events, stop: threading.Event) -> dict[str, Any]:
    """Join the process group from the environment, train, and return this rank's report."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=options.timeout_seconds))
    try:
        trainer = Trainer(options, _state_from_environment(), events)
        if options.resume:
            trainer.resume()
        report = trainer.run(stop)
        report["pod_index"] = int(os.environ["MESHFIT_POD_INDEX"])  # the pod whose environment this rank got
        return report
    finally:
        dist.destroy_process_group()


def worker_main(environment: dict[str, str], options: TrainOptions, events) -> None:
    """Process entry point: adopt the launch environment, train, and post ("result"|"error", rank, payload)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner turns Ctrl-C into SIGTERM for every rank
    os.environ.update(environment)
    rank = int(environment["RANK"])
    try:
        events.put(("result", rank, train(options, events, stop)))
    except BaseException as exc:  # report every failure to the runner, then exit non-zero
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        events.put(("error", rank, message[:500]))
        raise SystemExit(1) from None
