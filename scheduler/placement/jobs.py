"""Job model: parallelism degrees, model shape, topology constraints and the gang to place.

Everything here is plain data parsed from the `meshfit.io/*` annotation syntax; reading whole
Kubernetes manifests lives in `scheduler.handoff.assignment.manifests`, reading pods in the gang-source plugins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from topology.strict import did_you_mean

AXES = ("tp", "cp", "ep", "pp", "dp")
"""Parallel axes meshfit knows, in the canonical order used in JSON output."""

ANNOTATION_PARALLELISM = "meshfit.io/parallelism"
ANNOTATION_RANK_ORDER = "meshfit.io/rank-order"
ANNOTATION_MODEL = "meshfit.io/model"
ANNOTATION_REQUIRED_LEVEL = "meshfit.io/required-level"
ANNOTATION_PREFERRED_LEVEL = "meshfit.io/preferred-level"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
ANNOTATION_MAX_COMM_RATIO = "meshfit.io/max-comm-ratio"
"""Refuse (wait instead of start) a layout whose predicted step communication exceeds this multiple
of the lower bound, e.g. "1.5"; unset = start on any layout that fits."""
KUEUE_SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
"""Kueue (v0.13+) two-level TAS: every slice of the pod set must sit inside one domain of this level."""
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
"""Kueue two-level TAS: pods per slice (consecutive pod indices); must divide the pod count."""

DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"
AUTO_RANK_ORDER = "auto"


MAX_GANG_PODS = 100_000
"""Most pods one gang may declare (gang-size annotation, PodGroup minMember, gRPC `pods`, world size / GPUs):
far above any cluster meshfit serves (a gang larger than the cluster could never start anyway), and low
enough that building its pod slots stays cheap.  Larger counts are refused with a reason, never allocated."""
MAX_GPUS_PER_POD = 1_024
"""Most GPUs one gang pod may request (no node has more; larger requests are refused with a reason)."""
MAX_WORLD_SIZE = MAX_GANG_PODS * 64
"""Most ranks a parallelism annotation may describe (each degree, and their product)."""


class JobSpecError(ValueError):
    """A job description that cannot be placed as written (bad annotation, inconsistent sizes)."""


def parse_key_values(text: str, what: str) -> dict[str, str]:
    """Parse `"k=v,k2=v2"` (commas or semicolons; keys lower-cased); JobSpecError naming `what` if malformed or
    a key repeats (`tp=8,dp=2,dp=3` is an error, never "the last one wins")."""
    pairs: dict[str, str] = {}
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise JobSpecError(f"{what}: expected key=value, got {part!r}")
        key = key.strip().lower()
        if key in pairs:
            raise JobSpecError(f"{what}: {key!r} is given twice ({key}={pairs[key]} and {key}={value.strip()})")
        pairs[key] = value.strip()
    return pairs


def _positive_int(value: str, what: str, maximum: int = MAX_WORLD_SIZE) -> int:
    try:
        number = float(value)
    except ValueError:
        raise JobSpecError(f"{what} must be a positive integer, got {value!r}") from None
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise JobSpecError(f"{what} must be a positive integer, got {value!r}")
    if number > maximum:
        raise JobSpecError(f"{what} must be at most {maximum}, got {value!r}")
    return int(number)


@dataclass(frozen=True)
class Parallelism:
    """Degrees of tensor, context, expert, pipeline and data parallelism (each >= 1)."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1

    @classmethod
    def parse(cls, text: str) -> "Parallelism":
        """Parse `"tp=8,cp=1,ep=1,pp=4,dp=16"` (missing axes default to 1)."""
        pairs = parse_key_values(text, ANNOTATION_PARALLELISM)
        unknown = sorted(set(pairs) - set(AXES))
        if unknown:
            raise JobSpecError(f"{ANNOTATION_PARALLELISM}: unknown axis {unknown[0]!r}"
                               f"{did_you_mean(unknown[0], AXES)} (known: {', '.join(AXES)})")
        par = cls(**{k: _positive_int(v, f"{ANNOTATION_PARALLELISM} {k}") for k, v in pairs.items()})
        if par.world_size > MAX_WORLD_SIZE:
            raise JobSpecError(f"{ANNOTATION_PARALLELISM}: world size {par.world_size} ({text!r}) is above "
                               f"the most meshfit accepts, {MAX_WORLD_SIZE}")
        return par

    @property
    def world_size(self) -> int:
        """Product of all degrees."""
        return self.tp * self.cp * self.ep * self.pp * self.dp

    def degree(self, axis: str) -> int:
        """Degree of one axis by name."""
        return getattr(self, axis)

    def as_dict(self) -> dict[str, int]:
        """`{"tp":..,"cp":..,"ep":..,"pp":..,"dp":..}`."""
        return {axis: self.degree(axis) for axis in AXES}

    def __str__(self) -> str:
        return ",".join(f"{axis}={self.degree(axis)}" for axis in AXES)


