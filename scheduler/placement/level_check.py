"""`check_levels`: a job's topology constraint against the cluster's levels, before placing it.

A required level (`meshfit.io/required-level`, Kueue's `podset-required-topology`, Volcano's hard
`networkTopology`, Kueue's slice level) that the cluster lacks is bad input: the job can never be placed as
written, so the CLI exits 2 naming it (with a did-you-mean hint).  A preferred level the cluster lacks is only a
preference: it is dropped with a warning and the job is placed without it.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.placement.capacity import resolve_level
from scheduler.placement.jobs import Gang, JobSpecError
from topology.model import ClusterTopology, TopologyError


def check_levels(gang: Gang, topo: ClusterTopology) -> tuple[Gang, list[str]]:
    """(the gang, without a preferred level the cluster lacks; warnings); JobSpecError for a required one."""
    constraint = gang.constraint
    for what, name in (("required topology level", constraint.required_level),
                       ("Kueue slice topology level", constraint.slice_required_level)):
        if name:
            try:
                resolve_level(topo, name)
            except TopologyError as exc:
                raise JobSpecError(f"{what}: {exc}") from None
    if not constraint.preferred_level:
        return gang, []
    try:
        resolve_level(topo, constraint.preferred_level)
    except TopologyError as exc:
        unpreferred = replace(gang, constraint=replace(constraint, preferred_level=None))
        return unpreferred, [f"preferred topology level ignored: {exc}"]
    return gang, []
