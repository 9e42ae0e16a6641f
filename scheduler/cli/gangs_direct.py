"""`meshfit gangs` without the service: gang rows computed from the cluster itself, through the kubeconfig.

The rows have the keys of the service's `GET /gangs` (`gang`, `state`, `position`, `priority`, `pods`,
`gpus_per_pod`, `bound`, `reason`, `arrived_at`), read from what the API server holds:

- membership from the pods' labels / annotations and their owning objects (the gang sources the service
  uses); a pod whose `meshfit.io/*` keys are wrong (a typo) makes its gang `invalid`, with the reason;
- `bound`: members with a node; `pods`: the gang size, or the rank table's pod count for an elastic gang;
- `reserved`: nothing bound yet, but meshfit published the gang's rank table (`meshfit-<job>-ranks`) or
  nominated / annotated (`meshfit.io/reserved-node`) a member's node;
- `waiting`: none of that; the reason is kube-scheduler's last scheduling message on a member (which is
  meshfit's filter answer), and `position` is meshfit's queue order (priority, then arrival: the oldest
  member's creation time).  The service may still let a later gang backfill ahead of the head.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import msgspec
import urllib3

from scheduler.gangs.membership import identify
from scheduler.gangs.profile import INVALID_STATE, invalid_gang_key, invalid_reason, is_meshfit_pod
from scheduler.gangs.sources import api_group, metadata, pod_gpus, qualified_kind, split_kind
from scheduler.handoff.assignment import ANNOTATION_GANG
from scheduler.handoff.rank_table import RANK_TABLE_KEY
from scheduler.kube.resources import DEFAULT_RESOURCES, PODS, WatchedResource

CONFIGMAPS = WatchedResource("", "v1", "configmaps", "ConfigMap")
GANG_OBJECTS = tuple(r for r in DEFAULT_RESOURCES if r.sink == "object" and r.kind not in ("Topology", "HyperNode"))
"""The owning objects gang sources read (jobs, PodGroups, Workloads); topology objects are not needed."""
RESERVED_NODE = "meshfit.io/reserved-node"
FINISHED = ("Succeeded", "Failed")


@dataclass
class ClusterView:
    """What one read of the cluster gave: pods, meshfit's rank-table ConfigMaps, owning objects."""

    pods: list[dict] = field(default_factory=list)
    rank_tables: list[dict] = field(default_factory=list)
    objects: list[dict] = field(default_factory=list)


def load_api_client(kubeconfig: Path | None, context: str | None) -> tuple[Any, str]:
    """(ApiClient, the context's namespace) from a kubeconfig (default: $KUBECONFIG / ~/.kube/config), else the
    in-cluster config; ValueError with one line when neither works."""
    import kubernetes

    from scheduler.kube.kubeconfig import CLIENT_ERRORS, load_kubeconfig

    try:
        load_kubeconfig(kubeconfig, context)
        _, active = kubernetes.config.list_kube_config_contexts(str(kubeconfig) if kubeconfig else None)
        if context:
            contexts, _ = kubernetes.config.list_kube_config_contexts(str(kubeconfig) if kubeconfig else None)
            active = next((c for c in contexts if c.get("name") == context), active)
        namespace = str(((active or {}).get("context") or {}).get("namespace") or "default")
    except CLIENT_ERRORS as exc:  # load_kubeconfig's ValueError names the file already
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            reason = str(exc) if isinstance(exc, ValueError) else f"--kubeconfig {kubeconfig}: {exc}"
            raise ValueError(f"{reason}; or give --url of a running meshfit serve") from None
        namespace = _in_cluster_namespace()
    return kubernetes.client.ApiClient(), namespace


def _in_cluster_namespace() -> str:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip() or "default"
    except OSError:
        return "default"


def _path(resource: WatchedResource, namespace: str | None) -> str:
    if namespace is None:
        return resource.path
    prefix = "/api" if not resource.group else f"/apis/{resource.group}"
    return f"{prefix}/{resource.version}/namespaces/{namespace}/{resource.plural}"


def list_objects(api_client: Any, resource: WatchedResource, namespace: str | None,
                 query: Iterable[tuple[str, str]] = ()) -> list[dict]:
    """Every object of `resource` (in `namespace`, None = all), with kind / apiVersion; [] for a CRD not served."""
    from scheduler.kube.api import ApiStatusError, request_bytes

    items: list[dict] = []
    token = ""
    while True:
        params = [("limit", "500"), *query] + ([("continue", token)] if token else [])
        try:
            page = msgspec.json.decode(request_bytes(api_client, "GET", _path(resource, namespace), params,
                                                     timeout=(10, 60)))
        except ApiStatusError as exc:
            if exc.status in (403, 404) and resource.group:
                return []  # CRD not installed, or not readable by this user: its jobs are read from pod labels
            raise ValueError(f"cannot list {resource.name}: {exc}") from None
        except (OSError, urllib3.exceptions.HTTPError, msgspec.DecodeError) as exc:
            raise ValueError(f"cannot list {resource.name} from the API server: {exc}") from None
        for item in page.get("items") or []:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
            items.append(item)
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def read_cluster(api_client: Any, namespace: str | None) -> ClusterView:
    """Pods, meshfit's rank-table ConfigMaps and the gang-owning objects, in one namespace or all."""
    managed = [("labelSelector", "app.kubernetes.io/managed-by=meshfit")]
    tables = [cm for cm in list_objects(api_client, CONFIGMAPS, namespace, managed)
              if RANK_TABLE_KEY in (cm.get("data") or {})]
    objects = [obj for resource in GANG_OBJECTS for obj in list_objects(api_client, resource, namespace)]
    return ClusterView(list_objects(api_client, PODS, namespace), tables, objects)


