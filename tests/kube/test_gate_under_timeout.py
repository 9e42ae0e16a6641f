"""meshfit's `/bind` gate answers before kube-scheduler gives up on the extender call in every shipped profile."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.service.verbs.bind_verb import GATE_SECONDS

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_the_bind_gate_is_shorter_than_every_shipped_extender_http_timeout():
    timeouts = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for seconds in re.findall(r"^\s*httpTimeout:\s*(\d+)s\s*$", path.read_text(), flags=re.MULTILINE):
            timeouts.append((path.name, int(seconds)))
    assert timeouts, "no kube-scheduler extender httpTimeout found in manifests/"
    assert all(GATE_SECONDS < seconds for _, seconds in timeouts), (GATE_SECONDS, timeouts)
