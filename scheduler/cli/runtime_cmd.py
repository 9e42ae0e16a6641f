"""`meshfit launch` (pod entrypoint), `meshfit render` (job manifests with node pinning) and `meshfit run` (local runtime)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from scheduler.cli.common import OutputFormat, OutputOption, fail

LAUNCH_HELP = ("Container entrypoint: read the pod's meshfit.io/* assignment, wait for the whole gang, "
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
    from scheduler.fabric import FabricConfigError, load_fabric_config
    from scheduler.handoff import AssignmentError
    from scheduler.launch import exec_command, launch_environment, read_labels_file, wait_for_gang

    if not command and not print_env:
        fail("no command given: use `meshfit launch [options] -- CMD ...`")
    try:
        text = annotations_file.read_text()
        labels = read_labels_file(node_labels) if node_labels else None
        fabric = load_fabric_config(fabric_config) if fabric_config else None
        assignment, env = launch_environment(text, local_rank, labels, fabric)
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
    from scheduler.cli.common import print_json

    if output == OutputFormat.json:
        print_json(env)
    else:
        for key in sorted(env):
            print(f"{key}={env[key]}")


def register(app: typer.Typer) -> None:
    """Add `launch`, `render` and `run` to the meshfit app."""
    app.command("launch", help=LAUNCH_HELP,
                context_settings={"allow_interspersed_args": False})(launch_command)