def _lookup(objects: list[dict]):
    by_key: dict[tuple[str, str, str], dict] = {}
    by_plain: dict[tuple[str, str, str], dict] = {}
    for obj in objects:
        meta = metadata(obj)
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        by_key[(qualified_kind(api_group(obj.get("apiVersion")), str(obj.get("kind"))), ns, name)] = obj
        by_plain.setdefault((str(obj.get("kind")), ns, name), obj)

    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        """The listed object of `group/Kind` (exact) or plain `Kind` (any group), None when absent."""
        group, plain = split_kind(kind)
        return by_key.get((kind, namespace, name)) if group is not None else by_plain.get((plain, namespace, name))

    return lookup


def parse_time(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 timestamp (`2026-01-02T03:04:05Z`), None when absent or malformed."""
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class _Gang:
    """What the pods of one gang say, summed up."""

    key: str
    size: int = 0
    gpus_per_pod: int = 0
    priority: int = 0
    arrived_at: float | None = None
    seen: int = 0
    bound: int = 0
    reserved: bool = False
    error: str | None = None
    messages: list[tuple[float, str]] = field(default_factory=list)

    def add_pod(self, pod: dict) -> None:
        """Count one live member: its priority, creation time, node, nomination and scheduling message."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        self.seen += 1
        priority = spec.get("priority")
        if isinstance(priority, int) and not isinstance(priority, bool):
            self.priority = max(self.priority, priority)
        created = parse_time(metadata(pod).get("creationTimestamp"))
        if created is not None:
            self.arrived_at = created if self.arrived_at is None else min(self.arrived_at, created)
        if spec.get("nodeName"):
            self.bound += 1
        elif status.get("nominatedNodeName") or (metadata(pod).get("annotations") or {}).get(RESERVED_NODE):
            self.reserved = True
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and \
                    condition.get("message"):
                when = parse_time(condition.get("lastTransitionTime")) or 0.0
                self.messages.append((when, " ".join(str(condition["message"]).split())))


def _live(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED and not metadata(pod).get("deletionTimestamp")


def _collect(view: ClusterView, scheduler_name: str) -> dict[str, _Gang]:
    lookup = _lookup(view.objects)
    gangs: dict[str, _Gang] = {}
    for pod in view.pods:
        if not _live(pod) or not is_meshfit_pod(pod, {scheduler_name}):
            continue
        try:
            member = identify(pod, lookup)
        except ValueError as exc:  # JobSpecError, TopologyError: the gang cannot be placed as written
            key = invalid_gang_key(pod)
            gang = gangs.setdefault(key, _Gang(key))
            gang.error, gang.gpus_per_pod = gang.error or str(exc), gang.gpus_per_pod or pod_gpus(pod)
            gang.add_pod(pod)
            continue
        if member is None:
            continue
        gang = gangs.setdefault(member.gang_key, _Gang(member.gang_key))
        gang.size, gang.gpus_per_pod = max(gang.size, member.size), member.gpus_per_pod or pod_gpus(pod)
        gang.add_pod(pod)
    return gangs


def _table_sizes(rank_tables: list[dict]) -> dict[str, int]:
    """Gang key -> pods in its published rank table (an elastic gang's current size)."""
    sizes = {}
    for configmap in rank_tables:
        try:
            document = msgspec.json.decode((configmap.get("data") or {})[RANK_TABLE_KEY])
            sizes[str(document.get("gang") or (metadata(configmap).get("annotations") or {}).get(ANNOTATION_GANG))] = \
                len(document.get("pods") or [])
        except (msgspec.DecodeError, AttributeError, KeyError):
            continue
    return sizes


def _state(gang: _Gang, size: int, has_table: bool) -> tuple[str, str]:
    """(state, reason in plain words), as `GET /gangs` words them."""
    if gang.error:
        return INVALID_STATE, invalid_reason(gang.error)
    if size and gang.bound >= size:
        return "bound", "all members bound"
    if gang.bound:
        return "binding", f"{gang.bound} of {size} bound, the rest held for them"
    if has_table or gang.reserved:
        return "reserved", "reserved; members being scheduled onto their nodes"
    missing = f"{gang.seen} of {size} pods exist; " if gang.seen < size else ""
    latest = max(gang.messages)[1] if gang.messages else "not placed yet"
    return "waiting", missing + latest


def gang_rows(view: ClusterView, scheduler_name: str = "meshfit") -> list[dict]:
    """`GET /gangs`-shaped rows of the gangs in `view`: waiting gangs in queue order, then the others by name."""
    sizes = _table_sizes(view.rank_tables)
    rows = []
    for key, gang in _collect(view, scheduler_name).items():
        size = sizes.get(key) or gang.size or gang.seen
        state, reason = _state(gang, size, key in sizes)
        rows.append({"gang": key, "state": state, "position": None, "priority": gang.priority, "pods": size,
                     "gpus_per_pod": gang.gpus_per_pod, "bound": gang.bound, "reason": reason,
                     "arrived_at": gang.arrived_at})
    waiting = sorted((r for r in rows if r["state"] == "waiting"),
                     key=lambda r: (-r["priority"], r["arrived_at"] or 0.0, r["gang"]))
    for position, row in enumerate(waiting, 1):
        row["position"] = position
    return waiting + sorted((r for r in rows if r["state"] != "waiting"), key=lambda r: r["gang"])
