"""`configure_logging`: text and JSON lines with extra fields, levels, and request lines at debug."""

from __future__ import annotations

import io
import json
import logging

import pytest

from scheduler.service.ops.logs import configure_logging
from tests.service.helpers import gang_pod, make_service


@pytest.fixture
def capture():
    """`configure(fmt, level)` -> a StringIO receiving the lines; logging is put back afterwards."""
    root, meshfit = logging.getLogger(), logging.getLogger("meshfit")
    saved = (root.level, meshfit.level)
    handlers = []

    def configure(fmt: str, level: str = "info") -> io.StringIO:
        stream = io.StringIO()
        handlers.append(configure_logging(fmt, level, stream))
        return stream

    yield configure
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(saved[0])
    meshfit.setLevel(saved[1])


def test_json_lines_carry_time_level_logger_message_and_extras(capture):
    stream = capture("json")
    logging.getLogger("meshfit.gang").info("gang reserved", extra={"gang": "team/g", "pods": 4})
    logging.getLogger("meshfit.gang").debug("not at info")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert list(record)[:4] == ["time", "level", "logger", "message"]
    assert (record["level"], record["logger"], record["message"]) == ("INFO", "meshfit.gang", "gang reserved")
    assert (record["gang"], record["pods"]) == ("team/g", 4)


def test_text_lines_append_extras_and_keep_tracebacks(capture):
    stream = capture("text", "debug")
    logging.getLogger("meshfit.gang").info("gang waiting", extra={"gang": "team/g", "reason": "needs 512 GPUs"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("meshfit.http").exception("request failed")
    text = stream.getvalue()
    first = text.splitlines()[0]
    assert "INFO" in first and "meshfit.gang: gang waiting" in first
    assert first.endswith("gang=team/g reason='needs 512 GPUs'")
    assert "RuntimeError: boom" in text and "Traceback" in text


def test_unknown_format_or_level_is_a_one_line_value_error():
    with pytest.raises(ValueError, match="--log-format"):
        configure_logging("xml")
    with pytest.raises(ValueError, match="--log-level"):
        configure_logging("text", "loud")


def test_configuring_again_replaces_the_handler(capture):
    capture("text")
    stream = capture("json")
    logging.getLogger("meshfit.serve").warning("once")
    assert len(stream.getvalue().splitlines()) == 1
    assert sum(1 for h in logging.getLogger().handlers if h.get_name() == "meshfit") == 1


def test_requests_are_logged_at_debug_only(capture):
    service = make_service()
    stream = capture("json", "info")
    service.filter(gang_pod("g", 0, 2))
    assert '"meshfit.http"' not in stream.getvalue()
    stream = capture("json", "debug")
    service.filter(gang_pod("g", 1, 2))
    service.client.get("/healthz")
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if '"meshfit.http"' in line]
    assert [(line["method"], line["verb"], line["status"]) for line in lines] == [
        ("POST", "filter", 200), ("GET", "/healthz", 200)]
    assert all(line["duration_ms"] >= 0 for line in lines)
