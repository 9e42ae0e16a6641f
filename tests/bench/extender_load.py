"""Load generator for the extender: a real `meshfit serve` subprocess, N asyncio + httpx clients, loopback.

`served(cluster_file)` starts the server on a free 127.0.0.1 port and waits for /healthz;
`run_load(url, bodies, clients=8, ...)` posts the bodies round-robin from `clients` concurrent
clients (closed loop, or paced at a total `rate`) until `max_requests` or `max_seconds`, and
returns per-request latencies in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

SERVE = "import sys; from scheduler.cli import main; sys.argv = ['meshfit', *sys.argv[1:]]; main()"


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served(cluster_file: Path, policy: str = "meshfit", ttl: float = 3600.0,
           startup_seconds: float = 120.0) -> Iterator[str]:
    """Run `meshfit serve --cluster FILE` in a subprocess; yields its base URL."""
    port = free_port()
    cmd = [sys.executable, "-c", SERVE, "serve", "--host", "127.0.0.1", "--port", str(port), "--grpc-port", "0",
           "--cluster", str(cluster_file), "--policy", policy, "--reservation-ttl", str(ttl)]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"meshfit serve exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("meshfit serve did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _client(client: httpx.AsyncClient, url: str, bodies: list[bytes], cursor: list[int],
                  max_requests: int, stop_at: float, latencies: list[float], replies: list[dict],
                  interval: float, phase: float) -> None:
    next_send = time.perf_counter() + phase
    while cursor[0] < max_requests and time.perf_counter() < stop_at:
        if interval:
            delay = next_send - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            next_send += interval
        body = bodies[cursor[0] % len(bodies)]
        cursor[0] += 1
        started = time.perf_counter()
        response = await client.post(url, content=body, headers={"Content-Type": "application/json"})
        latencies.append(time.perf_counter() - started)
        replies.append(response.json() if response.status_code == 200 else {"status": response.status_code})


async def _run(url: str, bodies: list[bytes], clients: int, max_requests: int, max_seconds: float,
               rate: float | None):
    latencies: list[float] = []
    replies: list[dict] = []
    cursor = [0]
    stop_at = time.perf_counter() + max_seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        interval = clients / rate if rate else 0.0
        await asyncio.gather(*(_client(client, url, bodies, cursor, max_requests, stop_at, latencies, replies,
                                       interval, interval * i / clients) for i in range(clients)))
    return latencies, replies


def run_load(url: str, bodies: list[bytes], clients: int = 8, max_requests: int = 2000,
             max_seconds: float = 30.0, rate: float | None = None) -> tuple[list[float], list[dict]]:
    """Load from `clients` concurrent clients; (latencies in seconds, decoded replies).

    Without `rate` each client sends its next request as soon as the last is answered (closed
    loop: measures saturation).  With `rate` (requests/s over all clients) each client sends on a
    fixed schedule, so latency is not inflated by the generator's own queueing.
    """
    return asyncio.run(_run(url, bodies, clients, max_requests, max_seconds, rate))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def filter_body(pod: dict, node_names: list[str]) -> bytes:
    """A nodeCacheCapable filter request."""
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names}, separators=(",", ":")).encode()
