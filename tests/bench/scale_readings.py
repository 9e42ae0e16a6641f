"""What the scale bench reads off a run: API writes, bind rates, pods bound, over-commit, meshfit's own timings."""

from __future__ import annotations

import json
import statistics
import ssl
import sys
import urllib.request
from pathlib import Path

from kubernetes.client import CoreV1Api
from prometheus_client.parser import text_string_to_metric_families

from tests.realk8s.controlplane import ControlPlane

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE", "DELETECOLLECTION")


def api_writes(plane: ControlPlane) -> dict[str, float]:
    """`verb resource[/subresource]` -> requests so far, writes only, from the API server's /metrics."""
    request = urllib.request.Request(f"{plane.server}/metrics", headers={"Authorization": f"Bearer {plane.admin_token}"})
    with urllib.request.urlopen(request, context=plane.ssl_context(), timeout=30) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith("_total") or labels.get("verb") not in WRITE_VERBS:
                continue
            what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            key = f"{labels['verb']} {what}"
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    """Per-key increase."""
    return {k: int(v - before.get(k, 0.0)) for k, v in sorted(after.items()) if v - before.get(k, 0.0) > 0}


def rate(bound_at) -> dict:
    """Pods/s between the first and last bind, and to 90% of the pods bound."""
    times = sorted(bound_at)
    if len(times) < 2:
        return {"pods_per_second": None, "pods_per_second_to_90pct": None, "seconds": 0.0}
    span, k = times[-1] - times[0], int(0.9 * (len(times) - 1))
    span90 = times[k] - times[0]
    return {"seconds": round(span, 2), "pods_per_second": round((len(times) - 1) / span, 1) if span else None,
            "pods_per_second_to_90pct": round(k / span90, 1) if span90 else None}


def pod_kind(name: str) -> str:
    """The bench's kind of a pod, from its name: `cpu`, `single` (one GPU, no gang) or `member`."""
    return name.split("-", 1)[0] if name.startswith(("cpu-", "single-")) else "member"


def tail_by_kind(bound_at: dict[str, float]) -> dict:
    """Where the last 10% of binds went: seconds from the first bind to the 90% mark, and per pod kind the binds
    after it and the last bind's second."""
    times = sorted(bound_at.values())
    if len(times) < 2:
        return {}
    start, mark = times[0], times[int(0.9 * (len(times) - 1))]
    after: dict[str, int] = {}
    last: dict[str, float] = {}
    for name, at in bound_at.items():
        kind = pod_kind(name)
        last[kind] = max(last.get(kind, 0.0), round(at - start, 1))
        if at > mark:
            after[kind] = after.get(kind, 0) + 1
    return {"seconds_to_90pct": round(mark - start, 1), "binds_after_90pct": after, "last_bind_second": last}


def count_bound(core: CoreV1Api, namespace: str) -> int:
    """Pods of `namespace` bound to a node, from a paginated list (500 a page)."""
    bound, token = 0, None
    while True:
        page = core.list_namespaced_pod(namespace, limit=500, _continue=token)
        bound += sum(1 for p in page.items if p.spec.node_name)
        token = page.metadata._continue
        if not token:
            return bound


def waiting_reason(core: CoreV1Api, namespace: str, prefix: str) -> str:
    """The PodScheduled message of the first pending pod named `prefix`* ("" when none is pending)."""
    for pod in core.list_namespaced_pod(namespace, field_selector="spec.nodeName=").items:
        if pod.metadata.name.startswith(prefix):
            condition = next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)
            return (condition.message or "")[:300] if condition else "no PodScheduled condition"
    return ""


def nodes_total(core: CoreV1Api) -> int:
    """How many Nodes exist (paginated list)."""
    total, token = 0, None
    while True:
        page = core.list_node(limit=500, _continue=token)
        total += len(page.items)
        token = page.metadata._continue
        if not token:
            return total


