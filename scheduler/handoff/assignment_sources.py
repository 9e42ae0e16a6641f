"""Where `meshfit launch` learns its rank assignment: annotations file > rank-table file > environment.

1. The downward-API annotations file, when it carries any annotation only a meshfit bind writes
   (`scheduler.handoff.assignment.assignment.BIND_ONLY_ANNOTATIONS`); then it must parse strictly.  A file without them
   (a pod rendered by `meshfit render`, which inherits only the job's `meshfit.io/parallelism`
   and friends from its template) passes to the next source.
2. The mounted rank table (`ranks.json`), when it lists this pod: by the pod index in the
   environment (see 3) or by the pod's name (`POD_NAME`, else `HOSTNAME`).
3. The environment `meshfit render` writes into the pod template: MESHFIT_GANG,
   MESHFIT_PARALLELISM, MESHFIT_RANK_ORDER, MASTER_ADDR, MASTER_PORT, LOCAL_WORLD_SIZE (or
   PET_NPROC_PER_NODE) and the pod index: MESHFIT_POD_INDEX (pinned per pod), else PET_NODE_RANK
   (the node rank the job's operator sets when one template serves several pods).  With
   MESHFIT_POD_INDEX every per-pod variable meshfit rendered (RANK, WORLD_SIZE, NODE_RANK,
   MESHFIT_*_RANK, MESHFIT_*_SIZE, PET_NNODES) must agree with the assignment computed from it.

Every source yields a validated `PodAssignment`; any disagreement is an `AssignmentError`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from scheduler.handoff.assignment import BIND_ONLY_ANNOTATIONS, AssignmentError, PodAssignment, parse_assignment
from scheduler.placement.jobs import AXES, JobSpecError, Parallelism, parse_rank_order
from scheduler.placement.layout import rank_to_coords
from scheduler.handoff.rank_table import RankTable

ENV_REQUIRED = ("MESHFIT_GANG", "MESHFIT_PARALLELISM", "MESHFIT_RANK_ORDER", "MASTER_ADDR", "MASTER_PORT")
"""Variables the environment source cannot do without (besides a local world size and a pod index)."""


def has_bound_assignment(annotations: Mapping[str, str]) -> bool:
    """True when the annotations hold (part of) an assignment written at bind time."""
    return any(key in annotations for key in BIND_ONLY_ANNOTATIONS)


def _env_int(env: Mapping[str, str], key: str) -> int:
    text = env[key].strip()
    try:
        return int(text)
    except ValueError:
        raise AssignmentError(f"environment {key}: expected an integer, got {text!r}") from None


def _first_int(env: Mapping[str, str], keys: tuple[str, ...], what: str) -> tuple[int, str]:
    for key in keys:
        if env.get(key, "").strip():
            return _env_int(env, key), key
    raise AssignmentError(f"environment: no {what} (set {' or '.join(keys)})")


def build_assignment(gang: str, pod_index: int, per_pod: int, parallelism: Parallelism, rank_order: str,
                     master_addr: str, master_port: int) -> PodAssignment:
    """The validated assignment of pod `pod_index` holding `per_pod` consecutive ranks."""
    if per_pod < 1:
        raise AssignmentError(f"a pod must hold at least one rank, got {per_pod}")
    try:
        order = parse_rank_order(rank_order)
    except JobSpecError as exc:
        raise AssignmentError(str(exc)) from None
    ranks = tuple(range(pod_index * per_pod, (pod_index + 1) * per_pod))
    if pod_index < 0 or ranks[-1] >= parallelism.world_size:
        raise AssignmentError(f"pod index {pod_index} with {per_pod} ranks is outside world size "
                              f"{parallelism.world_size}")
    assignment = PodAssignment(
        gang=gang, pod_index=pod_index, ranks=ranks,
        coords=tuple(rank_to_coords(rank, parallelism, order) for rank in ranks), rank_order=rank_order,
        world_size=parallelism.world_size, master_addr=master_addr, master_port=master_port, parallelism=parallelism)
    assignment.validate()
    return assignment


def _check_rendered(env: Mapping[str, str], assignment: PodAssignment, exact: bool) -> None:
    """Every meshfit-rendered variable present must agree (per-pod ones only when rendered per pod)."""
    expected = {f"MESHFIT_{axis.upper()}_SIZE": assignment.parallelism.degree(axis) for axis in AXES}
    expected["PET_NNODES"] = assignment.pod_count
    if exact:
        expected.update({"RANK": assignment.ranks[0], "WORLD_SIZE": assignment.world_size,
                         "NODE_RANK": assignment.pod_index, "PET_NODE_RANK": assignment.pod_index,
                         **{f"MESHFIT_{axis.upper()}_RANK": assignment.coords[0][axis] for axis in AXES}})
    for key, value in expected.items():
        if env.get(key, "").strip() and _env_int(env, key) != value:
            raise AssignmentError(f"environment {key}={env[key]} disagrees with the assignment of pod "
                                  f"{assignment.pod_index} of {assignment.gang} (expected {value})")


def assignment_from_environment(env: Mapping[str, str]) -> PodAssignment:
    """The assignment `meshfit render` wrote into the pod's environment (see module docstring)."""
    missing = [key for key in ENV_REQUIRED if not env.get(key, "").strip()]
    if missing:
        raise AssignmentError(f"environment: missing {', '.join(missing)}")
    try:
        parallelism = Parallelism.parse(env["MESHFIT_PARALLELISM"])
    except JobSpecError as exc:
        raise AssignmentError(f"environment MESHFIT_PARALLELISM: {exc}") from None
    pod_index, index_key = _first_int(env, ("MESHFIT_POD_INDEX", "PET_NODE_RANK"), "pod index")
    per_pod, _ = _first_int(env, ("LOCAL_WORLD_SIZE", "PET_NPROC_PER_NODE"), "local world size")
    assignment = build_assignment(env["MESHFIT_GANG"].strip(), pod_index, per_pod, parallelism,
                                  env["MESHFIT_RANK_ORDER"].strip(), env["MASTER_ADDR"].strip(),
                                  _env_int(env, "MASTER_PORT"))
    _check_rendered(env, assignment, exact=index_key == "MESHFIT_POD_INDEX")
    return assignment


