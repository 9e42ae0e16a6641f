"""`meshfit launch` (pod entrypoint), `meshfit render` (job manifests with node pinning) and `meshfit run` (local runtime)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from scheduler.cli.common import (DocumentFormat, OutputFormat, OutputOption, ToOption, document_text, fail,
                                  write_text_or_stdout)

LAUNCH_HELP = ("Container entrypoint: read the pod's assignment (meshfit.io/* annotations file > rank-table file > "
               "the environment `meshfit render` wrote), wait for the whole gang, "
               "set RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MESHFIT_*/NCCL_* and exec CMD (after --).")


def launch_command(
    command: Optional[list[str]] = typer.Argument(None, help="The command to exec, after `--`."),
    annotations_file: Path = typer.Option(Path("/etc/podinfo/annotations"), "--annotations-file",
                                          help="Downward-API file of the pod's annotations."),
    rank_table: Optional[Path] = typer.Option(None, "--rank-table",
                                              help="Mounted rank-table ConfigMap key (ranks.json) to wait on."),
    grpc_address: Optional[str] = typer.Option(None, "--grpc", help="meshfit gRPC address to wait on (host:port)."),
    wait_timeout: float = typer.Option(300.0, "--wait-timeout", help="Seconds to wait for the gang, then exit 2."),
    local_rank: Optional[int] = typer.Option(None, "--local-rank",
                                             help="Exec one rank directly: the pod's K-th rank (default: "
                                                  "the pod's first rank, torchrun style)."),
    node_labels: Optional[Path] = typer.Option(None, "--node-labels",
                                               help="Node labels (JSON object or key=\"value\" lines) for NCCL settings."),
    fabric_config: Optional[Path] = typer.Option(None, "--fabric-config",
                                                 help="YAML mapping node labels to NCCL settings."),
    print_env: bool = typer.Option(False, "--print-env", help="Print the computed variables instead of exec."),
    output: OutputFormat = OutputOption,
) -> None:
    """Container entrypoint: set the rank environment from the pod's assignment and exec CMD."""
    from scheduler.handoff.fabric import FabricConfigError, load_fabric_config
    from scheduler.handoff.assignment import AssignmentError
    from scheduler.handoff.fabric import transport_env
    from scheduler.handoff.launch import exec_command, rank_environment, read_assignment, read_labels_file, wait_for_gang

    if not command and not print_env:
        fail("no command given: use `meshfit launch [options] -- CMD ...`")
    try:
        labels = read_labels_file(node_labels) if node_labels else None
        fabric = load_fabric_config(fabric_config) if fabric_config else None
        assignment, _ = read_assignment(annotations_file, rank_table)
        transport = transport_env(labels or {}, fabric) if labels is not None or fabric is not None else {}
        env = rank_environment(assignment, local_rank or 0, transport)
        wait_for_gang(assignment, rank_table, grpc_address, wait_timeout)
    except OSError as exc:
        fail(f"cannot read {exc.filename}: {exc.strerror}")
    except (AssignmentError, FabricConfigError, ValueError) as exc:
        fail(f"meshfit launch: {exc}")
    if print_env:
        _print_env(env, output)
        return
    try:
        exec_command(list(command or []), env)
    except OSError as exc:
        fail(f"cannot exec {command[0]!r}: {exc.strerror}", code=127)


def _print_env(env: dict[str, str], output: OutputFormat) -> None:
    from scheduler.cli.common import print_document

    if output != OutputFormat.table:
        print_document(env, output)
    else:
        import shlex

        for key in sorted(env):  # shell-quoted where needed: `set -a; . FILE` reads it back exactly
            print(f"{key}={shlex.quote(env[key])}")


def starting_line(placement) -> str:
    """The line printed before the worker processes start (loading torch in every rank takes seconds)."""
    gang = placement.gang
    return (f"starting {gang.world_size} worker processes for {gang.key} (one per rank, torch.distributed gloo over "
            f"loopback, each in the environment `meshfit launch` gives its pod); loading torch in each takes a few "
            f"seconds before the first step")


def run_with_progress(placement, options, show_progress: bool):
    """Run the placed job locally, with a rich progress bar of steps and loss on stderr when asked; a line on
    stderr says the workers are starting first, so the seconds before the first step are not silent."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from plugins.handoffs.local import run_local
    from scheduler.cli.common import err_console

    err_console.print(starting_line(placement), highlight=False, soft_wrap=True)
    if not show_progress:
        return run_local(placement, options)
    columns = (TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=False) as progress:
        task = progress.add_task("train", total=options.steps, loss="-")
        progress.update(task, completed=0)

        def on_step(step: int, loss: float) -> None:
            progress.update(task, completed=step, loss=f"{loss:.4f}")

        return run_local(placement, options, on_step)


def _runtime_errors() -> tuple[type[BaseException], ...]:
    from plugins.handoffs.local import LocalRunError
    from plugins.handoffs.local_runtime import RuntimeUnavailable

    return LocalRunError, RuntimeUnavailable


def _import_runtime() -> None:
    try:
        from plugins.handoffs.local_runtime import require_torch
        require_torch()
    except ImportError as exc:
        fail(f"the local runtime is unavailable: {exc}")
    except RuntimeError as exc:
        fail(str(exc))


def print_run_summary(result, output: OutputFormat) -> None:
    """The run summary: DESIGN JSON, or the loss curve and a table of every rank's pod, node and groups."""
    from rich.table import Table

    from scheduler.cli.common import console, names_column, print_document, print_table

    if output != OutputFormat.table:
        print_document(result.to_json(), output)
        return
    losses = result.losses
    if losses:
        console.print(f"{result.status}: steps {result.start_step + 1}-{result.steps}, loss {losses[0]:.4f} -> "
                      f"{losses[-1]:.4f} (min {min(losses):.4f})")
    else:
        console.print(f"{result.status}: nothing to run (already at step {result.steps})")
    table = Table("rank", "pod", title="ranks as the worker processes saw them")
    names_column(table, "node", [entry["node"] for entry in result.ranks])
    for axis in ("tp", "pp", "dp"):
        table.add_column(f"{axis} group", no_wrap=True)
    for entry in result.ranks:
        table.add_row(str(entry["rank"]), str(entry["pod_index"]), entry["node"],
                      *(" ".join(map(str, entry["groups"][axis])) for axis in ("tp", "pp", "dp")))
    print_table(table)
    if result.checkpoint:
        console.print(f"checkpoint: {result.checkpoint}")


