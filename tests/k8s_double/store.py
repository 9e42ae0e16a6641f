"""The double's storage: objects per resource, one global resourceVersion, an event log, compaction.

Semantics follow the real API server where meshfit depends on them: every write bumps the
global resourceVersion and appends a watch event; list items carry no `kind`/`apiVersion`
(watch event objects do); after `compact()` a watch from an older resourceVersion is answered
410 Gone; metadata.uid / resourceVersion in a write act as preconditions (409 Conflict).
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Resource:
    """One API resource the double serves: group ("" = core), version, plural, kind, namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """`v1` or `group/version`."""
        return f"{self.group}/{self.version}" if self.group else self.version


CORE_RESOURCES = (
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("batch", "v1", "jobs", "Job"),
)
"""Built-in resources, always served."""

CRD_RESOURCES = (
    Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"),
    Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload"),
    Resource("kueue.x-k8s.io", "v1alpha1", "topologies", "Topology", namespaced=False),
    Resource("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False),
    Resource("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", namespaced=False),
    Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
)
"""Custom resources a test may install (all installed by default)."""


class ApiError(Exception):
    """An API failure answered as a v1 Status with `code` and `reason`."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        """The v1 Status body."""
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass
class WatchEvent:
    """One entry of the event log."""

    rv: int
    resource: Resource
    type: str
    obj: dict


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key); also what strategic merge does for maps."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Store:
    """Objects per resource, the global resourceVersion and the retained event log."""

    resources: dict[tuple[str, str, str], Resource] = field(default_factory=dict)
    objects: dict[Resource, dict[tuple[str, str], dict]] = field(default_factory=dict)
    events: list[WatchEvent] = field(default_factory=list)
    rv: int = 1000
    compacted_rv: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    _uids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def install(self, resource: Resource) -> None:
        """Serve `resource` (install its CRD)."""
        with self.changed:
            self.resources[(resource.group, resource.version, resource.plural)] = resource
            self.objects.setdefault(resource, {})

    def uninstall(self, group: str, version: str, plural: str) -> None:
        """Stop serving a resource (its CRD is deleted): requests for it get 404."""
        with self.changed:
            self.resources.pop((group, version, plural), None)

    def resource(self, group: str, version: str, plural: str) -> Resource:
        """The served resource, ApiError 404 if unknown (a missing CRD)."""
        found = self.resources.get((group, version, plural))
        if found is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural}.{group or 'core'})")
        return found

    def _record(self, resource: Resource, kind: str, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        full = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        self.events.append(WatchEvent(self.rv, resource, kind, copy.deepcopy(full)))
        self.changed.notify_all()
        return full

    def create(self, resource: Resource, obj: dict) -> dict:
        """Store a new object (409 AlreadyExists if present); returns it with uid and resourceVersion."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        namespace = (meta.get("namespace") or "default") if resource.namespaced else ""
        if resource.namespaced:
            meta["namespace"] = namespace
        key = (namespace, meta.get("name") or "")
        with self.changed:
            if key in self.objects[resource]:
                raise ApiError(409, "AlreadyExists", f'{resource.plural} "{key[1]}" already exists')
            meta.setdefault("uid", str(uuid.UUID(int=next(self._uids))))
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            obj.pop("apiVersion", None), obj.pop("kind", None)
            self.objects[resource][key] = obj
            return self._record(resource, "ADDED", obj)

    def get(self, resource: Resource, namespace: str, name: str) -> dict:
        """The stored object with kind/apiVersion; 404 if absent."""
        with self.changed:
            obj = self.objects[resource].get((namespace if resource.namespaced else "", name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            return {"apiVersion": resource.api_version, "kind": resource.kind, **copy.deepcopy(obj)}

    def _check_preconditions(self, resource: Resource, current: dict, meta: dict) -> None:
        name = current["metadata"]["name"]
        if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {meta['uid']}, "
                                            f"UID in object meta: {current['metadata']['uid']}")
        if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource.plural} "{name}": the object '
                                            "has been modified; please apply your changes to the latest version and try again")

    def update(self, resource: Resource, namespace: str, name: str, obj: dict | None = None,
               patch: dict | None = None) -> dict:
        """Replace (`obj`) or merge-patch (`patch`) an object; preconditions from the body's metadata."""
        with self.changed:
            key = (namespace if resource.namespaced else "", name)
            current = self.objects[resource].get(key)
            if current is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            body = patch if patch is not None else obj
            self._check_preconditions(resource, current, (body or {}).get("metadata") or {})
            if patch is not None:
                new = merge_patch(current, patch)
            else:
                new = copy.deepcopy(obj)
                new.pop("apiVersion", None), new.pop("kind", None)
            for keep in ("uid", "creationTimestamp", "namespace", "name"):
                if keep in current["metadata"]:
                    new.setdefault("metadata", {})[keep] = current["metadata"][keep]
            self.objects[resource][key] = new
            return self._record(resource, "MODIFIED", new)

    def delete(self, resource: Resource, namespace: str, name: str) -> dict:
        """Remove an object and emit DELETED; 404 if absent."""
        with self.changed:
            obj = self.objects[resource].pop((namespace if resource.namespaced else "", name), None)
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            return self._record(resource, "DELETED", obj)

    def list(self, resource: Resource, namespace: str | None) -> dict:
        """A `<Kind>List` at the current resourceVersion; items without kind/apiVersion, as the API returns."""
        with self.changed:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self.objects[resource].items())
                     if namespace is None or ns == namespace]
            return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def compact(self) -> None:
        """Drop the event log (etcd compaction): watches from any older resourceVersion get 410 Gone."""
        with self.changed:
            self.compacted_rv = self.rv
            self.events.clear()

    def events_after(self, resource: Resource, rv: int, namespace: str | None) -> list[WatchEvent]:
        """Retained events of `resource` newer than `rv` (caller holds `changed`)."""
        return [e for e in self.events if e.rv > rv and e.resource == resource
                and (namespace is None or e.obj["metadata"].get("namespace") == namespace)]
