"""A loopback TCP proxy standing in for a Service with readiness-gated endpoints.

Backends are `host:port` HTTP servers; a checker thread probes each one's `GET /readyz` every
`interval` seconds, like the kubelet's readiness probe feeding the EndpointSlice.  A new connection
goes to a ready backend (the first one, as ready order); with none ready it is closed at once (what a
Service with no endpoints does).  Established connections are left alone (kube-proxy does not cut
them); when a backend dies they end with it.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Sequence


def _readyz(host: str, port: int, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (sink, source):  # shutdown wakes the other direction's recv; then free the descriptors
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class ReadinessProxy:
    """`ReadinessProxy([(host, port), ...]).start()`; `url` is the address to give clients."""

    def __init__(self, backends: Sequence[tuple[str, int]], interval: float = 0.25, probe_timeout: float = 1.0) -> None:
        self.backends = list(backends)
        self.interval, self.probe_timeout = interval, probe_timeout
        self.ready: list[tuple[str, int]] = []
        self.connections = {b: 0 for b in self.backends}
        self.refused = 0
        self.changes: list[tuple[float, list[tuple[str, int]]]] = []  # (monotonic time, ready backends)
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """http://127.0.0.1:<port>."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ReadinessProxy":
        """Probe once, then accept and probe in background threads."""
        self._probe()
        for target, name in ((self._accept_loop, "proxy-accept"), (self._probe_loop, "proxy-probe")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _probe(self) -> None:
        ready = [b for b in self.backends if _readyz(b[0], b[1], self.probe_timeout)]
        if ready != self.ready:
            self.ready = ready
            self.changes.append((time.monotonic(), list(ready)))

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._probe()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            ready = list(self.ready)
            if not ready:
                self.refused += 1
                client.close()
                continue
            backend = ready[0]
            try:
                upstream = socket.create_connection(backend, timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                self.refused += 1
                client.close()
                continue
            self.connections[backend] += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def stop(self) -> None:
        """Stop accepting and probing (established connections end with their peers)."""
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        for thread in self._threads:
            thread.join(2)
