"""The lines of an ndjson commit, read without holding a file's content in memory.

A line up to ``max_line`` bytes is passed on as it is (``json.loads`` parses it). A longer line may only be
long because of one string, a file's base64 content: it is scanned as it arrives, and that string is
base64-decoded piece by piece into the blob store (hashed on the way). The line is then passed on with a
random placeholder where the string was, plus the stored blob. Memory holds ``max_line`` bytes of JSON and
one body piece, whatever the file's size; the old way (the line, its JSON string, the decoded bytes, a copy
for the git hash) held about six copies of the file.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .errors import BadRequest, PayloadTooLarge
from .storage import BlobWriter, StoredBlob

_STRING_STOP = re.compile(rb'["\\\n]')
STREAM_STRINGS_OVER = 64 << 10  # in a long line, a string longer than this is streamed


@dataclass(frozen=True)
class RawLine:
    """One line of the commit: its JSON text, and the streamed content the placeholder in it stands for."""

    text: bytes
    blob: StoredBlob | None = None
    placeholder: str | None = None


class Base64Stream:
    """Base64 text in, decoded bytes out to a ``BlobWriter``, four characters at a time at most held back."""

    def __init__(self, writer: BlobWriter, where: str):
        self._writer, self._where = writer, where
        self._tail = b""
        self._padded = False

    def _invalid(self, why: str) -> BadRequest:
        return BadRequest(f"{self._where}: a value this long must be a file's base64 content, and {why}")

    def feed(self, text: bytes) -> None:
        data = self._tail + text if self._tail else text
        cut = len(data) - len(data) % 4
        self._tail = data[cut:]
        if not cut:
            return
        if self._padded:
            raise self._invalid("it goes on after its '=' padding")
        block = data[:cut]
        try:
            decoded = base64.b64decode(block, validate=True)
        except (binascii.Error, ValueError):
            raise self._invalid("it is not valid base64") from None
        self._padded = block.endswith(b"=")
        self._writer.write(decoded)

    def finish(self) -> StoredBlob:
        if self._tail:
            self.abort()
            raise self._invalid("its length is not a multiple of 4")
        return self._writer.finish()

    def abort(self) -> None:
        self._writer.abort()


def _escape_length(escape: bytes) -> int:
    """How long a JSON escape is, from its first bytes: ``\\uXXXX`` is 6, the others 2."""
    return 6 if escape[1:2] == b"u" else 2


def _unescape(raw: bytes, where: str) -> bytes:
    """JSON string text (escapes included) as the ASCII it stands for."""
    try:
        return json.loads(b'"' + raw + b'"').encode("ascii")
    except (ValueError, UnicodeEncodeError):
        raise BadRequest(
            f"{where}: a value this long must be a file's base64 content, and it is not"
        ) from None


class _LongLine:
    """A line past ``max_line`` bytes, scanned as it arrives: the JSON outside the one long string is kept
    (at most ``max_line`` bytes of it), the long string goes through a ``Base64Stream``."""

    def __init__(self, max_line: int, open_writer: Callable[[], BlobWriter], number: int):
        self._max_line, self._open_writer = max_line, open_writer
        self.where = f"commit line {number}"
        self.skeleton = bytearray()
        self.in_string = False
        self._text = bytearray()  # the current string's JSON text, while it is short
        self._escape = b""  # an escape sequence cut in two by a piece boundary
        self._stream: Base64Stream | None = None
        self.blob: StoredBlob | None = None
        self.placeholder = f"streamed-content-{secrets.token_hex(16)}"
        self.done = False

    def feed(self, data: bytes, pos: int) -> int:
        """Take ``data[pos:]`` up to the end of the line; where the line ended (past its newline), or
        ``len(data)`` when it goes on."""
        newline = data.find(b"\n", pos)
        stop = len(data) if newline < 0 else newline
        while True:
            if self.in_string:
                pos = self._string(data, pos)
                if self.in_string:
                    return len(data)
                continue
            quote = data.find(b'"', pos, stop)
            if quote < 0:
                self._keep(data[pos:stop])
                self.done = newline >= 0
                return len(data) if newline < 0 else newline + 1
            self._keep(data[pos : quote + 1])
            pos, self.in_string = quote + 1, True

    def finish(self) -> RawLine:
        if self.in_string:
            raise BadRequest(f"{self.where} ends inside a string")
        return RawLine(bytes(self.skeleton), self.blob, self.placeholder if self.blob else None)

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.abort()

    def _keep(self, text: bytes) -> None:
        self.skeleton += text
        if len(self.skeleton) > self._max_line:
            raise PayloadTooLarge(
                f"{self.where} is longer than {self._max_line} bytes without counting a file's content"
            )

    def _string(self, data: bytes, pos: int) -> int:
        """Take string text from ``data[pos:]``; where it stopped (after the closing quote, or the end)."""
        while self._escape and pos < len(data):  # complete an escape cut by the previous piece
            self._escape += data[pos : pos + 1]
            pos += 1
            if len(self._escape) == _escape_length(self._escape):
                self._string_text(self._escape, escaped=True)
                self._escape = b""
        while pos < len(data):
            stop = _STRING_STOP.search(data, pos)
            if stop is None:
                self._string_text(data[pos:])
                return len(data)
            at = stop.start()
            self._string_text(data[pos:at])
            if data[at] == ord("\n"):
                raise BadRequest(f"{self.where} ends inside a string")
            if data[at] == ord('"'):
                self._end_string()
                return at + 1
            escape = data[at : at + 6]
            length = _escape_length(escape)
            if len(escape) < length:
                self._escape = data[at:]
                return len(data)
            self._string_text(escape[:length], escaped=True)
            pos = at + length
        return pos

    def _string_text(self, raw: bytes, escaped: bool = False) -> None:
        if self._stream is not None:
            self._stream.feed(_unescape(raw, self.where) if escaped else raw)
            return
        self._text += raw
        if len(self._text) > STREAM_STRINGS_OVER:
            if self.blob is not None:
                raise PayloadTooLarge(f"{self.where}: only one value in a line may be longer than 64 KiB")
            self._stream = Base64Stream(self._open_writer(), self.where)
            self._stream.feed(_unescape(bytes(self._text), self.where))
            self._text = bytearray()

    def _end_string(self) -> None:
        self.in_string = False
        if self._stream is not None:
            stream, self._stream = self._stream, None
            self.blob = stream.finish()
            self._keep(self.placeholder.encode() + b'"')
        else:
            self._keep(bytes(self._text) + b'"')
            self._text = bytearray()


def commit_lines(
    chunks: Iterator[bytes], max_line: int, open_writer: Callable[[], BlobWriter]
) -> Iterator[RawLine]:
    """The lines of an ndjson body (see the module docstring)."""
    pending = bytearray()
    long: _LongLine | None = None
    number = 1
    try:
        for chunk in chunks:
            pos = 0
            while pos < len(chunk):
                if long is not None:
                    pos = long.feed(chunk, pos)
                    if long.done:
                        line, long = long.finish(), None
                        number += 1
                        yield line
                    continue
                cut = chunk.find(b"\n", pos)
                end = len(chunk) if cut < 0 else cut
                if len(pending) + end - pos > max_line:
                    long = _LongLine(max_line, open_writer, number)
                    long.feed(bytes(pending), 0)
                    pending = bytearray()
                    continue
                pending += chunk[pos:end]
                if cut < 0:
                    break
                line, pending, pos = RawLine(bytes(pending)), bytearray(), cut + 1
                number += 1
                yield line
        if long is not None:
            line, long = long.finish(), None
            yield line
        elif pending:
            yield RawLine(bytes(pending))
    finally:
        if long is not None:
            long.abort()
