"""Elastic gangs: a data-parallel range, how it is read, and the replica arithmetic (see docs/elastic.md).

An elastic gang declares the range of data-parallel degrees it can train at, either as the
annotation `meshfit.io/elastic: "dp=MIN..MAX"` or as a PyTorchJob's `spec.elasticPolicy`
(`minReplicas` / `maxReplicas`, counted in pods).  Its controller creates the pods of the *maximum*
size; `meshfit.io/parallelism` states the maximum dp.  One DP replica is `tp*cp*ep*pp` GPUs and must
be a whole number of pods (`pods_per_replica`), so every size is a whole number of replicas.

The *active size* is always a prefix of the pod indices: at degree `dp` the members are pods
`0 .. dp * pods_per_replica - 1`, laid out exactly as a gang declared with that dp.  For that to
leave every pod's ranks and coordinates unchanged across sizes, dp must be the outermost axis of
degree > 1 in the rank order (`elastic_range` refuses other orders), so resizing only appends or
removes whole DP replicas at the end of the rank space.  Pods beyond the active size stay pending.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from scheduler.placement.jobs import AUTO_RANK_ORDER, DEFAULT_RANK_ORDER, Gang, JobSpecError, Parallelism, parse_rank_order
from scheduler.placement.result import Placement

ANNOTATION_ELASTIC = "meshfit.io/elastic"
"""`dp=MIN..MAX`: the gang may run at any data-parallel degree in [MIN, MAX] (MAX = the declared dp)."""

_RANGE = re.compile(r"dp\s*=\s*(\d{1,9})\s*\.\.\s*(\d{1,9})")


@dataclass(frozen=True)
class ElasticRange:
    """The data-parallel degrees an elastic gang may run at, and how many pods one DP replica takes."""

    min_dp: int
    max_dp: int
    pods_per_replica: int = 1

    def __str__(self) -> str:
        return f"dp={self.min_dp}..{self.max_dp}"

    def pods_at(self, dp: int) -> int:
        """Pods of the gang at data-parallel degree `dp`."""
        return dp * self.pods_per_replica

    def dp_of(self, pods: int) -> int:
        """Data-parallel degree of `pods` pods (a whole number of replicas; ValueError otherwise)."""
        if pods % self.pods_per_replica:
            raise ValueError(f"{pods} pods is not a whole number of {self.pods_per_replica}-pod DP replicas")
        return pods // self.pods_per_replica

    def sizes(self) -> range:
        """Every allowed dp, largest first."""
        return range(self.max_dp, self.min_dp - 1, -1)

    def describe(self, dp: int) -> str:
        """`dp=6 of 4..16`."""
        return f"dp={dp} of {self.min_dp}..{self.max_dp}"


def parse_elastic(text: str, where: str) -> tuple[int, int]:
    """(min, max) from `dp=MIN..MAX`; JobSpecError (one line naming `where`) when malformed or min > max."""
    match = _RANGE.fullmatch(str(text).strip().lower())
    if match is None:
        raise JobSpecError(f"{where}: {ANNOTATION_ELASTIC} must look like 'dp=4..16', got {str(text)[:40]!r}")
    low, high = int(match.group(1)), int(match.group(2))
    if low < 1 or low > high:
        raise JobSpecError(f"{where}: {ANNOTATION_ELASTIC} {text!r}: need 1 <= min <= max")
    return low, high


def _policy_range(policy: Mapping[str, Any], pods_per_replica: int, size: int, where: str) -> tuple[int, int]:
    """(min dp, max dp) from a PyTorchJob elasticPolicy (minReplicas / maxReplicas are pod counts)."""
    bounds = []
    for key, default in (("minReplicas", 1), ("maxReplicas", size)):
        raw = policy.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise JobSpecError(f"{where}: elasticPolicy.{key} must be an integer >= 1, got {str(raw)[:40]!r}")
        bounds.append(raw)
    low, high = bounds
    if low > high:
        raise JobSpecError(f"{where}: elasticPolicy minReplicas {low} > maxReplicas {high}")
    if low > size:
        raise JobSpecError(f"{where}: elasticPolicy.minReplicas {low} is above the job's {size} pods")
    if low % pods_per_replica:
        raise JobSpecError(f"{where}: elasticPolicy.minReplicas {low} is not a whole number of DP replicas "
                           f"({pods_per_replica} pods each)")
    return low // pods_per_replica, size // pods_per_replica  # only the pods that exist can ever run


def _check_order(order: str | None, par: Parallelism, where: str) -> None:
    """dp must be the outermost axis of degree > 1, so a pod's ranks do not depend on the current dp."""
    text = (order or DEFAULT_RANK_ORDER).strip().lower()
    if text == AUTO_RANK_ORDER:
        if par.pp > 1:
            raise JobSpecError(f"{where}: an elastic gang with pp={par.pp} needs an explicit rank order with dp "
                               f"outermost (meshfit.io/rank-order: tp-cp-ep-pp-dp), not 'auto'")
        return
    axes = parse_rank_order(text)
    outer = [axis for axis in axes[axes.index("dp") + 1:] if par.degree(axis) > 1]
    if outer:
        raise JobSpecError(f"{where}: an elastic gang needs dp outermost in its rank order, but {text!r} puts "
                           f"{outer[0]} (degree {par.degree(outer[0])}) outside dp; use tp-cp-ep-pp-dp")


