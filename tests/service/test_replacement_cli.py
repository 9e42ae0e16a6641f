"""`meshfit serve` failure-replacement and spare flags: hostile values are one line with exit 2."""

from __future__ import annotations

import pytest

from tests.service.test_serve_cli import assert_one_line_error, cluster_file, serve


@pytest.mark.parametrize("flags, fragment", [
    (["--unhealthy-grace", "-1"], "--unhealthy-grace"),
    (["--unhealthy-grace", "nan"], "--unhealthy-grace"),
    (["--unhealthy-grace", "1e9"], "--unhealthy-grace"),
    (["--spare-fraction", "0.9"], "--spare-fraction"),
    (["--spare-fraction", "-0.1"], "--spare-fraction"),
    (["--spare-fraction", "inf"], "--spare-fraction"),
    (["--unhealthy-condition", "Kernel Deadlock"], "--unhealthy-condition"),
    (["--unhealthy-condition", "Ready=Perhaps"], "--unhealthy-condition"),
    (["--unhealthy-label", "no-value"], "--unhealthy-label"),
    (["--unhealthy-ignore", "everything"], "--unhealthy-ignore"),
])
def test_bad_failure_flags_are_one_line(tmp_path, flags, fragment):
    assert_one_line_error(serve("--cluster", str(cluster_file(tmp_path)), *flags), fragment)
