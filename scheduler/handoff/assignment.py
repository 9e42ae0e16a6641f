"""The rank assignment one pod receives after its gang is bound, and its wire forms.

A `PodAssignment` says which ranks a pod holds, their coordinates on every parallel axis, the
rank order, world size and rendezvous address.  It travels as `meshfit.io/*` pod annotations
(read inside the container through the downward API by `meshfit launch`) and, for the whole
gang, as a rank-table ConfigMap `meshfit-<job>-ranks` (see `scheduler.handoff.assignment.rank_table`).  Parsing is
strict: a missing or inconsistent assignment raises `AssignmentError` so the launcher exits at
once instead of hanging in rendezvous.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from scheduler.placement.jobs import (
    ANNOTATION_PARALLELISM, ANNOTATION_RANK_ORDER, AUTO_RANK_ORDER, AXES, DEFAULT_RANK_ORDER, JobSpecError, Parallelism,
    parse_rank_order,
)
from scheduler.placement.layout import rank_to_coords
from scheduler.placement.result import Placement

ANNOTATION_GANG = "meshfit.io/gang"
ANNOTATION_POD_INDEX = "meshfit.io/pod-index"
ANNOTATION_RANKS = "meshfit.io/ranks"
ANNOTATION_COORDS = "meshfit.io/coords"
ANNOTATION_WORLD_SIZE = "meshfit.io/world-size"
ANNOTATION_MASTER_ADDR = "meshfit.io/master-addr"
ANNOTATION_MASTER_PORT = "meshfit.io/master-port"
ANNOTATION_POD_NODES = "meshfit.io/pod-nodes"
"""Set by `meshfit render` on a pinned template: the nodes its pods were placed on (informational)."""
# ANNOTATION_PARALLELISM and ANNOTATION_RANK_ORDER are the job annotations of `scheduler.placement.jobs`: a bound
# pod carries the values the placement used under the same keys.

ASSIGNMENT_ANNOTATIONS = (
    ANNOTATION_GANG, ANNOTATION_POD_INDEX, ANNOTATION_RANKS, ANNOTATION_COORDS, ANNOTATION_RANK_ORDER,
    ANNOTATION_WORLD_SIZE, ANNOTATION_MASTER_ADDR, ANNOTATION_MASTER_PORT, ANNOTATION_PARALLELISM,
)
"""Every annotation a bound pod carries; all are required when parsing."""

BIND_ONLY_ANNOTATIONS = (ANNOTATION_RANKS, ANNOTATION_COORDS, ANNOTATION_WORLD_SIZE, ANNOTATION_MASTER_ADDR,
                         ANNOTATION_MASTER_PORT)
"""The assignment annotations only a meshfit bind writes (the others may be inherited from the job's template)."""

DEFAULT_MASTER_PORT = 29500
"""torch.distributed's conventional rendezvous port."""


class AssignmentError(ValueError):
    """A rank assignment that is missing, malformed or inconsistent with itself."""


@dataclass(frozen=True)
class PodAssignment:
    """One pod's share of a placed gang: its ranks, their coordinates and the rendezvous point."""

    gang: str
    pod_index: int
    ranks: tuple[int, ...]
    coords: tuple[dict[str, int], ...]
    rank_order: str
    world_size: int
    master_addr: str
    master_port: int
    parallelism: Parallelism

    @property
    def local_world_size(self) -> int:
        """Ranks (processes, GPUs) in this pod."""
        return len(self.ranks)

    @property
    def pod_count(self) -> int:
        """Pods in the gang (every pod holds the same number of ranks)."""
        return self.world_size // self.local_world_size

    @property
    def order(self) -> tuple[str, ...]:
        """The rank order as a tuple of axes, innermost first."""
        return parse_rank_order(self.rank_order)

    def to_annotations(self) -> dict[str, str]:
        """The `meshfit.io/*` annotations carrying this assignment."""
        return {
            ANNOTATION_GANG: self.gang,
            ANNOTATION_POD_INDEX: str(self.pod_index),
            ANNOTATION_RANKS: ",".join(str(r) for r in self.ranks),
            ANNOTATION_COORDS: json.dumps([dict(c) for c in self.coords], separators=(",", ":")),
            ANNOTATION_RANK_ORDER: self.rank_order,
            ANNOTATION_WORLD_SIZE: str(self.world_size),
            ANNOTATION_MASTER_ADDR: self.master_addr,
            ANNOTATION_MASTER_PORT: str(self.master_port),
            ANNOTATION_PARALLELISM: str(self.parallelism),
        }

    def validate(self) -> None:
        """Raise AssignmentError unless ranks, coordinates, sizes and order agree with each other."""
        par = self.parallelism
        if par.world_size != self.world_size:
            raise AssignmentError(f"world size {self.world_size} != product of {par} = {par.world_size}")
        if not self.ranks:
            raise AssignmentError("the pod holds no ranks")
        if self.world_size % len(self.ranks):
            raise AssignmentError(f"world size {self.world_size} is not a multiple of the pod's "
                                  f"{len(self.ranks)} ranks")
        first = self.pod_index * len(self.ranks)
        expected = tuple(range(first, first + len(self.ranks)))
        if self.ranks != expected:
            raise AssignmentError(f"pod {self.pod_index} with {len(self.ranks)} ranks must hold ranks "
                                  f"{expected[0]}..{expected[-1]}, got {list(self.ranks)}")
        if self.ranks[-1] >= self.world_size:
            raise AssignmentError(f"rank {self.ranks[-1]} is outside world size {self.world_size}")
        self._validate_coords()
        if not self.master_addr:
            raise AssignmentError("empty master address")
        if not 0 < self.master_port < 65536:
            raise AssignmentError(f"master port {self.master_port} out of range")

    def _validate_coords(self) -> None:
        if len(self.coords) != len(self.ranks):
            raise AssignmentError(f"{len(self.coords)} coordinate sets for {len(self.ranks)} ranks")
        order = self.order
        for rank, coords in zip(self.ranks, self.coords):
            expected = rank_to_coords(rank, self.parallelism, order)
            if dict(coords) != expected:
                raise AssignmentError(f"rank {rank}: coords {dict(coords)} disagree with rank order "
                                      f"{self.rank_order} and {self.parallelism} (expected {expected})")


def assignment_for_pod(placement: Placement, pod_index: int, master_addr: str,
                       master_port: int = DEFAULT_MASTER_PORT) -> PodAssignment:
    """Build pod `pod_index`'s assignment from a placed gang (coordinates from the placement's rank order)."""
    gang = placement.gang
    if not 0 <= pod_index < len(gang.pods):
        raise AssignmentError(f"pod index {pod_index} out of range for {len(gang.pods)} pods of {gang.key}")
    order_text = placement.rank_order if placement.rank_order != AUTO_RANK_ORDER else DEFAULT_RANK_ORDER
    order = parse_rank_order(order_text)
    ranks = tuple(gang.pod_ranks(pod_index))
    return PodAssignment(
        gang=gang.key, pod_index=pod_index, ranks=ranks,
        coords=tuple(rank_to_coords(r, gang.parallelism, order) for r in ranks),
        rank_order=order_text, world_size=gang.world_size, master_addr=master_addr,
        master_port=master_port, parallelism=gang.parallelism)


def annotations_for_pod(placement: Placement, pod_index: int, master_addr: str,
                        master_port: int = DEFAULT_MASTER_PORT) -> dict[str, str]:
    """The `meshfit.io/*` annotations to put on pod `pod_index` when binding it."""
    return assignment_for_pod(placement, pod_index, master_addr, master_port).to_annotations()


def _int_field(annotations: Mapping[str, str], key: str) -> int:
    text = annotations[key].strip()
    try:
        return int(text)
    except ValueError:
        raise AssignmentError(f"{key}: expected an integer, got {text!r}") from None


def _parse_ranks(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise AssignmentError(f"{ANNOTATION_RANKS}: expected comma-separated integers, got {text!r}") from None


def _parse_coords(text: str) -> tuple[dict[str, int], ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssignmentError(f"{ANNOTATION_COORDS}: not JSON ({exc.msg})") from None
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise AssignmentError(f"{ANNOTATION_COORDS}: expected a JSON list of objects")
    parsed = []
    for item in value:
        if set(item) != set(AXES) or not all(isinstance(v, int) and not isinstance(v, bool) for v in item.values()):
            raise AssignmentError(f"{ANNOTATION_COORDS}: each entry needs integer {', '.join(AXES)}, got {item}")
        parsed.append({axis: item[axis] for axis in AXES})
    return tuple(parsed)


def parse_assignment(annotations: Mapping[str, str]) -> PodAssignment:
    """Parse and validate a pod's `meshfit.io/*` annotations; AssignmentError names what is wrong."""
    missing = [key for key in ASSIGNMENT_ANNOTATIONS if key not in annotations]
    if missing:
        raise AssignmentError(f"missing annotation {missing[0]} (is the pod bound by meshfit?)"
                              if len(missing) < len(ASSIGNMENT_ANNOTATIONS)
                              else "no meshfit.io/* assignment annotations (the pod was not bound by meshfit)")
    try:
        parallelism = Parallelism.parse(annotations[ANNOTATION_PARALLELISM])
        parse_rank_order(annotations[ANNOTATION_RANK_ORDER])
    except JobSpecError as exc:
        raise AssignmentError(str(exc)) from None
    assignment = PodAssignment(
        gang=annotations[ANNOTATION_GANG].strip(),
        pod_index=_int_field(annotations, ANNOTATION_POD_INDEX),
        ranks=_parse_ranks(annotations[ANNOTATION_RANKS]),
        coords=_parse_coords(annotations[ANNOTATION_COORDS]),
        rank_order=annotations[ANNOTATION_RANK_ORDER].strip(),
        world_size=_int_field(annotations, ANNOTATION_WORLD_SIZE),
        master_addr=annotations[ANNOTATION_MASTER_ADDR].strip(),
        master_port=_int_field(annotations, ANNOTATION_MASTER_PORT),
        parallelism=parallelism)
    if not assignment.gang:
        raise AssignmentError(f"{ANNOTATION_GANG}: empty")
    assignment.validate()
    return assignment
