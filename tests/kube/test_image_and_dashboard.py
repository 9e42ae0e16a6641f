"""The image (Dockerfile, .dockerignore), the LICENSE and the Grafana dashboard, checked as files: split out of
`tests/kube/test_manifests.py`, whose objects and helpers they use."""

from __future__ import annotations

import json
import re

import pytest

from tests.kube.test_manifests import REPO, find, meshfit_pod_spec

# ----- Dockerfile, .dockerignore, LICENSE ---------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, args = line.partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per build stage (the first list holds the global ARGs)."""
    stages: list[list[tuple[str, str]]] = [[]]
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            stages.append([])
        stages[-1].append(instruction)
    return stages


def test_dockerfile_is_multi_stage_slim_non_root_and_without_torch():
    known = {"FROM", "ARG", "ENV", "RUN", "COPY", "WORKDIR", "USER", "LABEL", "EXPOSE", "ENTRYPOINT", "CMD"}
    instructions = dockerfile_instructions()
    assert {i for i, _ in instructions} <= known
    global_args, builder, final = dockerfile_stages()
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in global_args
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder") and final[0] == ("FROM", "${PYTHON_IMAGE}")
    final_args = dict(final)
    assert any(i == "COPY" and a.startswith("--from=builder /opt/meshfit /opt/meshfit") for i, a in final)
    assert not any(i == "RUN" and "pip" in a for i, a in final)  # nothing installed in the final stage
    users = [a for i, a in final if i == "USER"]
    assert users == ["65532:65532"]
    assert [i for i, _ in final].index("USER") > max(n for n, (i, _) in enumerate(final) if i in ("RUN", "COPY"))
    env = " ".join(a for i, a in final if i == "ENV")
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp", "MPLCONFIGDIR=/tmp/"):
        assert setting in env
    assert json.loads(final_args["ENTRYPOINT"]) == ["meshfit", "serve"]
    build = " ".join(a for i, a in builder if i == "RUN")
    assert "compileall" in build  # bytecode at build time: nothing to write on a read-only root
    assert '! /opt/meshfit/bin/python -c "import torch"' in build
    assert "[runtime]" not in (REPO / "Dockerfile").read_text()
    (container,) = meshfit_pod_spec()["containers"]
    ports = {str(port["containerPort"]) for port in container["ports"]}
    assert set(final_args["EXPOSE"].split()) == ports == {"8888", "8889", "9090"}  # extender, metrics, gRPC


def cli_accepts(argv: list[str]) -> None:
    """Parse `meshfit <argv>` with the real CLI (no command is run); raises click's error if rejected."""
    import typer  # noqa: PLC0415

    from scheduler.cli import app  # noqa: PLC0415

    group = typer.main.get_command(app)
    command = group.commands[argv[0]]
    command.make_context(argv[0], list(argv[1:]))


def test_image_entrypoint_and_deployment_args_are_a_valid_command():
    final = dict(dockerfile_stages()[-1])
    entrypoint, default_args = json.loads(final["ENTRYPOINT"]), json.loads(final["CMD"])
    (container,) = meshfit_pod_spec()["containers"]
    assert "command" not in container  # the image's entrypoint is used as is
    for args in (default_args, container["args"]):
        assert "--kubeconfig" not in args and "--cluster" not in args  # in-cluster credentials
        cli_accepts(entrypoint[1:] + args)
    with pytest.raises(Exception, match="unexpected extra argument"):
        cli_accepts(entrypoint[1:] + ["serve", *container["args"]])  # `serve` twice would be rejected


def test_dockerignore_keeps_the_build_context_to_the_packages():
    lines = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert lines[0] == "*"
    copied = {a.split()[0] for i, a in dockerfile_stages()[1] if i == "COPY"} | {"LICENSE"}
    copied = {c for a in copied for c in a.split()} - {"./"}
    for path in copied:
        assert f"!{path.rstrip('/')}/" in lines or f"!{path}" in lines, path
    for package in ("topology", "scheduler", "plugins", "simulations"):
        assert f"!{package}/" in lines and (REPO / package / "__init__.py").exists()


def test_license_is_apache_2():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()


# ----- Grafana dashboard ----------------------------------------------------------------------------------
def dashboard() -> dict:
    """The dashboard JSON from its ConfigMap."""
    configmap = find("ConfigMap", "meshfit-grafana-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (key,) = configmap["data"]
    assert key.endswith(".json")
    return json.loads(configmap["data"][key])


def exported_metric_families() -> set[str]:
    """Every metric family the service's app exports (as `meshfit serve` builds it), GC pauses included."""
    from scheduler.service.app import build_scheduler  # noqa: PLC0415
    from scheduler.service.binding.binder_memory import MemoryBinder  # noqa: PLC0415
    from scheduler.service.lifecycle.failures import FailureOptions  # noqa: PLC0415
    from scheduler.cache.state import ClusterState  # noqa: PLC0415

    _, metrics = build_scheduler(ClusterState(), MemoryBinder(), "first-fit", failures=FailureOptions())
    stop = metrics.track_gc_pauses()
    try:
        return {family.name for family in metrics.registry.collect()}
    finally:
        stop()


def test_grafana_dashboard_shows_every_exported_metric():
    board = dashboard()
    assert board["uid"] == "meshfit" and board["panels"]
    expressions = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {m for e in expressions for m in re.findall(r"\b((?:meshfit|process)_[a-z0-9_]+)", e)}
    families = exported_metric_families()
    assert {"meshfit_request_seconds", "meshfit_gangs", "meshfit_gpus_free", "meshfit_gpus_free_largest_domain",
            "meshfit_reservation_expiries", "meshfit_gang_placements", "meshfit_step_time_ratio",
            "meshfit_rank_table_publish_failures", "meshfit_gc_pause_seconds", "meshfit_scrape_errors"} <= families
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= families  # the standard process collector
    standard = {"process_virtual_memory_bytes", "process_start_time_seconds", "process_open_fds", "process_max_fds"}
    missing = {f for f in families - standard if not any(f + s in used for s in suffixes)}
    assert not missing, f"metrics with no dashboard panel: {sorted(missing)}"
    unknown = {m for m in used if not any(m == f + s for f in families for s in suffixes)}
    assert not unknown, f"dashboard queries metrics the service does not export: {sorted(unknown)}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "job"}
