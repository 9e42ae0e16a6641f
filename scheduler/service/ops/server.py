"""Running `meshfit serve`'s HTTP front: an exclusively bound socket, uvicorn, and a clean exit on SIGTERM.

The HTTP socket is bound here, before anything else starts, and without SO_REUSEPORT: a port
already in use is a one-line start-up error rather than two servers splitting the traffic.
uvicorn drains open requests on SIGTERM / SIGINT; unlike `uvicorn.run`, the signal is not raised
again afterwards, so the process ends with status 0 once the caller has stopped the rest.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from typing import Any, Iterator

import uvicorn

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class PortError(OSError):
    """A port that cannot be listened on (taken, not allowed, bad address); the text is one line."""


def check_port(flag: str, port: int, allow_zero: bool = True) -> str:
    """"" when `port` is a valid TCP port for `flag`, else the one-line reason."""
    low = 0 if allow_zero else 1
    if not low <= port <= 65535:
        return f"{flag} must be between {low} and 65535, got {port}"
    return ""


def bind_http_socket(host: str, port: int, what: str = "HTTP") -> socket.socket:
    """A listening TCP socket on host:port (port 0 = any free one); PortError with one line if it fails."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PortError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # SO_REUSEADDR only lets a restart reuse a port in TIME_WAIT; a live listener still refuses us.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PortError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def check_free(host: str, port: int, what: str) -> None:
    """PortError with one line unless host:port can be listened on now (checked before a server that would
    report a taken port with a multi-line log of its own)."""
    bind_http_socket(host, port, what).close()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, draining on SIGINT / SIGTERM and then returning normally (no re-raised signal)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Route the stop signals to `handle_exit` while serving; restore the previous handlers after."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop_signal(self) -> int | None:
        """The signal that stopped the server, None when none did."""
        return self._captured_signals[-1] if self._captured_signals else None


def serve_http(app: Any, sock: socket.socket, drain_seconds: float = 10.0, tls: Any = None) -> DrainingServer:
    """Serve `app` on the bound `sock` until a stop signal; returns the server once it has drained.

    With `tls` (a `scheduler.service.ops.tls.ServerTLS`) the socket serves HTTPS with its SSLContext, and each
    connection's verified client certificate reaches the app in `scope["state"]` (see `tls.peer_protocol_class`).
    """
    host, port = sock.getsockname()[:2]
    options: dict[str, Any] = {}
    if tls is not None:
        from scheduler.service.ops.tls import peer_protocol_class

        options = {"http": peer_protocol_class(), "ssl_context_factory": lambda _config, _default: tls.context}
    # log_config=None: uvicorn's loggers propagate to meshfit's handlers (see scheduler.service.ops.logs).
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            proxy_headers=False, timeout_graceful_shutdown=drain_seconds, **options)
    server = DrainingServer(config)
    server.run(sockets=[sock])
    return server
