"""Wiring of failure handling into a service: options, the upkeep passes, metrics, `GET /gangs` fields.

`FailureOptions` (a strict pydantic model; `meshfit serve` builds it from its flags) says which nodes
count as failed (`scheduler.gangs.health.NodeHealthSources`), whether members on them are replaced
and after how long, and the spare fraction.  `install_failure_handling` applies the sources to the
state, registers the spare pool and the replacement pass as `GangLifecycle.upkeep`s and their
`GET /gangs` fields, and exports:

- `meshfit_member_replacements_total{source}`: members on failed nodes handled, by failure source
  (a fixed set: `scheduler.gangs.health.SOURCES`);
- `meshfit_spare_gpus{kind}`: spare GPUs held now, `pool` or per-`gang`;
- `meshfit_spares_used_total{kind}`: spares taken by replacements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.gangs.health import SOURCES, NodeHealthSources
from scheduler.service.lifecycle.replacement import DEFAULT_GRACE_SECONDS, MemberReplacement
from scheduler.service.lifecycle.spare_pool import GANG, POOL, SparePool
from scheduler.gangs.spares import MAX_SPARE_FRACTION

MAX_GRACE_SECONDS = 86_400.0


class FailureOptions(BaseModel):
    """Failure replacement and spares settings; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    replace_unhealthy: bool = True
    grace_seconds: float = Field(default=DEFAULT_GRACE_SECONDS, ge=0.0, le=MAX_GRACE_SECONDS, allow_inf_nan=False)
    spare_fraction: float = Field(default=0.0, ge=0.0, le=MAX_SPARE_FRACTION, allow_inf_nan=False)
    sources: NodeHealthSources = Field(default_factory=NodeHealthSources)


@dataclass
class FailureHandling:
    """What `install_failure_handling` set up (for tests and the metrics)."""

    spares: SparePool
    replacement: MemberReplacement | None


class SpareCollector(Collector):
    """`meshfit_spare_gpus{kind}` read from the spare pool at scrape time."""

    def __init__(self, state, spares: SparePool) -> None:
        self.state, self.spares = state, spares

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Spare GPUs held now, by kind."""
        with self.state.lock:
            held = self.spares.gpus_held()
        family = GaugeMetricFamily("meshfit_spare_gpus", "Spare GPUs held now (pool: whole spare nodes per leaf; "
                                   "gang: meshfit.io/spares slots).", labels=["kind"])
        for kind in (POOL, GANG):
            family.add_metric([kind], held[kind])
        yield family


def install_failure_handling(scheduler, metrics, options: FailureOptions) -> FailureHandling:
    """Apply `options` to a `GangScheduler` (and its `ServiceMetrics`, when given); see the module docstring."""
    state, lifecycle = scheduler.state, scheduler.lifecycle
    replaced = used = None
    if metrics is not None:
        replaced = Counter("meshfit_member_replacements", "Gang members on failed nodes evicted and re-placed "
                           "(pod 0 lost: the gang rolled back), by failure source.", ["source"],
                           registry=metrics.registry)
        used = Counter("meshfit_spares_used", "Spares taken by member replacements.", ["kind"],
                       registry=metrics.registry)
        for source in SOURCES:
            replaced.labels(source)
        for kind in (POOL, GANG):
            used.labels(kind)
    with state.lock:
        state.health.sources = options.sources
        state.health.reset(state.nodes)
        spares = SparePool(state, options.spare_fraction)
        if state.nodes:
            state.refresh_nodes()
    lifecycle.upkeep.append(spares.upkeep)
    replacement = None
    if options.replace_unhealthy:
        replacement = MemberReplacement(lifecycle, spares, options.grace_seconds,
                                        on_replaced=(lambda source, n: replaced.labels(source).inc(n))
                                        if replaced is not None else None)
        lifecycle.upkeep.insert(0, replacement.upkeep)  # before the pool refills: spares freed by it stay spares
        lifecycle.row_extras.append(replacement.row_extra)
    if metrics is not None:
        metrics.register_collector(SpareCollector(state, spares), "spares")
        spares.on_used = lambda kind, count: used.labels(kind).inc(count)
    return FailureHandling(spares, replacement)


FLAG_OF_FIELD = {"grace_seconds": "--unhealthy-grace", "spare_fraction": "--spare-fraction",
                 "conditions": "--unhealthy-condition", "labels": "--unhealthy-label"}
IGNORABLE = {"not-ready": "not_ready", "cordoned": "cordoned", "no-execute": "no_execute",
             "gpu-allocatable": "gpu_allocatable"}


def failure_options_from_flags(replace: bool, grace: float, conditions: list[str], labels: list[str],
                               ignore: list[str], spare_fraction: float) -> FailureOptions:
    """`FailureOptions` from `meshfit serve` flags; ValueError with a one-line reason for bad values.

    `conditions` / `labels`, when given, replace the defaults (`none` alone: no such source);
    `ignore` turns built-in sources off (not-ready, cordoned, no-execute, gpu-allocatable)."""
    unknown = sorted(set(ignore) - set(IGNORABLE))
    if unknown:
        raise ValueError(f"--unhealthy-ignore {unknown[0]!r}: expected one of {', '.join(IGNORABLE)}")
    sources: dict = {IGNORABLE[name]: False for name in ignore}
    for field, given in (("conditions", conditions), ("labels", labels)):
        if given:
            sources[field] = () if given == ["none"] else tuple(given)
    try:
        return FailureOptions(replace_unhealthy=replace, grace_seconds=float(grace),
                              spare_fraction=float(spare_fraction), sources=NodeHealthSources(**sources))
    except ValidationError as exc:
        error = exc.errors()[0]
        field = next((str(p) for p in error["loc"] if str(p) in FLAG_OF_FIELD), "")
        raise ValueError(f"{FLAG_OF_FIELD.get(field, field or 'failure options')}: "
                         f"{' '.join(str(error['msg']).split())}") from None


def spares_json(scheduler) -> dict:
    """`GET /spares`: the pool's spare nodes, each gang's spare slots, spare GPUs held and spares used so far."""
    handling = getattr(scheduler, "failures", None)
    if handling is None:
        return {"enabled": False, "pool": [], "gangs": {}, "gpus_held": {POOL: 0, GANG: 0}, "used": {POOL: 0, GANG: 0}}
    spares = handling.spares
    with scheduler.state.lock:
        gangs: dict[str, list[str]] = {}
        for hold in spares.holds.values():
            if hold.gang:
                gangs.setdefault(hold.gang, []).append(hold.node)
        return {"enabled": True, "fraction": spares.fraction, "pool": spares.pool_nodes(),
                "gangs": {k: sorted(v) for k, v in sorted(gangs.items())}, "gpus_held": spares.gpus_held(),
                "used": {POOL: spares.used[POOL], GANG: spares.used[GANG]}}
