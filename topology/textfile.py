"""Read an input file as text, the one way every meshfit command does: UTF-8 (a UTF-8 byte-order mark is
allowed), or UTF-16 / UTF-32 when the file starts with their byte-order mark (what Windows editors save).

Anything else -- random bytes, a Latin-1 byte, UTF-16 without a byte-order mark (NUL bytes) -- is an
`InputFileError` whose one-line message names the file, the byte offset and the line, never a
`UnicodeDecodeError` traceback.  Callers pass their own error class (`TopologyError`, `JobSpecError`, ...)
so each command reports it as it reports any other bad input.
"""

from __future__ import annotations

import codecs
from pathlib import Path

BYTE_ORDER_MARKS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)
"""(mark, codec that decodes what follows it, name) for every byte-order mark accepted."""


class InputFileError(ValueError):
    """An input file that cannot be read or is not text; the message is one line naming the file."""


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def decode_text(data: bytes, source: str, error: type[Exception] = InputFileError, utf8_only: bool = False) -> str:
    """`data` as text (see the module doc); `error(one line naming source and the byte offset)` otherwise.

    `utf8_only`: refuse UTF-16/32 too (for files a third-party reader opens itself, e.g. a kubeconfig)."""
    mark, codec, name = next(((m, c, n) for m, c, n in BYTE_ORDER_MARKS if data.startswith(m)), (b"", "utf-8", "UTF-8"))
    if utf8_only and name != "UTF-8":
        raise error(f"{source}: {name} text (byte-order mark at byte 0); save the file as UTF-8")
    body = data[len(mark):]
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as exc:
        offset = len(mark) + exc.start
        raise error(f"{source}: not {name} text: byte {offset} (line {_line_of(data, offset)}) is "
                    f"0x{data[offset]:02x}; save the file as UTF-8") from None
    nul = text.find("\0")
    if nul >= 0:
        offset = len(mark) + len(text[:nul].encode(codec))
        hint = " (UTF-16 without a byte-order mark?)" if name == "UTF-8" else ""
        raise error(f"{source}: not a text file: NUL byte at byte {offset} (line {_line_of(data, offset)})"
                    f"{hint}; save the file as UTF-8") from None
    return text


def read_text(path: str | Path, what: str = "file", error: type[Exception] = InputFileError,
              utf8_only: bool = False) -> str:
    """The text of the input file at `path` (see `decode_text`); `error("cannot read <what> <path>: ...")`
    when it cannot be read (missing, a directory, no permission)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return decode_text(data, str(path), error, utf8_only)
