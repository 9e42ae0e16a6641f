"""`meshfit launch`: the container entrypoint that turns a pod's rank assignment into a process environment.

Inside a pod bound by meshfit, the downward API mounts the pod's annotations as a file of
`key="value"` lines (values Go-quoted, as kubelet writes them).  The launcher parses the
`meshfit.io/*` assignment (a pod rendered by `meshfit render` has none: then the mounted rank
table or the environment the renderer wrote is used, in that order; `read_assignment`), waits
until the whole gang is bound (rank-table ConfigMap file or the
gRPC `meshfit.v1.Placement/GetReservation`), computes the environment and `exec`s the command.

Environment (`rank_environment`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, NODE_RANK (= pod index), MESHFIT_RANK_ORDER, MESHFIT_{TP,CP,EP,PP,DP}_{RANK,SIZE}
and transport settings (NCCL_*) from the node's labels.  Two ways to start the processes:

* torchrun (one process per GPU): `meshfit launch -- torchrun train.py`.  The launcher also sets
  torchrun's own defaults PET_NNODES, PET_NODE_RANK (= pod index), PET_NPROC_PER_NODE,
  PET_MASTER_ADDR, PET_MASTER_PORT and PET_RDZV_BACKEND=static, so torchrun's global rank
  node_rank * nproc_per_node + local_rank is exactly the placement's rank.  (A c10d rendezvous
  would hand out node ranks in arrival order and lose the layout.)  torchrun then overrides
  RANK/LOCAL_RANK per worker; recompute per-axis coordinates from RANK with
  `scheduler.placement.result.layout.rank_to_coords` (MESHFIT_*_RANK describe the pod's first rank).
* direct exec of one rank: `meshfit launch --local-rank K -- python train.py` sets RANK to the
  pod's K-th rank and the MESHFIT_*_RANK of that rank.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Mapping

from scheduler.handoff.fabric import FabricConfig, transport_env
from scheduler.handoff.assignment import AssignmentError, PodAssignment
from scheduler.placement.jobs import AXES
from scheduler.handoff.rank_table import RankTable, parse_rank_table
from topology.textfile import decode_text, read_text

DEFAULT_ANNOTATIONS_FILE = "/etc/podinfo/annotations"
DEFAULT_WAIT_TIMEOUT = 300.0

_LINE = re.compile(r'^([^=\s][^=]*)=(".*")\s*$')
_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}


def _go_unquote(quoted: str) -> str:
    """Decode one Go `%q` string literal (strconv.Quote) into text."""
    body = quoted[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char == '"':
            raise AssignmentError(f"unescaped quote in {quoted!r}")
        if char != "\\":
            out += char.encode()
            i += 1
            continue
        code = body[i + 1:i + 2]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = body[i + 2:i + 2 + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise AssignmentError(f"bad \\{code} escape in {quoted!r}")
            value = int(digits, 16)
            out += bytes([value]) if code == "x" else chr(value).encode()
            i += 2 + width
        else:
            raise AssignmentError(f"unknown escape \\{code} in {quoted!r}")
    return out.decode("utf-8", errors="replace")


def parse_downward_annotations(text: str, source: str = "annotations file") -> dict[str, str]:
    """Parse a downward-API annotations file (`key="value"` lines, Go-quoted values); `source` names it in errors."""
    annotations: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise AssignmentError(f"{source} line {number}: expected key=\"value\", got {line[:80]!r}")
        annotations[match.group(1).strip()] = _go_unquote(match.group(2))
    return annotations


def read_labels_file(path: str | Path) -> dict[str, str]:
    """Node labels from a JSON object file or a downward-API style `key="value"` file."""
    text = read_text(path, "node labels file", AssignmentError)
    if text.lstrip().startswith("{"):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AssignmentError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(labels, dict):
            raise AssignmentError(f"{path}: expected a JSON object of labels")
        return {str(k): str(v) for k, v in labels.items()}
    return parse_downward_annotations(text, str(path))


def rank_environment(assignment: PodAssignment, local_rank: int = 0,
                     transport: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the process holding the pod's `local_rank`-th rank (see module docstring)."""
    if not 0 <= local_rank < assignment.local_world_size:
        raise AssignmentError(f"local rank {local_rank} out of range: the pod holds "
                              f"{assignment.local_world_size} ranks")
    rank = assignment.ranks[local_rank]
    coords = assignment.coords[local_rank]
    env = {
        "RANK": str(rank), "WORLD_SIZE": str(assignment.world_size),
        "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(assignment.local_world_size),
        "NODE_RANK": str(assignment.pod_index), "GROUP_RANK": str(assignment.pod_index),
        "MASTER_ADDR": assignment.master_addr, "MASTER_PORT": str(assignment.master_port),
        "PET_NNODES": str(assignment.pod_count), "PET_NODE_RANK": str(assignment.pod_index),
        "PET_NPROC_PER_NODE": str(assignment.local_world_size), "PET_MASTER_ADDR": assignment.master_addr,
        "PET_MASTER_PORT": str(assignment.master_port), "PET_RDZV_BACKEND": "static",
        "MESHFIT_GANG": assignment.gang, "MESHFIT_POD_INDEX": str(assignment.pod_index),
        "MESHFIT_RANK_ORDER": assignment.rank_order, "MESHFIT_PARALLELISM": str(assignment.parallelism),
    }
    for axis in AXES:
        env[f"MESHFIT_{axis.upper()}_RANK"] = str(coords[axis])
        env[f"MESHFIT_{axis.upper()}_SIZE"] = str(assignment.parallelism.degree(axis))
    env.update(transport or {})
    return env


