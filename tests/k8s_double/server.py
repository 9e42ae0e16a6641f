"""HTTP front of the double: the real API paths, verbs, status codes and chunked watch streams."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s_double.store import CORE_RESOURCES, CRD_RESOURCES, ApiError, Resource, Store

MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def parse_path(path: str) -> tuple[str, str, str, str | None, str | None, str | None]:
    """(group, version, plural, namespace, name, subresource) of an API path; ApiError 404 otherwise."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    return group, version, plural, namespace, name, sub


class Handler(BaseHTTPRequestHandler):
    """One request against `self.server.double`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        """Silence the default stderr access log."""

    def setup(self) -> None:
        """Register the connection so that `ApiServerDouble.stop` can cut it like a dying server would."""
        super().setup()
        self.double.connections.add(self.connection)

    def finish(self) -> None:
        """Forget the connection."""
        self.double.connections.discard(self.connection)
        super().finish()

    def parse_request(self) -> bool:
        """Drop a request that arrives on a kept-alive connection after the double stopped (no reply)."""
        if self.double.stopping.is_set():
            self.close_connection = True
            return False
        return super().parse_request()

    @property
    def double(self) -> "ApiServerDouble":
        """The double this server fronts."""
        return self.server.double  # type: ignore[attr-defined]

    def _send_json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(400, "BadRequest", "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be an object")
        return body

    def _dispatch(self, verb: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.double.requests.append((verb, url.path, query))
        try:
            try:
                self.double.maybe_fail(verb, url.path)
            except ApiError:
                self._drain_body()  # keep-alive: an unread body would be parsed as the next request
                raise
            group, version, plural, namespace, name, sub = parse_path(url.path)
            resource = self.double.store.resource(group, version, plural)
            if resource.namespaced and name is not None and namespace is None:
                raise ApiError(404, "NotFound", f"{plural} must be addressed inside a namespace")
            handler = getattr(self, f"_{verb.lower()}")
            handler(resource, namespace, name, sub, query)
        except ApiError as exc:
            self._send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _drain_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        """Get, list or watch."""
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        """Create, or the pods/binding subresource."""
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        """Replace."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        """Merge / strategic-merge patch."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        """Delete."""
        self._dispatch("DELETE")

    def _get(self, resource: Resource, namespace, name, sub, query) -> None:
        if name is not None:
            self._send_json(200, self.double.store.get(resource, namespace or "", name))
        elif query.get("watch") in ("true", "1"):
            self._watch(resource, namespace, query)
        else:
            self._send_json(200, self.double.store.list(resource, namespace))

    def _post(self, resource: Resource, namespace, name, sub, query) -> None:
        body = self._body()
        if resource.plural == "pods" and sub == "binding":
            self._send_json(201, self.double.bind(namespace or "default", name, body))
            return
        if name is not None:
            raise ApiError(405, "MethodNotAllowed", "POST goes to the collection")
        if resource.namespaced:
            body.setdefault("metadata", {})["namespace"] = namespace or body.get("metadata", {}).get("namespace")
        self._send_json(201, self.double.store.create(resource, body))

    def _put(self, resource: Resource, namespace, name, sub, query) -> None:
        self._send_json(200, self.double.store.update(resource, namespace or "", name, obj=self._body()))

    def _patch(self, resource: Resource, namespace, name, sub, query) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type not in MERGE_PATCH_TYPES:
            raise ApiError(415, "UnsupportedMediaType", f"the double supports {MERGE_PATCH_TYPES}, not {content_type!r}")
        self._send_json(200, self.double.store.update(resource, namespace or "", name, patch=self._body()))

    def _delete(self, resource: Resource, namespace, name, sub, query) -> None:
        self._send_json(200, self.double.store.delete(resource, namespace or "", name))

    # ----- watch ---------------------------------------------------------------------------------
    def _chunk(self, event: dict) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, resource: Resource, namespace: str | None, query: dict) -> None:
        store, double = self.double.store, self.double
        timeout = float(query.get("timeoutSeconds") or double.default_watch_seconds)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        raw_rv = query.get("resourceVersion") or "0"
        rv = int(raw_rv) if raw_rv.isdigit() else 0
        with store.changed:
            expired = rv != 0 and rv < store.compacted_rv
            if expired and double.gone_as_http:
                raise ApiError(410, "Expired", f"too old resource version: {rv} ({store.compacted_rv})")
            initial = [] if rv else [{"type": "ADDED", "object": {"apiVersion": resource.api_version,
                                                                  "kind": resource.kind, **o}}
                                     for o in store.list(resource, namespace)["items"]]
            rv = rv or store.rv
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if expired:
            gone = ApiError(410, "Expired", f"too old resource version: {rv} ({store.compacted_rv})")
            self._chunk({"type": "ERROR", "object": gone.status()})
        else:
            for event in initial:
                self._chunk(event)
            self._stream(resource, namespace, rv, time.monotonic() + timeout, bookmarks)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, resource: Resource, namespace: str | None, rv: int, deadline: float, bookmarks: bool) -> None:
        store, double = self.double.store, self.double
        while not double.stopping.is_set():
            with store.changed:
                if rv < store.compacted_rv:
                    return  # the history this watch was reading is gone: close, the client re-watches
                events = [] if double.hold_watches else store.events_after(resource, rv, namespace)
                if not events:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    store.changed.wait(min(remaining, 0.05))
                    continue
            for event in events:
                self._chunk({"type": event.type, "object": event.obj})
                rv = event.rv
        if bookmarks and double.send_bookmarks:
            self._chunk({"type": "BOOKMARK", "object": {"apiVersion": resource.api_version, "kind": resource.kind,
                                                        "metadata": {"resourceVersion": str(store.rv)}}})


class DoubleHTTPServer(ThreadingHTTPServer):
    """The double's HTTP server: a client that hangs up (a reset or a closed connection, as kubernetes clients do
    when a test ends, a watch is cancelled or `stop` cuts a kept-alive connection) is a normal end of a
    connection, as for a real API server; socketserver would print it as a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a client that went away; anything else is reported as socketserver does."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError) or (isinstance(error, OSError) and self.double.stopping.is_set()):
            return
        super().handle_error(request, client_address)