def _place_trainable(job: Path, cluster: Path, policy: str, seed: int):
    """The job placed, after checking the local runtime can train its layout (exit 2 before any progress bar
    when it cannot, e.g. cp or ep > 1; exit 3 when it does not fit)."""
    from plugins.handoffs.local_runtime import RuntimeUnavailable
    from plugins.handoffs.local_runtime.model import ModelConfig
    from scheduler.cli.common import EXIT_UNSCHEDULABLE
    from scheduler.cli.place_cmd import _load_cluster
    from scheduler.handoff.manifests import in_file, load_job
    from scheduler.placement.engine import place
    from scheduler.placement.jobs import JobSpecError
    from scheduler.placement.level_check import check_levels

    try:
        gang = load_job(job)
        ModelConfig.for_parallelism(gang.parallelism, seed)
        topo = _load_cluster(cluster, None)
        try:
            gang, level_warnings = check_levels(gang, topo)
        except JobSpecError as exc:
            raise JobSpecError(in_file(job, str(exc))) from None
        for warning in level_warnings:
            print(f"warning: {in_file(job, warning)}", file=sys.stderr)
        placement = place(gang, topo, policy)
    except (JobSpecError, ValueError, RuntimeUnavailable) as exc:
        fail(f"{exc} (meshfit place lays out and prices any layout)" if isinstance(exc, RuntimeUnavailable)
             else str(exc))
    if not placement.placed:
        fail(f"{placement.gang.key} unschedulable by {placement.policy}: {placement.reason}", EXIT_UNSCHEDULABLE)
    return placement


def run_command(
    cluster: Path = typer.Option(..., "--cluster", help="NodeList or List (Nodes + Pods) file."),
    job: Path = typer.Option(..., "--job", help="Job manifest with meshfit.io/* annotations."),
    policy: str = typer.Option("meshfit", "--policy", help="Placement policy."),
    steps: int = typer.Option(20, "--steps", min=1, help="Train until this many steps in total."),
    checkpoint_dir: Optional[Path] = typer.Option(None, "--checkpoint-dir", help="Directory for checkpoints."),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", min=0, help="Checkpoint every N steps (0: end only)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the checkpoint `latest` points to."),
    seed: int = typer.Option(0, "--seed", help="Seed of the example model's weights and data."),
    output: OutputFormat = OutputOption,
) -> None:
    """Place the job, then train the example model on this machine with one process per rank (gloo)."""
    _import_runtime()  # first: without torch, one line naming the extra, before any module that imports it
    from plugins.handoffs.local_runtime.checkpoint import CheckpointError, latest_step_dir
    from plugins.handoffs.local_runtime.worker import TrainOptions

    if resume:
        if checkpoint_dir is None:
            fail("--resume needs --checkpoint-dir")
        try:
            latest_step_dir(checkpoint_dir)
        except CheckpointError as exc:
            fail(str(exc))
    placement = _place_trainable(job, cluster, policy, seed)
    options = TrainOptions(steps=steps, checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None,
                           checkpoint_every=checkpoint_every, resume=resume, seed=seed)
    try:
        result = run_with_progress(placement, options, output == OutputFormat.table)
    except _runtime_errors() as exc:
        fail(str(exc), code=1)
    print_run_summary(result, output)


def render_command(
    job: Path = typer.Option(..., "--job", help="PyTorchJob, JobSet or TrainJob manifest."),
    placement: Path = typer.Option(..., "--placement", help="`meshfit place -o json` output for that job."),
    output: DocumentFormat = typer.Option(DocumentFormat.yaml, "-o", "--output",
                                          help="yaml (a multi-document stream) or json (a kubectl List)."),
    to: Optional[Path] = ToOption,
) -> None:
    """Render the job for clusters without the extender: default scheduler, pods pinned to their placed nodes
    (exactly where the kind allows; a warning names what is not), /dev/shm and the rank environment."""
    import yaml

    from plugins.handoffs.render import render_with_warnings
    from scheduler.placement.jobs import JobSpecError

    try:
        objects, warnings = render_with_warnings(job, placement)
    except (JobSpecError, ValueError, KeyError, TypeError) as exc:
        fail(f"meshfit render: {exc}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if output == DocumentFormat.json:
        text = document_text({"apiVersion": "v1", "kind": "List", "items": objects}, output)
    else:
        text = yaml.safe_dump_all(objects, sort_keys=False)
    write_text_or_stdout(text, to)


def register(app: typer.Typer) -> None:
    """Add `launch`, `render` and `run` to the meshfit app."""
    app.command("launch", help=LAUNCH_HELP,
                context_settings={"allow_interspersed_args": False})(launch_command)
    app.command("run")(run_command)
    app.command("render")(render_command)
