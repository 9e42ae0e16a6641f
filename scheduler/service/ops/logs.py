"""Logging of `meshfit serve`: human-readable text (default) or one JSON object per line.

Everything meshfit logs goes through loggers under `meshfit.` (`meshfit.serve` start-up and
shutdown, `meshfit.http` request lines at debug, `meshfit.gang` gang decisions, `meshfit.metrics`
collector failures).  Fields passed with `extra=` are kept: as top-level keys of the JSON object,
and as `key=value` pairs after the message in text.  Other libraries (uvicorn, kubernetes, grpc)
log through the same handler at warning and above (at debug too when `--log-level debug`).
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from typing import IO, Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
ROOT = "meshfit"
_RESERVED = frozenset(RESERVED_ATTRS) | {"message", "asctime", "taskName", "color_message"}  # uvicorn's ANSI copy


def _iso_time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The `extra=` fields of a record (everything that is not a standard LogRecord attribute)."""
    return {key: value for key, value in record.__dict__.items() if key not in _RESERVED and not key.startswith("_")}


class TextFormatter(logging.Formatter):
    """`TIME LEVEL logger: message key=value ...` on one line (a traceback, when any, follows)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """ISO 8601 in UTC, milliseconds."""
        return _iso_time(record)

    def format(self, record: logging.LogRecord) -> str:
        """The line, with the record's extra fields appended as key=value."""
        text = super().format(record)
        extras = extra_fields(record)
        if not extras:
            return text
        head, sep, rest = text.partition("\n")
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in extras.items())
        return f"{head} {pairs}{sep}{rest}"


def _text_value(value: Any) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() or c in "\"'=" for c in text) else text


class JsonLineFormatter(JsonFormatter):
    """One JSON object per line: `time`, `level`, `logger`, `message`, then the extra fields."""

    def __init__(self) -> None:
        super().__init__(["asctime", "levelname", "name", "message"],
                         rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
                         json_ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """ISO 8601 in UTC, milliseconds."""
        return _iso_time(record)


class StderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever `sys.stderr` is when a record is emitted, not the one it was made
    with: a serve run in process (tests, a CLI runner) swaps stderr for a buffer it closes afterwards, and a
    background thread (the waker, a Binding worker) logging later would otherwise hit that closed stream and print
    logging's own "--- Logging error ---" traceback."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:  # type: ignore[override]
        """The current `sys.stderr`."""
        return sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        """Ignored: the stream is always the current `sys.stderr`."""


def configure_logging(fmt: str = "text", level: str = "info", stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record to `stream` (stderr) in `fmt`; meshfit's loggers at `level`, others at warning.

    ValueError (one line) for an unknown format or level.  Replaces the handler a previous call
    installed, so calling it again (tests) does not duplicate lines.  Returns the handler.
    """
    if fmt not in FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if str(level).lower() not in LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LEVELS)}, got {level!r}")
    numeric = getattr(logging, str(level).upper())
    handler = logging.StreamHandler(stream) if stream is not None else StderrHandler()
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("meshfit")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "meshfit"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric if numeric == logging.DEBUG else max(numeric, logging.WARNING))
    logging.getLogger(ROOT).setLevel(numeric)
    return handler