class ApiServerDouble:
    """An in-memory Kubernetes API server on loopback for the real `kubernetes` ApiClient to talk to."""

    def __init__(self, crds: tuple[Resource, ...] = CRD_RESOURCES) -> None:
        self.store = Store()
        for resource in (*CORE_RESOURCES, *crds):
            self.store.install(resource)
        self.requests: list[tuple[str, str, dict]] = []
        self.failures: list[tuple[str, str, int]] = []
        self.stopping = threading.Event()
        self.connections: set[socket.socket] = set()
        """Open client connections (HTTP/1.1 keep-alive): `stop` shuts them so no request is served after it."""
        self.gone_as_http = False
        """Answer an expired watch with HTTP 410 instead of a 200 stream holding an ERROR event."""
        self.send_bookmarks = True
        self.hold_watches = False
        """Deliver no watch events (a stalled watcher): with `store.compact()` this forces 410 Gone."""
        self.default_watch_seconds = 2.0
        self._server = DoubleHTTPServer(("127.0.0.1", 0), Handler)
        self._server.double = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="k8s-double", daemon=True)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "ApiServerDouble":
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close watch streams and stop serving."""
        self.stopping.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by its handler
                pass

    def fail_next(self, verb: str, path_part: str, code: int) -> None:
        """Answer the next `verb` request whose path contains `path_part` with `code`."""
        self.failures.append((verb, path_part, code))

    def maybe_fail(self, verb: str, path: str) -> None:
        """Raise a queued injected failure for this request, if any."""
        for i, (want_verb, part, code) in enumerate(self.failures):
            if want_verb == verb and part in path:
                del self.failures[i]
                raise ApiError(code, "InternalError" if code >= 500 else "Injected", f"injected failure {code}")

    def resource_for(self, obj: dict) -> Resource:
        """The served resource of an object by its apiVersion and kind."""
        api_version = obj["apiVersion"]
        group, _, version = api_version.rpartition("/")
        for (g, v, _), resource in self.store.resources.items():
            if (g, v) == (group, version) and resource.kind == obj["kind"]:
                return resource
        raise KeyError(f"{obj['kind']} {api_version} is not served")

    def create(self, obj: dict) -> dict:
        """Create an object directly (as a controller would)."""
        return self.store.create(self.resource_for(obj), obj)

    def bind(self, namespace: str, name: str, body: dict) -> dict:
        """The pods/binding subresource: set spec.nodeName once, copying the Binding's annotations onto the pod
        in the same update (as the API server's `setPodHostAndAnnotations` does); 409 if already bound or
        the uid differs."""
        pods = self.resource_for({"apiVersion": "v1", "kind": "Pod"})
        target = (body.get("target") or {}).get("name")
        if not target:
            raise ApiError(400, "BadRequest", "Binding.target.name is required")
        with self.store.changed:
            pod = self.store.get(pods, namespace, name)
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                                                f'pod {name} is already assigned to node "{node}"')
            uid = (body.get("metadata") or {}).get("uid")
            meta = {"uid": uid} if uid else {}
            annotations = (body.get("metadata") or {}).get("annotations")
            if annotations:
                meta["annotations"] = dict(annotations)
            self.store.update(pods, namespace, name, patch={"metadata": meta, "spec": {"nodeName": target}})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
