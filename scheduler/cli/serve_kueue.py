"""Wiring of meshfit's Kueue admission check controller into `meshfit serve` (real mode, `--kueue`, the default)."""

from __future__ import annotations

from typing import Any


def start_kueue_checks(scheduler: Any, binder: Any, elector: Any = None) -> Any:
    """Start the controller in a daemon thread: it acts only while this replica leads (with `--leader-elect`)
    and its cache has listed the cluster; with no Kueue CRDs installed it finds no checks and writes nothing."""
    from scheduler.kube.kueue_status import KueueStatusWriter
    from scheduler.service.kueue.kueue_checks import KueueCheckController

    active = elector.serving if elector is not None else (lambda: True)
    controller = KueueCheckController(scheduler, KueueStatusWriter(binder.api_client), active=active)
    controller.start()
    return controller
