"""`meshfit render`: rebuild a Placement from a `meshfit place -o json` file and render the job for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from plugins.handoffs import handoff_for_manifest
from scheduler.engine import build_ranks
from scheduler.jobs import AXES, JobSpecError, parse_rank_order
from scheduler.manifests import gang_from_manifest
from scheduler.placement import PLACED, Placement


def read_single_manifest(path: str | Path) -> dict[str, Any]:
    """The one job manifest in a YAML/JSON file; JobSpecError with one line otherwise."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except OSError as exc:
        raise JobSpecError(f"cannot read job file {path}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise JobSpecError(f"{path}: not valid YAML/JSON") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise JobSpecError(f"{path}: expected exactly one job manifest, found {len(docs)} documents")
    return docs[0]


def placement_from_json(manifest: dict[str, Any], document: Any) -> Placement:
    """The Placement a `meshfit place -o json` document describes for this manifest's gang (checked to match)."""
    gang = gang_from_manifest(manifest)
    if not isinstance(document, dict):
        raise JobSpecError("placement file: expected the JSON object `meshfit place -o json` prints")
    if document.get("status") != PLACED:
        raise JobSpecError(f"placement file: job {document.get('job')} is {document.get('status')!r}, not placed")
    if document.get("job") != gang.key:
        raise JobSpecError(f"placement file is for job {document.get('job')!r}, the manifest is {gang.key!r}")
    if document.get("parallelism") != {axis: gang.parallelism.degree(axis) for axis in AXES}:
        raise JobSpecError(f"placement file parallelism {document.get('parallelism')} != manifest {gang.parallelism}")
    pods = document.get("pods")
    if not isinstance(pods, list) or sorted(p.get("index", -1) for p in pods) != list(range(len(gang.pods))):
        raise JobSpecError(f"placement file must list pods 0..{len(gang.pods) - 1}")
    nodes = [p["node"] for p in sorted(pods, key=lambda p: p["index"])]
    if not all(isinstance(node, str) and node for node in nodes):
        raise JobSpecError("placement file: every pod needs a node name")
    order = document.get("rank_order") or gang.rank_order
    parse_rank_order(order)
    return Placement(gang, PLACED, str(document.get("policy", "")), order, None, nodes,
                     build_ranks(gang, nodes, order))


def render_files(job_path: str | Path, placement_path: str | Path) -> list[dict[str, Any]]:
    """Render the job file for the placement file; JobSpecError / ValueError with one line on bad input."""
    manifest = read_single_manifest(job_path)
    try:
        document = json.loads(Path(placement_path).read_text())
    except OSError as exc:
        raise JobSpecError(f"cannot read placement file {placement_path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise JobSpecError(f"placement file {placement_path}: not JSON ({exc.msg})") from None
    placement = placement_from_json(manifest, document)
    return handoff_for_manifest(manifest).render(manifest, placement)