def overcommitted(core: CoreV1Api) -> dict[str, int]:
    """Resource -> nodes whose bound, unfinished pods request more of it than the node's allocatable."""
    from tests.realk8s.overcommit import overcommitted as over, raw_list

    counts: dict[str, int] = {}
    found = over(raw_list(core, "pods"), raw_list(core, "nodes"))
    for node, resources in found.items():
        for resource in resources:
            counts[resource] = counts.get(resource, 0) + 1
    for node, resources in list(found.items())[:3]:  # the story of a few, for whoever reads the run
        print(f"# over-committed {node}: {resources}", file=sys.stderr)
    return counts


def reserved_times(log: Path) -> dict[str, float]:
    """Gang name -> wall-clock time of its last "reserved" decision in meshfit's JSON log."""
    from datetime import datetime

    times: dict[str, float] = {}
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("decision") == "reserved" and "gang" in record:
            times[record["gang"].split("/", 1)[1]] = datetime.fromisoformat(
                record["time"].replace("Z", "+00:00")).timestamp()
    return times


def meshfit_histograms(url: str) -> dict:
    """meshfit's extender verbs and own-Binding latency (count and mean ms), its direct binder's event counts and its
    process's CPU seconds (`cpu_seconds`: on a small machine it competes with kube-scheduler for the same cores)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict = {}
    for family in text_string_to_metric_families(text):
        if family.name == "process_cpu_seconds":
            found["cpu_seconds"] = round(family.samples[0].value, 1)
            continue
        if family.name == "meshfit_direct_binding_events":
            found["direct_binding_events"] = {s.labels["event"]: int(s.value) for s in family.samples
                                              if s.name.endswith("_total")}
            continue
        if family.name not in ("meshfit_request_seconds", "meshfit_binding_seconds"):
            continue
        sums: dict = {}
        for sample in family.samples:
            key = sample.labels.get("verb") or sample.labels.get("by")
            if sample.name.endswith("_count") or sample.name.endswith("_sum"):
                sums.setdefault(key, {})[sample.name.rsplit("_", 1)[1]] = sample.value
        for key, values in sums.items():
            if values.get("count"):
                found[f"{family.name}[{key}]"] = {"count": int(values["count"]),
                                                  "mean_ms": round(1000 * values["sum"] / values["count"], 1)}
    return found


def scheduler_breakdown(port: int) -> dict:
    """kube-scheduler's own account of its cycles (its /metrics on `port`, allowed without authorization): attempts and
    mean ms by result, mean ms per framework extension point of unschedulable attempts' phases, and its process's CPU
    seconds (`cpu_seconds`)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=30, context=context) as response:
        text = response.read().decode()
    found: dict = {"attempts": {}, "extension_points": {}}
    for family in text_string_to_metric_families(text):
        if family.name == "process_cpu_seconds":
            found["cpu_seconds"] = round(family.samples[0].value, 1)
            continue
        if family.name == "scheduler_scheduling_attempt_duration_seconds":
            into, label = found["attempts"], "result"
        elif family.name == "scheduler_framework_extension_point_duration_seconds":
            into, label = found["extension_points"], "extension_point"
        else:
            continue
        sums: dict = {}
        for sample in family.samples:
            key = f"{sample.labels.get(label)}/{sample.labels.get('status', sample.labels.get('profile', ''))}"
            if sample.name.endswith(("_count", "_sum")):
                part = sums.setdefault(key, {})
                suffix = sample.name.rsplit("_", 1)[1]
                part[suffix] = part.get(suffix, 0.0) + sample.value
        for key, values in sums.items():
            if values.get("count"):
                into[key] = {"count": int(values["count"]), "mean_ms": round(1000 * values["sum"] / values["count"], 2),
                             "total_s": round(values["sum"], 1)}
    return found


def p99_by_size(timed: list[tuple[float, int, str]]) -> dict[str, dict]:
    """Reserved -> bound seconds by gang size band (1-8, 9-32, 33+ pods): gangs, p50 and p99 of each band."""
    bands: dict[str, list[float]] = {}
    for seconds, pods, _ in timed:
        band = "1-8" if pods <= 8 else "9-32" if pods <= 32 else "33+"
        bands.setdefault(band, []).append(seconds)
    found = {}
    for band, values in sorted(bands.items()):
        values.sort()
        found[band] = {"gangs": len(values), "p50": round(statistics.median(values), 2),
                       "p99": round(values[int(round(0.99 * (len(values) - 1)))], 2)}
    return found
