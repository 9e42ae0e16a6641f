"""`meshfit demo` end to end with a couple of steps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def test_demo_places_compares_and_trains():
    result = subprocess.run([sys.executable, "-c", "from scheduler.cli import main; main()", "demo", "--steps", "3",
                             "-o", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["placements"]["meshfit"]["status"] == "placed"
    assert "kueue-tas" in summary["placements"] or summary["notes"]
    run = summary["run"]
    assert run["status"] == "completed" and run["steps"] == 3 and len(run["losses"]) == 3
    assert run["losses"][-1] < run["losses"][0]
    assert len(run["ranks"]) == summary["placements"]["meshfit"]["world_size"]