def elastic_range(text: str | None, policy: Mapping[str, Any] | None, par: Parallelism, size: int, gpus: int,
                  order: str | None, where: str, has_slices: bool = False) -> ElasticRange | None:
    """The gang's elastic range from the annotation and/or a PyTorchJob elasticPolicy (None: not elastic).

    Checked against the declared gang: MAX must be the declared dp (the controller creates the pods of
    the maximum size), a DP replica must be a whole number of pods, dp must be outermost in the rank
    order; the annotation and an elasticPolicy must agree.  Any inconsistency is one JobSpecError line.
    """
    if not text and not isinstance(policy, Mapping):
        return None
    if gpus < 1:
        raise JobSpecError(f"{where}: an elastic gang's pods must request GPUs")
    replica_gpus = par.world_size // par.dp
    if replica_gpus % gpus:
        raise JobSpecError(f"{where}: one DP replica (tp*cp*ep*pp = {replica_gpus} GPUs) is not a whole number "
                           f"of {gpus}-GPU pods, so the gang cannot shrink or grow by whole replicas")
    per = replica_gpus // gpus
    if has_slices:
        raise JobSpecError(f"{where}: an elastic gang cannot also ask for Kueue slices")
    ranges = []
    if text:
        low, high = parse_elastic(text, where)
        if high != par.dp:
            raise JobSpecError(f"{where}: {ANNOTATION_ELASTIC} {text!r} but the gang declares dp={par.dp} ({size} "
                               f"pods): create the pods of the maximum size and declare that dp")
        ranges.append((low, high))
    if isinstance(policy, Mapping):
        ranges.append(_policy_range(policy, per, size, where))
    if len(set(ranges)) > 1:
        raise JobSpecError(f"{where}: {ANNOTATION_ELASTIC} says dp={ranges[0][0]}..{ranges[0][1]} but the "
                           f"elasticPolicy says dp={ranges[1][0]}..{ranges[1][1]}")
    _check_order(order, par, where)
    return ElasticRange(ranges[0][0], ranges[0][1], per)


def restated_parallelism(text: str, max_dp: int | None, size: int, gpus: int) -> str:
    """A bound elastic member's `meshfit.io/parallelism` (meshfit's bind wrote the dp it was bound at) with dp put
    back to the gang's maximum: `max_dp` when the range says it, else what `size` pods of `gpus` GPUs hold."""
    par = Parallelism.parse(text)
    inner = par.world_size // par.dp
    if max_dp is None:
        if gpus < 1 or (size * gpus) % inner:
            return text
        max_dp = size * gpus // inner
    return str(replace(par, dp=max_dp))


def resized_gang(gang: Gang, elastic: ElasticRange, dp: int) -> Gang:
    """The gang at data-parallel degree `dp`: its first `dp * pods_per_replica` pods (names kept)."""
    if not elastic.min_dp <= dp <= elastic.max_dp:
        raise ValueError(f"dp={dp} is outside {elastic}")
    pods = elastic.pods_at(dp)
    if len(gang.pods) < pods:
        raise ValueError(f"gang {gang.key} has {len(gang.pods)} pods, fewer than dp={dp} needs")
    return replace(gang, pods=gang.pods[:pods], parallelism=replace(gang.parallelism, dp=dp))


def place_largest(gang: Gang, elastic: ElasticRange, free_gpus: int,
                  place: Callable[[Gang], Placement]) -> Placement:
    """Place the largest dp in range that fits (trying max first); the min-size failure when none does.

    Sizes needing more GPUs than `free_gpus` are skipped without asking the engine."""
    last: Placement | None = None
    for dp in elastic.sizes():
        sized = resized_gang(gang, elastic, dp)
        if sized.world_size > free_gpus and dp > elastic.min_dp:
            continue
        last = place(sized)
        if last.placed:
            return last
    assert last is not None
    return last


def shrink_target(active_dp: int, elastic: ElasticRange, missing: int) -> int:
    """The dp to shrink to when `missing` members of the active size cannot be re-placed.

    The highest `ceil(missing / pods_per_replica)` replicas are dropped: their bound pods free at least
    as many pod slots as the missing members that stay inside the smaller size need.  The answer may be
    below `min_dp` (the caller rolls back) but never below 0."""
    return max(active_dp - math.ceil(missing / elastic.pods_per_replica), 0)
