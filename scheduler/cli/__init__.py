"""The `meshfit` command line: one typer app; each command group lives in its own module.

Command modules register themselves on import (`register(app)`); a module listed here that is
not installed is skipped, so a slim install still gets the commands it has.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="meshfit",
    help="Topology-aware gang scheduler for distributed training on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "scheduler.cli.cluster_cmd",    # meshfit cluster generate
    "scheduler.cli.topology_cmd",   # meshfit topology show|export
    "scheduler.cli.place_cmd",      # meshfit place
    "scheduler.cli.serve_cmd",      # meshfit serve
    "scheduler.cli.gangs_cmd",      # meshfit gangs
    "scheduler.cli.submit_cmd",     # meshfit submit (kube-scheduler's calls against an embedded serve)
    "scheduler.cli.runtime_cmd",    # meshfit run | launch | render
    "scheduler.cli.demo_cmd",       # meshfit demo
    "scheduler.cli.simulate_cmd",   # meshfit simulate | plan
)


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(app)




def _version_callback(value: bool) -> None:
    if value:
        from scheduler.cli.common import version_text

        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the meshfit version and exit.",
                                 callback=_version_callback, is_eager=True),
) -> None:
    """Topology-aware gang scheduler for distributed training on Kubernetes."""


_register_all()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors (unknown command or option, a value of the wrong type)
    are one line on stderr and exit 2, like every other bad input."""
    import sys

    try:  # typer >= 0.16 vendors click as typer._click; older ones use click itself
        from typer._click import exceptions as click_exceptions
    except ImportError:
        from click import exceptions as click_exceptions

    try:
        code = app(args=argv, standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as exc:
        print(exc.format_message())
        sys.exit(0)
    except click_exceptions.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "meshfit"
        print(f"error: {' '.join(exc.format_message().split())}; see '{where} --help'", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
