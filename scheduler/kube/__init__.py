"""Kubernetes adapters: the list+watch cache, the binder and the rank-table ConfigMap publisher.

Only this package (and the CLI that wires it) imports the `kubernetes` client; the scheduler core
never does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

from scheduler.kube.cache import Backoff, KubeCache
from scheduler.kube.resources import DEFAULT_RESOURCES, WatchedResource

log = logging.getLogger("meshfit.kube")


def sync_once(state: Any, api_client: Any, resources: Iterable[WatchedResource] = DEFAULT_RESOURCES,
              **options: Any) -> KubeCache:
    """List everything once into `state` (no watching); returns the cache, ready for `start()`."""
    cache = KubeCache(state, api_client, resources, **options)
    cache.sync_once()
    return cache


def run_cache(state: Any, api_client: Any, stop_event: threading.Event | None = None,
              resources: Iterable[WatchedResource] = DEFAULT_RESOURCES, **options: Any) -> KubeCache:
    """Discover the served versions of drifting APIs, sync (retrying with backoff until it succeeds or `stop_event`
    is set), then watch in threads."""
    from scheduler.kube.discovery import discover

    cache = KubeCache(state, api_client, discover(api_client, resources), stop_event=stop_event, **options)
    backoff = Backoff()
    while not cache.stop_event.is_set():
        try:
            cache.sync_once()
            break
        except Exception as exc:  # noqa: BLE001 (API server unreachable, auth, decoding: retry)
            log.warning("initial list failed: %s", exc)
            cache.stop_event.wait(backoff.next())
    if cache.synced.is_set():
        cache.start()
    return cache


__all__ = ["DEFAULT_RESOURCES", "KubeCache", "WatchedResource", "run_cache", "sync_once"]