def _my_pod_index(table: RankTable, env: Mapping[str, str]) -> int | None:
    for key in ("MESHFIT_POD_INDEX", "PET_NODE_RANK"):
        if env.get(key, "").strip():
            return _env_int(env, key)
    name = (env.get("POD_NAME") or env.get("HOSTNAME") or "").strip()
    indices = sorted({row.get("pod_index") for row in table.rows if name and row.get("pod") == name})
    return indices[0] if len(indices) == 1 else None


def assignment_from_rank_table(table: RankTable, env: Mapping[str, str]) -> PodAssignment | None:
    """This pod's assignment from the gang's rank table; None when the table does not say which pod we are."""
    index = _my_pod_index(table, env)
    if index is None:
        return None
    per_pod = table.world_size // len(table.pod_nodes)
    return build_assignment(table.gang, index, per_pod, table.parallelism, table.rank_order, table.master_addr,
                            table.master_port)


def resolve_assignment(annotations: Mapping[str, str] | None, table: RankTable | None,
                       env: Mapping[str, str], annotations_problem: str = "") -> tuple[PodAssignment, str]:
    """(assignment, source name) by the precedence annotations > rank table > environment."""
    if annotations is not None and has_bound_assignment(annotations):
        assignment = parse_assignment(annotations)
        if table is not None and table.elastic is not None and table.gang == assignment.gang:
            table.check_matches(assignment)  # an elastic gang resized since the bind: the table states its size
            assignment = replace(assignment, world_size=table.world_size, parallelism=table.parallelism)
        return assignment, "annotations"
    if table is not None:
        found = assignment_from_rank_table(table, env)
        if found is not None:
            return found, "rank-table"
    if not env.get("MESHFIT_GANG", "").strip():
        why = annotations_problem or "no meshfit.io/* assignment annotations (the pod was not bound by meshfit)"
        table_note = "the rank table does not name this pod" if table is not None else "no rank table"
        raise AssignmentError(f"no rank assignment: {why}; {table_note}; no MESHFIT_GANG in the environment "
                              f"(not rendered by meshfit render)")
    return assignment_from_environment(env), "environment"
