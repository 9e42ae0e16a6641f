"""`meshfit render`: rebuild a Placement from a `meshfit place -o json` file and render the job for it.

The rendered job runs under the default scheduler (no extender): every pod the kind lets us pin on
its own is pinned to its exact node (JobSet: one single-pod replicated job per pod; PyTorchJob Master
and single-replica types).  What cannot be pinned exactly is named in `pinning_warnings`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plugins.handoffs import handoff_for_manifest
from scheduler.placement.engine import build_ranks
from scheduler.placement.jobs import AXES, JobSpecError, parse_rank_order
from scheduler.handoff.manifests import gang_from_manifest, read_manifest
from scheduler.placement.result import PLACED, Placement
from topology.textfile import read_text


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


def pinning_warnings(manifest: dict[str, Any], placement: Placement) -> list[str]:
    """One sentence per group of pods the kind does not let `render` pin each to its own node."""
    kind, nodes = manifest.get("kind"), list(placement.pod_nodes)
    warnings: list[str] = []
    if kind == "PyTorchJob":
        first = 0
        for role, spec in (manifest["spec"].get("pytorchReplicaSpecs") or {}).items():
            replicas = int(spec.get("replicas", 1))
            group = nodes[first:first + replicas]
            if replicas > 1 and len(set(group)) > 1:
                warnings.append(
                    f"PyTorchJob {role} replicas share one pod template: pods {first}-{first + replicas - 1} are "
                    f"pinned to their {len(set(group))} nodes as a set, not each to its own node, so the operator "
                    f"may swap them and ranks may not follow the placed layout; render a JobSet, or run the "
                    f"meshfit extender, for exact per-pod pinning")
            first += replicas
    elif kind == "TrainJob" and len(set(nodes)) > 1:
        warnings.append(
            f"TrainJob podSpecOverrides apply to every trainer pod and have no node affinity: the {len(nodes)} "
            f"pods over {len(set(nodes))} nodes are not pinned (the chosen nodes are only recorded in the "
            f"meshfit.io/pod-nodes annotation); render a JobSet, or run the meshfit extender, for exact pinning")
    return warnings


def render_with_warnings(job_path: str | Path, placement_path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The rendered objects and the pinning warnings (see `pinning_warnings`)."""
    manifest, placement = _inputs(job_path, placement_path)
    return handoff_for_manifest(manifest).render(manifest, placement), pinning_warnings(manifest, placement)


def render_files(job_path: str | Path, placement_path: str | Path) -> list[dict[str, Any]]:
    """Render the job file for the placement file; JobSpecError / ValueError with one line on bad input."""
    manifest, placement = _inputs(job_path, placement_path)
    return handoff_for_manifest(manifest).render(manifest, placement)


def _inputs(job_path: str | Path, placement_path: str | Path) -> tuple[dict[str, Any], Placement]:
    manifest = read_manifest(job_path)
    text = read_text(placement_path, "placement file", JobSpecError)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobSpecError(f"placement file {placement_path}: not JSON ({exc.msg})") from None
    return manifest, placement_from_json(manifest, document)