@lru_cache(maxsize=1024)
def parse_rank_order(text: str) -> tuple[str, ...]:
    """Parse `"tp-cp-ep-dp-pp"` (innermost first) into a full permutation of AXES.

    Axes left out are appended outermost in canonical order; they must then have degree 1,
    which `Gang.validate` checks.
    """
    names = [p.strip().lower() for p in text.replace(",", "-").split("-") if p.strip()]
    unknown = [n for n in names if n not in AXES]
    if unknown:
        raise JobSpecError(f"{ANNOTATION_RANK_ORDER}: unknown axis {unknown[0]!r} in {text!r}"
                           f"{did_you_mean(unknown[0], AXES)} (known: {', '.join(AXES)})")
    if len(set(names)) != len(names):
        raise JobSpecError(f"{ANNOTATION_RANK_ORDER}: repeated axis in {text!r}")
    return tuple(names + [a for a in AXES if a not in names])


def format_rank_order(order: tuple[str, ...]) -> str:
    """Inverse of `parse_rank_order`."""
    return "-".join(order)


@dataclass(frozen=True)
class ModelShape:
    """Model and batch shape used to compute traffic volumes (documented defaults: a 7B dense model)."""

    params: float = 7e9
    layers: int = 32
    hidden: int = 4096
    seq: int = 4096
    micro_batch: int = 1
    global_batch: int = 1024
    moe_topk: int = 2
    dtype_bytes: int = 2

    _KEYS = {"params": "params", "layers": "layers", "hidden": "hidden", "seq": "seq",
             "micro-batch": "micro_batch", "micro_batch": "micro_batch",
             "global-batch": "global_batch", "global_batch": "global_batch",
             "moe-topk": "moe_topk", "topk": "moe_topk", "dtype-bytes": "dtype_bytes"}
    KNOWN_KEYS = ("params", "layers", "hidden", "seq", "micro-batch", "global-batch", "moe-topk", "dtype-bytes")
    """The keys of `meshfit.io/model` as documented (`_KEYS` also takes the underscore spellings and `topk`)."""

    @classmethod
    def parse(cls, text: str) -> "ModelShape":
        """Parse `"params=70e9,layers=80,hidden=8192,seq=4096,micro-batch=1,global-batch=1024"`."""
        values: dict[str, float | int] = {}
        for key, value in parse_key_values(text, ANNOTATION_MODEL).items():
            attr = cls._KEYS.get(key)
            if attr is None:
                raise JobSpecError(f"{ANNOTATION_MODEL}: unknown key {key!r}{did_you_mean(key, cls._KEYS)} "
                                   f"(known: {', '.join(cls.KNOWN_KEYS)})")
            if attr == "params":
                try:
                    values[attr] = float(value)
                except ValueError:
                    raise JobSpecError(f"{ANNOTATION_MODEL}: params must be a number, got {value!r}") from None
                if not math.isfinite(values[attr]) or values[attr] <= 0:
                    raise JobSpecError(f"{ANNOTATION_MODEL}: params must be a finite number > 0, got {value!r}")
            else:
                values[attr] = _positive_int(value, f"{ANNOTATION_MODEL} {key}", maximum=10**12)
        return cls(**values)

    def micro_batches(self, dp: int) -> int:
        """Micro-batches each pipeline runs per step: global_batch / (dp x micro_batch), at least 1."""
        return max(1, self.global_batch // max(1, dp * self.micro_batch))


@dataclass(frozen=True)
class TopologyConstraint:
    """Required / preferred topology level (by level name or node-label key), optionally with Kueue slices."""

    required_level: str | None = None
    preferred_level: str | None = None
    assigned_domains: tuple[str, ...] = ()
    """Domain names (any level) a prior admission (e.g. Kueue TAS) already chose; stay inside."""
    slice_required_level: str | None = None
    """Level whose domains must each hold a whole slice (`kueue.x-k8s.io/podset-slice-required-topology`)."""
    slice_size: int | None = None
    """Pods per slice: pods [k*size, (k+1)*size) form slice k (`kueue.x-k8s.io/podset-slice-size`)."""
    max_comm_ratio: float | None = None
    """Largest predicted step communication / lower bound the job accepts (`meshfit.io/max-comm-ratio`)."""
    pod_domains: tuple[str, ...] = ()
    """Per pod index, the domain (a host, or a larger domain) a prior admission pinned that pod to -- Kueue TAS
    gives each pod a nodeSelector for its own -- which every layout keeps (`scheduler.placement.pinned`)."""

    @property
    def has_slices(self) -> bool:
        """True when the constraint asks for Kueue two-level (slice) placement."""
        return self.slice_required_level is not None


def parse_slice_annotations(where: str, level: str | None, size: str | int | None,
                            default_size: int | None = None) -> tuple[str | None, int | None]:
    """(slice level, slice size) from the Kueue slice annotations, as Kueue validates them.

    A size without a slice topology is an error (Kueue forbids it); a slice topology without a size
    takes `default_size` (Kueue defaults it for JobSet to the Job's parallelism) or is an error.
    """
    level = str(level).strip() if level not in (None, "") else None
    text = str(size).strip() if size not in (None, "") else None
    if level is None:
        if text is not None:
            raise JobSpecError(f"{where}: {KUEUE_SLICE_SIZE} cannot be set without {KUEUE_SLICE_REQUIRED_TOPOLOGY}")
        return None, None
    if text is None:
        if default_size is None:
            raise JobSpecError(f"{where}: {KUEUE_SLICE_REQUIRED_TOPOLOGY} needs {KUEUE_SLICE_SIZE}")
        return level, default_size
    if not text.isdigit() or int(text) < 1:
        raise JobSpecError(f"{where}: {KUEUE_SLICE_SIZE} must be an integer >= 1, got {text!r}")
    return level, int(text)


def parse_max_comm_ratio(where: str, value: str | float | None) -> float | None:
    """`meshfit.io/max-comm-ratio` as a float >= 1 (None when unset); JobSpecError otherwise."""
    if value in (None, ""):
        return None
    try:
        ratio = float(str(value).strip())
    except ValueError:
        raise JobSpecError(f"{where}: {ANNOTATION_MAX_COMM_RATIO} must be a number >= 1, got {value!r}") from None
    if not ratio >= 1.0 or ratio == float("inf"):
        raise JobSpecError(f"{where}: {ANNOTATION_MAX_COMM_RATIO} must be a finite number >= 1, got {value!r}")
    return ratio


def pick_topology_level(where: str, kind: str, *candidates: tuple[str, str | None]) -> str | None:
    """The one level named by (source, value) candidates; JobSpecError listing them if they conflict."""
    values = {(src, v) for src, v in candidates if v}
    distinct = {v for _, v in values}
    if len(distinct) > 1:
        listing = ", ".join(f"{src}={v!r}" for src, v in sorted(values))
        raise JobSpecError(f"{where}: conflicting {kind} topology levels: {listing}")
    return distinct.pop() if distinct else None


@dataclass(frozen=True)
class PodSlot:
    """One pod of a gang: its index (rank block), name and GPU count."""

    index: int
    name: str
    gpus: int


@dataclass(frozen=True)
class Gang:
    """All pods of one training job, to be placed together or not at all."""

    namespace: str
    name: str
    pods: tuple[PodSlot, ...]
    parallelism: Parallelism = field(default_factory=Parallelism)
    rank_order: str = DEFAULT_RANK_ORDER
    model: ModelShape = field(default_factory=ModelShape)
    constraint: TopologyConstraint = field(default_factory=TopologyConstraint)
    priority: int = 0

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @property
    def world_size(self) -> int:
        """Total GPUs (= ranks) of the gang."""
        return sum(p.gpus for p in self.pods)

    @property
    def gpus_per_pod(self) -> int:
        """GPUs of each pod (gangs are homogeneous; validated)."""
        return self.pods[0].gpus if self.pods else 0

    def pod_ranks(self, index: int) -> range:
        """Ranks held by pod `index` (its contiguous block)."""
        g = self.gpus_per_pod
        return range(index * g, (index + 1) * g)

    def with_rank_order(self, order: str) -> "Gang":
        """Same gang with another rank order."""
        return replace(self, rank_order=order)

    def validate(self) -> None:
        """Raise JobSpecError with one precise line if the gang cannot be laid out as declared."""
        if not self.pods:
            raise JobSpecError(f"job {self.key}: no pods")
        gpus = {p.gpus for p in self.pods}
        if len(gpus) != 1:
            raise JobSpecError(f"job {self.key}: pods request different GPU counts {sorted(gpus)}")
        if self.gpus_per_pod < 1:
            raise JobSpecError(f"job {self.key}: pods request no GPUs")
        if sorted(p.index for p in self.pods) != list(range(len(self.pods))):
            raise JobSpecError(f"job {self.key}: pod indices must be 0..{len(self.pods) - 1}")
        par = self.parallelism
        if par.world_size != self.world_size:
            raise JobSpecError(
                f"job {self.key}: tp*cp*ep*pp*dp = {par.world_size} ({par}) but the job has "
                f"{len(self.pods)} pods x {self.gpus_per_pod} GPUs = {self.world_size}")
        if self.rank_order != AUTO_RANK_ORDER:
            order = parse_rank_order(self.rank_order)
            given = len([p for p in self.rank_order.replace(",", "-").split("-") if p.strip()])
            for axis in order[given:]:
                if par.degree(axis) > 1:
                    raise JobSpecError(f"job {self.key}: rank order {self.rank_order!r} omits axis "
                                       f"{axis} whose degree is {par.degree(axis)}")
        self._validate_slices()

    def _validate_slices(self) -> None:
        """JobSpecError unless the slice fields are both absent, or a level and a size >= 1 dividing the pods."""
        level, size = self.constraint.slice_required_level, self.constraint.slice_size
        if level is None and size is None:
            return
        if level is None or size is None:
            raise JobSpecError(f"job {self.key}: a slice needs both {KUEUE_SLICE_REQUIRED_TOPOLOGY} and "
                               f"{KUEUE_SLICE_SIZE} (got level {level!r}, size {size!r})")
        if size < 1 or len(self.pods) % size:
            raise JobSpecError(f"job {self.key}: {KUEUE_SLICE_SIZE} {size} must be >= 1 and divide the "
                               f"{len(self.pods)} pods")