def _rank_table_progress(path: Path, assignment: PodAssignment) -> tuple[RankTable | None, str]:
    if not path.exists():
        return None, f"rank table {path} not present yet"
    table = parse_rank_table(read_text(path, "rank table", AssignmentError), str(path))
    table.check_matches(assignment)
    bound = sum(1 for node in table.pod_nodes if node)
    return (table if table.complete else None), f"{bound} of {len(table.pod_nodes)} pods bound"


def _grpc_progress(address: str, assignment: PodAssignment) -> tuple[bool, str]:
    import grpc

    from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2 as pb
    from scheduler.service.verbs.proto.meshfit.v1 import placement_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.PlacementStub(channel)
        try:
            reply = stub.GetReservation(pb.GetReservationRequest(gang=assignment.gang), timeout=5)
        except grpc.RpcError as exc:
            return False, f"gRPC {address}: {exc.code().name}"
    bound = len(reply.pods)
    if reply.status == "bound" and bound != assignment.pod_count:
        raise AssignmentError(f"gRPC reservation of {assignment.gang} has {bound} pods, "
                              f"the annotations imply {assignment.pod_count}")
    return reply.status == "bound", f"reservation {reply.status}: {bound} of {assignment.pod_count} pods"


def wait_for_gang(assignment: PodAssignment, rank_table: str | Path | None = None, grpc_address: str | None = None,
                  timeout: float = DEFAULT_WAIT_TIMEOUT, poll: float = 1.0,
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Block until every pod of the gang is bound; AssignmentError on inconsistency or after `timeout`."""
    if rank_table is None and grpc_address is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        ready, progress = True, ""
        if rank_table is not None:
            table, progress = _rank_table_progress(Path(rank_table), assignment)
            ready = table is not None
        if ready and grpc_address is not None:
            ready, progress = _grpc_progress(grpc_address, assignment)
        if ready:
            return
        if time.monotonic() + poll > deadline:
            raise AssignmentError(f"gang {assignment.gang} not complete after {timeout:g}s ({progress})")
        sleep(poll)


def launch_environment(annotations_text: str, local_rank: int | None = None, node_labels: Mapping[str, str] | None = None,
                       fabric: FabricConfig | None = None) -> tuple[PodAssignment, dict[str, str]]:
    """Parse the annotations file text and compute the variables `meshfit launch` adds to the environment."""
    from scheduler.handoff.assignment import parse_assignment

    assignment = parse_assignment(parse_downward_annotations(annotations_text))
    transport = transport_env(node_labels or {}, fabric) if node_labels is not None or fabric is not None else {}
    return assignment, rank_environment(assignment, local_rank or 0, transport)


def read_assignment(annotations_file: str | Path, rank_table: str | Path | None = None,
                    env: Mapping[str, str] | None = None) -> tuple[PodAssignment, str]:
    """The pod's assignment and its source: annotations file > rank-table file > environment (strict).

    A missing annotations file, or one without bind-time `meshfit.io/*` annotations, falls through
    (pods rendered by `meshfit render`); see `scheduler.handoff.assignment.assignment_sources` for each source.
    """
    from scheduler.handoff.assignment_sources import resolve_assignment

    env = os.environ if env is None else env
    annotations, problem = None, ""
    try:
        data = Path(annotations_file).read_bytes()
    except FileNotFoundError as exc:
        problem = f"cannot read {annotations_file}: {exc.strerror}"
    else:
        annotations = parse_downward_annotations(decode_text(data, str(annotations_file), AssignmentError),
                                                 f"annotations file {annotations_file}")
    table = None
    if rank_table is not None and Path(rank_table).exists():
        table = parse_rank_table(read_text(rank_table, "rank table", AssignmentError), f"rank table {rank_table}")
    return resolve_assignment(annotations, table, env, problem)


def exec_command(command: list[str], env_updates: Mapping[str, str]) -> None:
    """Replace this process with `command` under the current environment plus `env_updates`."""
    env = {**os.environ, **env_updates}
    os.execvpe(command[0], command, env)
