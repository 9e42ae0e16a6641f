"""List + watch of Nodes, Pods and gang objects into a `ClusterState` (an informer without the models).

Per resource: a paginated list (items get their `kind`/`apiVersion` back, `managedFields`
dropped), then a watch from the list's resourceVersion with bookmarks; every event moves the
resourceVersion on.  A 410 Gone (HTTP status or an ERROR event) relists that resource and
applies only the difference, so nothing is lost and nothing is rebuilt needlessly.  Other
failures back off exponentially with jitter; a custom resource whose CRD is missing (404) is
skipped and looked for again later.  The first full list of everything goes to the state in
one `replace_all`, so a restarted service rebuilds its reservations from bound pods at once.
Payloads are decoded with msgspec into plain dicts; the `kubernetes` models are never built.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import msgspec

from scheduler.gangs.sources import qualified_kind
from scheduler.kube.api import ApiStatusError, iter_lines, open_request, request_bytes
from scheduler.kube.resources import DEFAULT_RESOURCES, WatchedResource

log = logging.getLogger("meshfit.kube")


class ListMeta(msgspec.Struct):
    """List metadata: the collection's resourceVersion and the pagination token."""

    resourceVersion: str = ""  # noqa: N815 (wire name)
    continue_: str = msgspec.field(default="", name="continue")


class ObjectList(msgspec.Struct):
    """A `<Kind>List`; items stay plain dicts (what ClusterState takes)."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[dict] = msgspec.field(default_factory=list)


class WatchEvent(msgspec.Struct):
    """One line of a watch stream."""

    type: str
    object: dict


_list_decoder = msgspec.json.Decoder(ObjectList)
_event_decoder = msgspec.json.Decoder(WatchEvent)


class ResourceExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): relist."""


