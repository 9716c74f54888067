"""The lines of an ndjson commit, read without holding a file's content in memory. Each line is scanned string
by string as its pieces arrive. A string longer than 64 KiB can only be a file's base64 content: it is decoded
piece by piece into the blob store, and the line is passed on with a random placeholder in its place, plus the
stored blob. Memory holds ``max_line`` bytes of JSON and one body piece, whatever the file's size.
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

STREAM_STRINGS_OVER = 64 << 10  # in a line, a string longer than this is streamed
_PLAIN_TEXT = re.compile(rb'[^"\\\n]*')  # one character class: no backtracking stack, whatever the length
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_STRING_OR_LINE_END = re.compile(rb'["\n]')
_LONGEST_ESCAPE = 6


@dataclass(frozen=True)
class RawLine:  # a line's JSON text, and the streamed content the placeholder in it stands for
    text: bytes
    blob: StoredBlob | None = None
    placeholder: str | None = None


class Base64Stream:
    """Base64 text in, decoded bytes out to a ``BlobWriter``, at most three characters held back."""

    def __init__(self, writer: BlobWriter, where: str):
        self._writer, self._where = writer, where
        self._tail = b""
        self._padded = False

    def _invalid(self, why: str) -> BadRequest:
        return BadRequest(f"{self._where}: a value this long must be a file's base64 content, and {why}")

    def feed(self, text: bytes) -> None:
        if b"\\" in text:
            try:
                text = json.loads(b'"' + text + b'"').encode("ascii")
            except UnicodeEncodeError:
                raise self._invalid("it is not") from None
        data = self._tail + text
        cut = len(data) - len(data) % 4
        self._tail = data[cut:]
        if not cut:
            return
        if self._padded:
            raise self._invalid("it goes on after its '=' padding")
        try:
            decoded = base64.b64decode(data[:cut], validate=True)
        except (binascii.Error, ValueError):
            raise self._invalid("it is not valid base64") from None
        self._padded = data[:cut].endswith(b"=")
        self._writer.write(decoded)

    def finish(self) -> StoredBlob:
        if self._tail:
            raise self._invalid("its length is not a multiple of 4")
        return self._writer.finish()

    def abort(self) -> None:
        self._writer.abort()


def _string_text_end(data: bytes, pos: int) -> int:
    """Where string text from ``pos`` stops: at a quote, a newline, an invalid or cut escape, or the end."""
    while True:
        pos = _PLAIN_TEXT.match(data, pos).end()
        escape = _ESCAPE.match(data, pos)
        if escape is None:
            return pos
        pos = escape.end()


def commit_lines(
    chunks: Iterator[bytes], max_line: int, open_writer: Callable[[], BlobWriter]
) -> Iterator[RawLine]:
    line = bytearray()  # the current line's JSON, a streamed string replaced by its placeholder
    string: bytearray | None = None  # the current string's text while it is short, when inside one
    stream: Base64Stream | None = None  # the current string's decoder once it is long
    blob: StoredBlob | None = None
    placeholder = ""
    number = 1
    data = b""

    def keep(text: bytes) -> None:
        line.extend(text)
        if len(line) > max_line:
            raise PayloadTooLarge(
                f"commit line {number} is longer than {max_line} bytes without counting a file's content"
            )

    try:
        for chunk in chunks:
            data, pos = (data + chunk if data else chunk), 0
            while pos < len(data):
                if string is None and stream is None:  # between strings: up to a quote or the line's end
                    stop = _STRING_OR_LINE_END.search(data, pos)
                    if stop is None:
                        keep(data[pos:])
                        pos = len(data)
                    elif data[stop.start()] == ord("\n"):
                        keep(data[pos : stop.start()])
                        yield RawLine(bytes(line), blob, placeholder if blob else None)
                        line, blob, number, pos = bytearray(), None, number + 1, stop.end()
                    else:
                        keep(data[pos : stop.end()])
                        string, pos = bytearray(), stop.end()
                    continue
                end = _string_text_end(data, pos)
                text, pos = data[pos:end], end
                if stream is not None:
                    stream.feed(text)
                else:
                    string += text
                    if len(string) > STREAM_STRINGS_OVER:
                        if blob is not None:
                            raise PayloadTooLarge(
                                f"commit line {number}: only one value in a line may be longer than 64 KiB"
                            )
                        stream = Base64Stream(open_writer(), f"commit line {number}")
                        stream.feed(bytes(string))
                        string = None
                if pos == len(data) or data[pos] == ord("\\") and len(data) - pos < _LONGEST_ESCAPE:
                    break  # wait for the rest of the string (or of an escape cut in two)
                if data[pos] != ord('"'):
                    raise BadRequest(f"commit line {number} ends inside a string, or has an invalid escape")
                pos += 1
                if stream is not None:
                    blob, stream = stream.finish(), None
                    placeholder = f"streamed-content-{secrets.token_hex(16)}"
                    keep(placeholder.encode() + b'"')
                else:
                    keep(bytes(string) + b'"')
                string = None
            data = data[pos:]
        if string is not None or stream is not None or data:
            raise BadRequest(f"commit line {number} ends inside a string")
        if line:
            yield RawLine(bytes(line), blob, placeholder if blob else None)
    finally:
        if stream is not None:
            stream.abort()
