"""The gang's rank table as a ConfigMap `meshfit-<job>-ranks`, and its strict parser.

The ConfigMap's `ranks.json` key holds one JSON document: the gang, world size, rank order,
parallelism, rendezvous address, the pods (node once bound, null before) and one row per rank
(rank, pod, node, local rank, coords).  Mounted into every pod, it is what `meshfit launch`
waits on: the gang is ready when every pod has a node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

import msgspec

from scheduler.handoff.assignment import ANNOTATION_GANG, DEFAULT_MASTER_PORT, AssignmentError, PodAssignment
from scheduler.placement.jobs import ANNOTATION_RANK_ORDER, AXES, JobSpecError, Parallelism, parse_rank_order
from scheduler.placement.layout import rank_to_coords
from scheduler.placement.result import Placement

RANK_TABLE_KEY = "ranks.json"
"""ConfigMap data key holding the rank table document."""


def configmap_name(job_name: str) -> str:
    """`meshfit-<job>-ranks`, trimmed to a valid DNS-1123 subdomain."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", job_name.lower()).strip("-.") or "job"
    return f"meshfit-{slug[:253 - len('meshfit--ranks')]}-ranks"


def rank_table_document(placement: Placement, master_addr: str, master_port: int = DEFAULT_MASTER_PORT,
                        bound_pods: set[int] | None = None, elastic: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The rank table of a placed gang; pods outside `bound_pods` (None = all bound) have node null.

    An elastic gang's table also carries `elastic`: `{"min_dp", "max_dp", "dp", "generation"}` (the
    generation grows by one at every resize; the table always describes the current size)."""
    gang = placement.gang
    bound = set(range(len(gang.pods))) if bound_pods is None else set(bound_pods)

    def node_of(index: int) -> str | None:
        return placement.pod_nodes[index] if index in bound else None

    document = {
        "gang": gang.key,
        "world_size": gang.world_size,
        "rank_order": placement.rank_order,
        "parallelism": gang.parallelism.as_dict(),
        "master_addr": master_addr,
        "master_port": master_port,
        "pods": [{"index": pod.index, "name": pod.name, "node": node_of(pod.index)} for pod in gang.pods],
        "ranks": [{"rank": r.rank, "pod": gang.pods[r.pod_index].name, "pod_index": r.pod_index,
                   "node": node_of(r.pod_index), "local_rank": r.local_rank, "coords": dict(r.coords)}
                  for r in placement.ranks],
    }
    if elastic is not None:
        document["elastic"] = dict(elastic)
    return document


def rank_table_configmap(placement: Placement, master_addr: str, master_port: int = DEFAULT_MASTER_PORT,
                         bound_pods: set[int] | None = None, elastic: Mapping[str, int] | None = None,
                         owner: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The v1 ConfigMap carrying the gang's rank table (labelled with the gang for lookup).

    `owner` (`apiVersion`, `kind`, `name`, `uid` of the gang's controller, e.g. its Job or PyTorchJob) becomes the
    ConfigMap's ownerReference, so the garbage collector deletes the table with the job (not a controller
    reference, and no blockOwnerDeletion: meshfit needs no permission on the owner)."""
    gang = placement.gang
    document = rank_table_document(placement, master_addr, master_port, bound_pods, elastic)
    metadata: dict[str, Any] = {
        "name": configmap_name(gang.name), "namespace": gang.namespace,
        "labels": {"app.kubernetes.io/managed-by": "meshfit", "meshfit.io/gang-name": gang.name[:63]},
        "annotations": {ANNOTATION_GANG: gang.key, ANNOTATION_RANK_ORDER: placement.rank_order}}
    if owner and all(owner.get(k) for k in ("apiVersion", "kind", "name", "uid")):
        metadata["ownerReferences"] = [{k: owner[k] for k in ("apiVersion", "kind", "name", "uid")}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {RANK_TABLE_KEY: encode_rank_table(document)}}


def encode_rank_table(document: dict[str, Any]) -> str:
    """The `ranks.json` text: indented one space per level (readable in `kubectl get -o yaml`), keys in order.

    msgspec's encoder, not `json.dumps(indent=1)`: with `indent` the standard library falls back to its
    pure-Python encoder, which cost ~1.4 ms for a 64-rank gang on the extender's filter path.  The text
    parses back to the same document (non-ASCII stays UTF-8 instead of `\\u` escapes).
    """
    return msgspec.json.format(msgspec.json.encode(document), indent=1).decode()


