"""The soak (issue 19): a seeded random workload of gangs and plain pods with faults of every kind, against two
meshfit replicas (leader election, readiness-gated proxy) and kube-scheduler on a real control plane, with every
invariant checked continuously; zero violations allowed.

Short run (the default test command): 3 minutes on the newest Kubernetes found, 40 nodes.  Long run:
`MESHFIT_SOAK_MINUTES=30` (report printed), `MESHFIT_SOAK_VERSIONS=all`, `MESHFIT_SOAK_NODES`, `MESHFIT_SOAK_SEED`;
`MESHFIT_SOAK_ARTIFACTS=DIR` keeps the report and every process log there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.soak.driver import Soak, SoakConfig

pytestmark = [pytest.mark.realk8s, pytest.mark.soak]


def keep_artifacts(soak_env, text: str) -> None:
    """Copy the report and the processes' logs to `$MESHFIT_SOAK_ARTIFACTS/<version>/` when it is set."""
    target = os.environ.get("MESHFIT_SOAK_ARTIFACTS")
    if not target:
        return
    folder = Path(target) / soak_env.plane.install.test_id
    shutil.copytree(soak_env.plane.logs, folder / "logs", dirs_exist_ok=True)
    (folder / "report.txt").write_text(text + "\n")


def test_soak_keeps_every_invariant(soak_env, capsys):
    config = SoakConfig.from_env()
    soak = Soak(config, soak_env.plane, soak_env.namespace, soak_env.core)
    try:
        soak.setup()
        report = soak.run()
    finally:
        soak.teardown()
    text = report.text()
    keep_artifacts(soak_env, text)
    if config.long:
        with capsys.disabled():
            print("\n" + text)
    else:
        print("\n" + text)

    # the run did real work: it cannot pass by doing nothing
    expected_gangs = config.duration * config.gang_rate
    assert report.arrivals.gangs >= 0.6 * expected_gangs, text
    assert not report.missing_fault_kinds(), f"fault kinds never injected: {report.missing_fault_kinds()}\n{text}"
    assert report.total_faults >= 0.5 * config.duration / config.fault_interval, text
    assert report.gangs_whole_seen >= max(10, 0.25 * report.arrivals.gangs), text
    assert report.controller.gangs_completed >= 0.15 * report.arrivals.gangs, text
    assert report.checker_polls >= config.duration / 2 and report.endpoint_polls >= config.duration / 4, text
    assert not report.violations, text
