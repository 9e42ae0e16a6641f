"""Sharded checkpoints: one file per rank per step, a meta file, and a `latest` pointer replaced atomically.

Layout::

    DIR/step-00000010/rank-00003.pt   model shard, optimizer state, step, torch RNG state, coords
    DIR/step-00000010/meta.json       world size, parallelism, rank order, model config
    DIR/latest                        "step-00000010" (written to a temp file, then os.replace)

Every rank writes its shard (temp file + rename), all ranks meet at a barrier, then rank 0
writes the meta file and moves `latest`, so `latest` never names an incomplete step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from topology.textfile import read_text

LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint directory that cannot be resumed from (missing, incomplete or another layout)."""


def step_dir(root: Path, step: int) -> Path:
    """Directory of the checkpoint taken after `step` steps."""
    return root / f"step-{step:08d}"


def _atomic_write_bytes(path: Path, payload: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def save_checkpoint(root: Path, step: int, rank: int, shard: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Collectively save this rank's shard for `step`; rank 0 then publishes `latest`. Returns the step dir."""
    directory = step_dir(root, step)
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".rank-{rank:05d}.pt.tmp"
    torch.save({**shard, "step": step, "rng_state": torch.get_rng_state()}, temp)
    os.replace(temp, directory / f"rank-{rank:05d}.pt")
    dist.barrier()
    if rank == 0:
        _atomic_write_bytes(directory / "meta.json", json.dumps({**meta, "step": step}, indent=1).encode())
        _atomic_write_bytes(root / LATEST, directory.name.encode())
    dist.barrier()
    return directory


def latest_step_dir(root: Path) -> Path:
    """The step directory `latest` points to; CheckpointError if there is none."""
    pointer = root / LATEST
    if not pointer.is_file():
        raise CheckpointError(f"no checkpoint to resume from in {root} (no {LATEST} file)")
    directory = root / read_text(pointer, "checkpoint pointer", CheckpointError).strip()
    if not (directory / "meta.json").is_file():
        raise CheckpointError(f"{pointer} names {directory.name}, which has no meta.json")
    return directory


def read_meta(root: Path) -> dict[str, Any]:
    """The meta document of the latest checkpoint."""
    return json.loads(read_text(latest_step_dir(root) / "meta.json", "checkpoint meta", CheckpointError))


def layout_meta(parallelism, rank_order: str, model_config: dict[str, Any]) -> dict[str, Any]:
    """The fields a checkpoint must share with a run that resumes from it."""
    return {"world_size": parallelism.world_size, "parallelism": str(parallelism), "rank_order": rank_order,
            "model": dict(model_config)}


def check_compatible(meta: dict[str, Any], expected: dict[str, Any]) -> None:
    """CheckpointError naming the first layout field that differs between a checkpoint and this run."""
    for key, value in expected.items():
        if meta.get(key) != value:
            raise CheckpointError(f"checkpoint was written with {key}={meta.get(key)!r}, this run has {value!r}")


def load_shard(root: Path, rank: int) -> dict[str, Any]:
    """This rank's shard of the latest checkpoint (torch RNG state restored)."""
    path = latest_step_dir(root) / f"rank-{rank:05d}.pt"
    if not path.is_file():
        raise CheckpointError(f"checkpoint shard {path} is missing")
    shard = torch.load(path, weights_only=False)
    torch.set_rng_state(shard["rng_state"])
    return shard