@dataclass(frozen=True)
class RankTable:
    """A parsed, validated rank table: pod nodes (None while unbound) and one row per rank."""

    gang: str
    world_size: int
    rank_order: str
    parallelism: Parallelism
    master_addr: str
    master_port: int
    pod_nodes: tuple[str | None, ...]
    rows: tuple[dict[str, Any], ...]
    elastic: Mapping[str, int] | None = None
    """An elastic gang's `{"min_dp", "max_dp", "dp", "generation"}`: the table, not a member's bind-time
    annotations, states the current world size and dp (docs/elastic.md)."""

    @property
    def complete(self) -> bool:
        """True when every pod of the gang is bound to a node."""
        return all(node for node in self.pod_nodes)

    def check_matches(self, assignment: PodAssignment) -> None:
        """Raise AssignmentError if this table and the pod's own assignment disagree."""
        mine = (assignment.gang, assignment.world_size, assignment.rank_order, assignment.master_addr,
                assignment.master_port, assignment.parallelism)
        theirs = (self.gang, self.world_size, self.rank_order, self.master_addr, self.master_port,
                  self.parallelism)
        if self.elastic is not None:  # resized since the pod was bound: only its size may differ
            mine = (*mine[:1], self.world_size, *mine[2:5], replace(assignment.parallelism, dp=self.parallelism.dp))
            if assignment.pod_index >= len(self.pod_nodes):
                raise AssignmentError(f"pod index {assignment.pod_index} is outside elastic gang {self.gang}'s "
                                      f"current {len(self.pod_nodes)} pods")
        names = ("gang", "world size", "rank order", "master address", "master port", "parallelism")
        for name, a, b in zip(names, mine, theirs):
            if a != b:
                raise AssignmentError(f"rank table and pod annotations disagree on {name}: {b} vs {a}")
        if self.elastic is None and len(self.pod_nodes) != assignment.pod_count:
            raise AssignmentError(f"rank table has {len(self.pod_nodes)} pods, the annotations imply "
                                  f"{assignment.pod_count}")


def _require(doc: Mapping[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise AssignmentError(f"rank table: {key!r} missing or not a {kind.__name__}")
    return value


def _check_rows(table: RankTable) -> None:
    order = parse_rank_order(table.rank_order)
    per_pod = table.world_size // max(1, len(table.pod_nodes))
    if len(table.rows) != table.world_size or per_pod * len(table.pod_nodes) != table.world_size:
        raise AssignmentError(f"rank table: {len(table.rows)} rows for world size {table.world_size} "
                              f"over {len(table.pod_nodes)} pods")
    for rank, row in enumerate(table.rows):
        pod_index = rank // per_pod
        expected = {"rank": rank, "pod_index": pod_index, "local_rank": rank % per_pod,
                    "node": table.pod_nodes[pod_index],
                    "coords": rank_to_coords(rank, table.parallelism, order)}
        got = {key: row.get(key) for key in expected}
        if got != expected:
            raise AssignmentError(f"rank table: row {rank} is {got}, expected {expected}")


def _elastic_section(doc: Mapping[str, Any]) -> dict[str, int] | None:
    section = doc.get("elastic")
    if section is None:
        return None
    keys = ("min_dp", "max_dp", "dp", "generation")
    if not isinstance(section, dict) or not all(isinstance(section.get(k), int) and not isinstance(section.get(k), bool)
                                                for k in keys):
        raise AssignmentError(f"rank table: 'elastic' must hold integers {', '.join(keys)}")
    if not 1 <= section["min_dp"] <= section["dp"] <= section["max_dp"]:
        raise AssignmentError(f"rank table: elastic dp {section['dp']} outside {section['min_dp']}..{section['max_dp']}")
    return {k: section[k] for k in keys}


def parse_rank_table(text: str, source: str = "rank table") -> RankTable:
    """Parse and validate a `ranks.json` document; AssignmentError names `source` and the first problem."""
    try:
        return _parse_rank_table(text)
    except AssignmentError as exc:
        message = str(exc)
        raise AssignmentError(source + message.removeprefix("rank table") if message.startswith("rank table")
                              else f"{source}: {message}") from None


def _parse_rank_table(text: str) -> RankTable:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssignmentError(f"rank table: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise AssignmentError("rank table: expected a JSON object")
    degrees = _require(doc, "parallelism", dict)
    try:
        parallelism = Parallelism(**{axis: int(degrees.get(axis, 1)) for axis in AXES})
        parse_rank_order(_require(doc, "rank_order", str))
    except (TypeError, ValueError, JobSpecError) as exc:
        raise AssignmentError(f"rank table: {exc}") from None
    pods = _require(doc, "pods", list)
    if [p.get("index") if isinstance(p, dict) else None for p in pods] != list(range(len(pods))):
        raise AssignmentError("rank table: pods must be listed by index 0..n-1")
    table = RankTable(
        gang=_require(doc, "gang", str), world_size=_require(doc, "world_size", int),
        rank_order=doc["rank_order"], parallelism=parallelism,
        master_addr=_require(doc, "master_addr", str), master_port=_require(doc, "master_port", int),
        pod_nodes=tuple(p.get("node") or None for p in pods),
        rows=tuple(_require(doc, "ranks", list)), elastic=_elastic_section(doc))
    if parallelism.world_size != table.world_size:
        raise AssignmentError(f"rank table: world size {table.world_size} != {parallelism} product")
    _check_rows(table)
    return table
