"""`BindingWorkers`: where the direct binder's API writes run -- Bindings and nominations on worker pools of their own,
or queued for `run_pending` in synchronous mode (tests)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

log = logging.getLogger("meshfit.bind")

NOMINATION_WORKERS = 32
"""Nominations are written on workers of their own: never queued behind Bindings (they gate them)."""


class BindingWorkers:
    """The Binding and nomination worker pools (none in synchronous mode: jobs wait for `run_pending`)."""

    def __init__(self, binding_workers: int, synchronous: bool = False) -> None:
        self.synchronous = synchronous
        self._bindings = None if synchronous else ThreadPoolExecutor(binding_workers,
                                                                     thread_name_prefix="meshfit-bind")
        self._nominations = None if synchronous else ThreadPoolExecutor(NOMINATION_WORKERS,
                                                                        thread_name_prefix="meshfit-nominate")
        self._pending: list[Callable[[], None]] = []

    def bind(self, job: Callable[[], None]) -> None:
        """Run a Binding job on a Binding worker."""
        self._submit(job, self._bindings)

    def nominate(self, job: Callable[[], None]) -> None:
        """Run a nomination job on a nomination worker."""
        self._submit(job, self._nominations)

    def _submit(self, job: Callable[[], None], pool: ThreadPoolExecutor | None) -> None:
        if pool is None:
            self._pending.append(job)
            return
        try:
            pool.submit(job)
        except RuntimeError:  # the pools are shut down (the process is exiting): nothing more is written
            log.debug("not submitted: the binder is shutting down")

    def run_pending(self) -> None:
        """Synchronous mode (tests): run the writes queued so far, and those they queue, outside the state lock."""
        while self._pending:
            jobs, self._pending = list(self._pending), []
            for job in jobs:
                job()

    def shutdown(self) -> None:
        """Wait for the jobs already started, then stop the pools."""
        if self._bindings is not None:
            self._nominations.shutdown(wait=True)
            self._bindings.shutdown(wait=True)
