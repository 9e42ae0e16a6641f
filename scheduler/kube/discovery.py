"""Which version of each drifting API the cluster serves, read from API discovery before the cache starts.

Alpha and beta APIs move between versions release to release: Kubernetes' own gang API is
`scheduling.k8s.io/v1alpha1` `Workload` in 1.35, `v1alpha2` `PodGroup` in 1.36 and `v1beta1` in 1.37 (with
`v1alpha3` `CompositePodGroup`); Kueue 0.19 serves its
`Topology` at `v1beta1` / `v1beta2` and no longer at `v1alpha1`.  For each such resource `VERSIONS` lists the
versions meshfit reads, preferred first; `discover` asks the API server (`GET /apis/<group>/<version>`) which of
them serve the resource and watches the first that does.  A resource none of whose versions is served keeps its
default (the cache skips it while it 404s and looks again later), so a CRD installed after start-up still works.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Iterable

import msgspec

from scheduler.kube.api import ApiStatusError, request_bytes
from scheduler.kube.resources import WatchedResource

log = logging.getLogger("meshfit.kube")

VERSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("scheduling.k8s.io", "workloads"): ("v1beta1", "v1alpha2", "v1alpha1"),
    ("scheduling.k8s.io", "podgroups"): ("v1beta1", "v1alpha3", "v1alpha2"),
    ("scheduling.k8s.io", "compositepodgroups"): ("v1alpha3",),
    ("kueue.x-k8s.io", "workloads"): ("v1beta2", "v1beta1"),
    ("kueue.x-k8s.io", "topologies"): ("v1beta2", "v1beta1", "v1alpha1"),
    ("kueue.x-k8s.io", "admissionchecks"): ("v1beta2", "v1beta1"),
}
"""(group, plural) -> the versions meshfit understands, preferred first."""


def served_resources(api_client: Any, group: str, version: str, timeout: float = 10.0) -> set[str] | None:
    """The plural names `group/version` serves, or None when the API server does not serve that version."""
    try:
        body = request_bytes(api_client, "GET", f"/apis/{group}/{version}", timeout=timeout)
    except ApiStatusError as exc:
        if exc.status in (404, 503):
            return None
        raise
    return {str(r.get("name")) for r in msgspec.json.decode(body).get("resources") or () if isinstance(r, dict)}


def discover(api_client: Any, resources: Iterable[WatchedResource]) -> list[WatchedResource]:
    """`resources` with each drifting one moved to the version the cluster serves (see the module docstring)."""
    found: list[WatchedResource] = []
    cache: dict[tuple[str, str], set[str] | None] = {}
    for resource in resources:
        versions = VERSIONS.get((resource.group, resource.plural))
        if not versions:
            found.append(resource)
            continue
        chosen = resource
        for version in versions:
            key = (resource.group, version)
            if key not in cache:
                try:
                    cache[key] = served_resources(api_client, *key)
                except Exception as exc:  # noqa: BLE001 - discovery failing must not stop the cache
                    log.warning("API discovery of %s/%s failed: %s", *key, exc)
                    cache[key] = None
            if resource.plural in (cache[key] or ()):
                chosen = replace(resource, version=version)
                break
        if chosen.version != resource.version:
            log.info("watching %s at %s (served by this cluster)", resource.name, chosen.api_version)
        found.append(chosen)
    return found
