"""The KubeSchedulerConfiguration the real-control-plane tests run kube-scheduler with: meshfit as extender, and its
`/guard` wherever the same scheduler places pods of the default profile too."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "manifests" / "kube-scheduler-config.yaml"


def shipped_meshfit_profile() -> dict:
    """The `meshfit` profile of the shipped configuration (manifests/kube-scheduler-config.yaml)."""
    (profile,) = yaml.safe_load(SHIPPED_CONFIG.read_text())["profiles"]
    return profile


def scheduler_config(kubeconfig: Path, extender_url: str, node_cache_capable: bool = False,
                     percentage_of_nodes_to_score: int | None = None, pod_initial_backoff_seconds: int = 1,
                     pod_max_backoff_seconds: int = 10, extender_tls: dict | None = None,
                     profiles: Sequence[str] = ("meshfit",)) -> dict:
    """A KubeSchedulerConfiguration (v1) with the `profiles` named (`meshfit` alone by default, with the shipped
    profile's plugins; add `default-scheduler` for pods kube-scheduler places on its own in the same cache, which
    brings meshfit's `/guard` extender too) and meshfit as extender.

    `extender_tls` (e.g. {"certFile": ..., "keyFile": ..., "caFile": ...}) turns on `enableHTTPS` with that
    extender `tlsConfig` (kube-scheduler then presents the client certificate to meshfit)."""
    config: dict = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": pod_initial_backoff_seconds,
        "podMaxBackoffSeconds": pod_max_backoff_seconds,
        "profiles": [profile_named(name) for name in profiles],
        "extenders": [{
            "urlPrefix": f"{extender_url.rstrip('/')}/scheduler", "filterVerb": "filter",
            "prioritizeVerb": "prioritize", "preemptVerb": "preempt", "bindVerb": "bind", "weight": 1,
            "enableHTTPS": False, "httpTimeout": "10s", "nodeCacheCapable": node_cache_capable,
            "managedResources": [{"name": GPU_RESOURCE, "ignoredByScheduler": False}], "ignorable": False}],
    }
    if "default-scheduler" in profiles:  # it places other pods too: meshfit's `/guard` is asked about each of them
        config["extenders"].append({
            "urlPrefix": f"{extender_url.rstrip('/')}/scheduler", "filterVerb": "guard", "enableHTTPS": False,
            "httpTimeout": "10s", "nodeCacheCapable": node_cache_capable, "ignorable": True})
    if percentage_of_nodes_to_score is not None:
        config["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    if extender_tls is not None:
        for extender in config["extenders"]:
            extender.update({"enableHTTPS": True, "tlsConfig": dict(extender_tls)})
    return config


def profile_named(name: str) -> dict:
    """A profile of the tests' configuration: `meshfit` with the shipped profile's plugins (meshfit preempts for its
    pods, `DefaultPreemption` off), any other name kube-scheduler's defaults."""
    if name != "meshfit":
        return {"schedulerName": name}
    return {"schedulerName": name, "plugins": shipped_meshfit_profile().get("plugins", {})}