@dataclass
class Backoff:
    """Exponential backoff with full jitter, capped; `reset()` after a success."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    _current: float = 0.0

    def next(self) -> float:
        """Seconds to wait before the next attempt."""
        self._current = self.initial if self._current == 0 else min(self.maximum, self._current * self.factor)
        return random.uniform(self._current / 2, self._current)

    def reset(self) -> None:
        """Start over from `initial`."""
        self._current = 0.0


@dataclass
class ResourceView:
    """What the cache knows of one resource: its objects by (namespace, name) and resourceVersion."""

    resource: WatchedResource
    resource_version: str = ""
    available: bool = True
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)


def object_key(obj: dict) -> tuple[str, str]:
    """(namespace, name) of an object ("" namespace for cluster-scoped ones)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _normalise(obj: dict, resource: WatchedResource) -> dict:
    """Give a list item its kind/apiVersion back and drop managedFields (memory, never read)."""
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class KubeCache:
    """Feeds a ClusterState from the API server; see the module docstring."""

    def __init__(self, state: Any, api_client: Any, resources: Iterable[WatchedResource] = DEFAULT_RESOURCES, *,
                 watch_seconds: int = 300, page_size: int = 500, missing_retry_seconds: float = 60.0,
                 stop_event: threading.Event | None = None) -> None:
        self.state, self.api_client = state, api_client
        self.views = {r: ResourceView(r) for r in resources}
        self.watch_seconds, self.page_size, self.missing_retry_seconds = watch_seconds, page_size, missing_retry_seconds
        self.stop_event = stop_event or threading.Event()
        self.synced = threading.Event()
        self.threads: list[threading.Thread] = []
        self.relists: dict[str, int] = {r.name: 0 for r in self.views}
        self._responses: dict[str, Any] = {}
        self.failing: dict[str, float] = {}
        """Resource name -> monotonic time its watch started failing (cleared once a watch opens again)."""

    # ----- listing -------------------------------------------------------------------------------
    def list_resource(self, resource: WatchedResource) -> tuple[list[dict], str] | None:
        """All objects and the collection resourceVersion; None when the resource is not served (404)."""
        items: list[dict] = []
        token = ""
        while True:
            query = [("limit", self.page_size)] + ([("continue", token)] if token else [])
            try:
                page = _list_decoder.decode(request_bytes(self.api_client, "GET", resource.path, query,
                                                          timeout=(10, 60)))
            except ApiStatusError as exc:
                if exc.status == 404 and resource.group:
                    return None
                if exc.status == 410 and token:
                    items, token = [], ""  # the continue token expired mid-list: start over
                    continue
                raise
            items.extend(_normalise(item, resource) for item in page.items)
            token = page.metadata.continue_
            if not token:
                return items, page.metadata.resourceVersion

    def sync_once(self) -> None:
        """List every resource and hand the whole cluster to `state.replace_all` in one call."""
        for view in self.views.values():
            listed = self.list_resource(view.resource)
            view.available = listed is not None
            items, view.resource_version = listed if listed is not None else ([], "")
            view.objects = {object_key(o): o for o in items}
            if listed is None:
                log.info("resource %s is not served (CRD not installed); skipped", view.resource.name)
        by_sink: dict[str, list[dict]] = {"node": [], "pod": [], "object": []}
        for view in self.views.values():
            by_sink[view.resource.sink].extend(view.objects.values())
        self.state.replace_all(by_sink["node"], by_sink["pod"], by_sink["object"])
        self.synced.set()

    def relist(self, resource: WatchedResource) -> None:
        """List one resource again and apply only what changed (after 410 Gone, or a CRD appearing)."""
        view = self.views[resource]
        listed = self.list_resource(resource)
        self.relists[resource.name] += 1
        view.available = listed is not None
        items, view.resource_version = listed if listed is not None else ([], "")
        fresh = {object_key(o): o for o in items}
        for key, obj in view.objects.items():
            if key not in fresh:
                self._apply(resource, "DELETED", obj)
        for key, obj in fresh.items():
            old = view.objects.get(key)
            if old is None or (old.get("metadata") or {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._apply(resource, "MODIFIED", obj)
        view.objects = fresh

    # ----- watching ------------------------------------------------------------------------------
    def _apply(self, resource: WatchedResource, kind: str, obj: dict) -> None:
        namespace, name = object_key(obj)
        if kind == "DELETED":
            if resource.sink == "node":
                self.state.delete_node(name)
            elif resource.sink == "pod":
                self.state.delete_pod(namespace or "default", name)
            else:
                self.state.delete_object(qualified_kind(resource.group, resource.kind), namespace or "default", name)
            return
        if resource.sink == "node":
            self.state.upsert_node(obj)
        elif resource.sink == "pod":
            self.state.upsert_pod(obj)
        else:
            self.state.upsert_object(obj)

    def _handle_event(self, view: ResourceView, event: WatchEvent) -> None:
        obj = event.object
        if event.type == "ERROR":
            code = obj.get("code") or 0
            if code == 410:
                raise ResourceExpired(str(obj.get("message") or "410 Gone"))
            raise ApiStatusError(int(code), str(obj.get("reason") or "Error"), str(obj.get("message") or ""))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if event.type != "BOOKMARK":
            _normalise(obj, view.resource)
            key = object_key(obj)
            if event.type == "DELETED":
                view.objects.pop(key, None)
            else:
                view.objects[key] = obj
            self._apply(view.resource, event.type, obj)
        if rv:
            view.resource_version = rv

    def watch_once(self, resource: WatchedResource) -> int:
        """One watch request from the current resourceVersion until the server ends it; returns events seen."""
        view = self.views[resource]
        query = [("watch", "true"), ("resourceVersion", view.resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", self.watch_seconds)]
        try:
            response = open_request(self.api_client, "GET", resource.path, query,
                                    timeout=(10, self.watch_seconds + 30))
        except ApiStatusError as exc:
            if exc.status == 410:
                raise ResourceExpired(exc.message) from None
            raise
        self._responses[resource.name] = response
        self._health(resource, failing=False)
        seen = 0
        try:
            for line in iter_lines(response):
                if self.stop_event.is_set():
                    break
                self._handle_event(view, _event_decoder.decode(line))
                seen += 1
        finally:
            self._responses.pop(resource.name, None)
            response.release_conn()
        return seen

    def watch_loop(self, resource: WatchedResource) -> None:
        """Watch `resource` until stopped: relist on 410, back off on errors, re-probe missing CRDs."""
        backoff = Backoff()
        while not self.stop_event.is_set():
            try:
                if not self.views[resource].available:
                    if self.stop_event.wait(self.missing_retry_seconds):
                        return
                    self.relist(resource)
                    continue
                self.watch_once(resource)
                backoff.reset()
            except ResourceExpired as exc:
                log.info("watch of %s expired (%s); relisting", resource.name, exc)
                self._relist_or_wait(resource, backoff)
            except Exception as exc:  # noqa: BLE001 (any transport/decoding failure: back off, retry)
                if self.stop_event.is_set():
                    return
                self._health(resource, failing=True)
                log.warning("watch of %s failed: %s", resource.name, exc)
                self.stop_event.wait(backoff.next())

    def _health(self, resource: WatchedResource, failing: bool) -> None:
        """Track failing watches and tell the state since when its view may be stale
        (`cache_failing_since`, read by `/readyz`)."""
        if failing:
            self.failing.setdefault(resource.name, time.monotonic())
        else:
            self.failing.pop(resource.name, None)
        self.state.cache_failing_since = min(self.failing.values(), default=None)

    def _relist_or_wait(self, resource: WatchedResource, backoff: Backoff) -> None:
        try:
            self.relist(resource)
        except Exception as exc:  # noqa: BLE001
            log.warning("relist of %s failed: %s", resource.name, exc)
            self.stop_event.wait(backoff.next())

    # ----- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "KubeCache":
        """Start one watch thread per resource (after `sync_once`)."""
        for resource in self.views:
            thread = threading.Thread(target=self.watch_loop, args=(resource,), name=f"watch-{resource.name}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching: set the stop event, close open streams, join the threads."""
        self.stop_event.set()
        for response in list(self._responses.values()):
            try:
                response.shutdown() if hasattr(response, "shutdown") else response.close()
            except Exception:  # noqa: BLE001 (already closed)
                pass
        for thread in self.threads:
            thread.join(timeout)
