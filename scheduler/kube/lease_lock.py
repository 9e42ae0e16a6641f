"""The Lease lock of meshfit's leader election (`scheduler.kube.leader`): request timeouts, `leaseTransitions` counted as
client-go counts them, optimistic concurrency on every write, renew times for the watchdog, and release on a graceful
shutdown."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger("meshfit.leader")


def lease_lock_class():
    """`MeshfitLeaseLock`: the official client's `LeaseLock` made safe for a process that must never act without the
    lease (imported late: the client's leader-election package is loaded only with --leader-elect)."""
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class MeshfitLeaseLock(LeaseLock):
        """The client's LeaseLock on our API client, with timeouts, leaseTransitions, renew times and release."""

        def __init__(self, api_client: Any, name: str, namespace: str, identity: str, request_timeout: float) -> None:
            from kubernetes import client

            super().__init__(name, namespace, identity)
            self.api_instance = client.CoordinationV1Api(api_client)
            self.request_timeout = request_timeout
            self.renewed_at: float | None = None  # monotonic time our last successful write as holder was sent
            self.holder = ""  # holder seen in the last read or write
            self.released = False
            self._write = threading.Lock()

        def _timeout(self) -> tuple[float, float]:
            return (min(self.request_timeout, 5.0), self.request_timeout)

        def get(self, name, namespace):
            if self.released:  # shut down: end the election thread quietly, never touch the Lease again
                raise Halted()
            try:
                lease = self.api_instance.read_namespaced_lease(name, namespace, _request_timeout=self._timeout())
            except Exception as exc:  # noqa: BLE001 - ApiException (404: create it) or transport: retried
                return False, exc if hasattr(exc, "body") and hasattr(exc, "reason") else _Failure(exc)
            self.lease_reference = lease
            self.holder = (lease.spec.holder_identity if lease.spec else None) or ""
            return True, self.get_lock_object(lease)

        def create(self, name, namespace, election_record):
            from kubernetes import client

            with self._write:
                if self.released:
                    return False
                spec = self.get_lease_spec(election_record)
                spec.lease_transitions = 0
                sent = time.monotonic()
                try:
                    self.lease_reference = self.api_instance.create_namespaced_lease(
                        namespace, client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec),
                        _request_timeout=self._timeout())
                except Exception as exc:  # noqa: BLE001 - 409 (another replica created it) or transport
                    log.debug("creating Lease %s/%s failed: %s", namespace, name, _short(exc))
                    return False
                self._wrote(sent, election_record.holder_identity)
                return True

        def update(self, name, namespace, updated_record):
            with self._write:
                if self.released or self.lease_reference is None:
                    return False
                lease = self.lease_reference
                before = (lease.spec.holder_identity if lease.spec else None) or ""
                transitions = (lease.spec.lease_transitions if lease.spec else None) or 0
                lease.spec = self.get_lease_spec(updated_record, lease.spec)
                if updated_record.holder_identity != before:
                    lease.spec.lease_transitions = transitions + 1
                sent = time.monotonic()
                try:  # a replace carries metadata.resourceVersion: 409 Conflict if anyone wrote since our read
                    self.lease_reference = self.api_instance.replace_namespaced_lease(
                        name=name, namespace=namespace, body=lease, _request_timeout=self._timeout())
                except Exception as exc:  # noqa: BLE001
                    log.debug("updating Lease %s/%s failed: %s", namespace, name, _short(exc))
                    self.lease_reference = None  # stale resourceVersion: read again before the next write
                    return False
                self._wrote(sent, updated_record.holder_identity)
                return True

        def _wrote(self, sent: float, holder: str) -> None:
            self.holder = holder or ""
            if holder == self.identity:
                self.renewed_at = sent

        def release(self) -> bool:
            """Give the lease up if we hold it (holder cleared, duration 1 s); no write after this one."""
            from kubernetes import client

            with self._write:
                self.released = True
                try:
                    lease = self.api_instance.read_namespaced_lease(self.name, self.namespace,
                                                                    _request_timeout=self._timeout())
                    if lease.spec is None or lease.spec.holder_identity != self.identity:
                        return False
                    now = datetime.now(timezone.utc)
                    lease.spec = client.V1LeaseSpec(holder_identity=None, lease_duration_seconds=1, acquire_time=now,
                                                    renew_time=now, lease_transitions=lease.spec.lease_transitions)
                    self.api_instance.replace_namespaced_lease(self.name, self.namespace, lease,
                                                               _request_timeout=self._timeout())
                    return True
                except Exception as exc:  # noqa: BLE001 - best effort: the lease then simply expires
                    log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, _short(exc))
                    return False

    return MeshfitLeaseLock


class Halted(Exception):
    """Raised inside the election loop once the lock is released: ends the election thread."""


class _Failure:
    """A transport failure shaped as the client's election loop expects (`.body`, `.reason`): retried."""

    body = None

    def __init__(self, exc: BaseException) -> None:
        self.reason = _short(exc)


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    status = getattr(exc, "status", None)
    if status:
        return f"{status} {reason or ''}".strip()
    return " ".join(str(exc).split())[:200]
