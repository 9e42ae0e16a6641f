"""Render a placed JobSet (jobset.x-k8s.io/v1alpha2) with exact per-pod node pinning.

A replicated job's pods share one template, so each pod becomes its own replicated job
(`<name>-<pod index>`, one replica, parallelism = completions = 1) pinned with a nodeSelector to the
node the placement chose and carrying that pod's exact rank environment.  Pod order (and so
the rank blocks) is unchanged; pod 0 is the rendezvous (`<jobset>-<first>-0-0-0.<subdomain>`: replicated job `<first>-0`, job 0, pod 0).
"""

from __future__ import annotations

import copy
from typing import Any

from plugins.handoffs.podspec import pod_environment, render_pod_template
from scheduler.handoff.assignment import ANNOTATION_POD_INDEX, DEFAULT_MASTER_PORT
from scheduler.placement.result import Placement

NAME = "jobset"


def _pods_per_job(job_spec: dict[str, Any]) -> int:
    return int(job_spec.get("completions", job_spec.get("parallelism", 1)))


def master_address(manifest: dict[str, Any]) -> str:
    """DNS name of the first pod of the rendered JobSet (headless service = the subdomain)."""
    name = manifest["metadata"]["name"]
    first = manifest["spec"]["replicatedJobs"][0].get("name") or "job0"
    subdomain = (manifest["spec"].get("network") or {}).get("subdomain") or name
    return f"{name}-{first}-0-0-0.{subdomain}"  # replicated job "<first>-0", job 0, pod 0


class JobSetHandoff:
    """Renders a JobSet as one single-pod replicated job per placed pod."""

    name = NAME

    def render(self, manifest: dict[str, Any], placement: Placement,
               master_port: int = DEFAULT_MASTER_PORT) -> list[dict[str, Any]]:
        """The rendered JobSet (one object) for `placement` of this manifest's gang."""
        rendered = copy.deepcopy(manifest)
        master = master_address(manifest)
        split: list[dict[str, Any]] = []
        index = 0
        for position, rjob in enumerate(manifest["spec"]["replicatedJobs"]):
            base = rjob.get("name") or f"job{position}"
            job_spec = rjob["template"]["spec"]
            for _ in range(int(rjob.get("replicas", 1)) * _pods_per_job(job_spec)):
                single = copy.deepcopy(rjob)
                single["name"] = f"{base}-{index}"
                single["replicas"] = 1
                spec = single["template"]["spec"]
                spec["parallelism"] = spec["completions"] = 1
                node = placement.pod_nodes[index]
                spec["template"] = render_pod_template(
                    spec["template"], [node], pod_environment(placement, index, master, master_port),
                    {ANNOTATION_POD_INDEX: str(index)})
                split.append(single)
                index += 1
        rendered["spec"]["replicatedJobs"] = split
        return [rendered]


def factory(**options: object) -> JobSetHandoff:
    """Registry factory."""
    return JobSetHandoff()
