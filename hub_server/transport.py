"""Reading request bodies within limits: the framing is checked from the headers before a byte of the body
is read, sizes are capped per kind of body, and slow or stalled senders time out."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from .errors import BadRequest, PayloadTooLarge, RequestTimeout

_CHUNK = 1 << 20
_DIGITS_RE = re.compile(r"^[0-9]{1,19}$")
_MIN_RATE = 1024  # bytes/s a body must average once it has taken longer than the read timeout
_DRAIN_LIMIT = 1 << 20  # a refused body at most this large is read and dropped, so keep-alive survives


class BodyKind(Enum):
    """What a route reads: nothing, a JSON (or form) document, ndjson lines, or a raw upload."""

    NONE = "none"
    JSON = "json"
    NDJSON = "ndjson"
    STREAM = "stream"


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits. Memory is bounded by ``max_json_bytes`` per JSON request and by the longest ndjson
    line (one file's base64) per commit; LFS uploads stream to disk."""

    max_json_bytes: int = 16 << 20
    max_commit_bytes: int = 4 << 30
    max_upload_bytes: int = 64 << 30
    read_timeout_s: float = 30.0  # the longest a connection may stay silent mid-request (or idle between)
    max_connections: int = 64

    def body_limit(self, kind: BodyKind) -> int:
        return {
            BodyKind.NONE: self.max_json_bytes,
            BodyKind.JSON: self.max_json_bytes,
            BodyKind.NDJSON: self.max_commit_bytes,
            BodyKind.STREAM: self.max_upload_bytes,
        }[kind]


class RequestBody:
    """One request's body, read lazily from ``rfile`` and never beyond ``limit`` bytes."""

    def __init__(self, rfile, headers, read_timeout_s: float):
        self._rfile = rfile
        self._limit = 0
        self._timeout_s = read_timeout_s
        self.length, self.chunked = _framing(headers)
        self._left = self.length or 0
        self.done = not self.chunked and self._left == 0
        self.received = 0

    def enforce_limit(self, limit: int) -> None:
        """Refuse a declared length over ``limit`` now; a chunked body is cut off when it passes it."""
        self._limit = limit
        if self.length is not None and self.length > limit:
            raise PayloadTooLarge(
                f"Request body of {self.length} bytes is larger than the limit of {limit} bytes"
            )

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces as they arrive (raw reads, so a slow sender is noticed between them)."""
        if self.done:
            return
        source = self._dechunk() if self.chunked else self._fixed()
        started = time.monotonic()
        for piece in source:
            self.received += len(piece)
            elapsed = time.monotonic() - started
            if elapsed > self._timeout_s and self.received < elapsed * _MIN_RATE:
                raise RequestTimeout(f"The request body arrives slower than {_MIN_RATE} bytes/s")
            if self.received > self._limit:
                raise PayloadTooLarge(f"Request body larger than the limit of {self._limit} bytes")
            yield piece
        self.done = True

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def lines(self) -> Iterator[bytes]:
        parts: list[bytes] = []
        for piece in self.chunks():
            start = 0
            while (cut := piece.find(b"\n", start)) >= 0:
                parts.append(piece[start:cut])
                yield b"".join(parts)
                parts, start = [], cut + 1
            if start < len(piece):
                parts.append(piece[start:])
        if parts:
            yield b"".join(parts)

    def drain(self) -> bool:
        """Read and drop what is left if it is small; False when the connection must be closed instead."""
        if self.done:
            return True
        if self.length is not None and self._left > _DRAIN_LIMIT:
            return False
        try:
            for _ in self.chunks():
                if self.received > _DRAIN_LIMIT:
                    return False
        except (OSError, ValueError, BadRequest, PayloadTooLarge, RequestTimeout):
            return False
        return True

    # ---- framing ----------------------------------------------------------------------------------
    def _read_some(self, n: int) -> bytes:
        try:
            data = self._rfile.read1(n)
        except TimeoutError:
            raise RequestTimeout(
                f"No data for {self._timeout_s:g} s while reading the request body"
            ) from None
        if not data:
            raise BadRequest("The connection closed before the whole request body arrived")
        return data

    def _fixed(self) -> Iterator[bytes]:
        while self._left > 0:
            data = self._read_some(min(_CHUNK, self._left))
            self._left -= len(data)
            yield data

    def _read_line(self) -> bytes:
        line = self._rfile.readline(1024)
        if not line.endswith(b"\n"):
            raise BadRequest("Malformed chunked encoding: a chunk header line is missing or too long")
        return line

    def _dechunk(self) -> Iterator[bytes]:
        while True:
            size_text = self._read_line().split(b";")[0].strip()
            if not re.fullmatch(rb"[0-9a-fA-F]{1,15}", size_text):
                raise BadRequest(f"Malformed chunked encoding: chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                while self._read_line() not in (b"\r\n", b"\n"):
                    pass  # trailers are ignored
                return
            if self.received + size > self._limit:
                raise PayloadTooLarge(f"Request body larger than the limit of {self._limit} bytes")
            while size > 0:
                data = self._read_some(min(_CHUNK, size))
                size -= len(data)
                yield data
            if self._read_line().strip():
                raise BadRequest("Malformed chunked encoding: data longer than its chunk size")


def _framing(headers) -> tuple[int | None, bool]:
    """(Content-Length or None, chunked), checked before reading: an invalid length is a 400, and so are
    both headers at once (a request-smuggling shape)."""
    encodings = headers.get_all("Transfer-Encoding") or []
    lengths = headers.get_all("Content-Length") or []
    if encodings:
        if lengths:
            raise BadRequest("Send Content-Length or Transfer-Encoding, not both")
        if [e.strip().lower() for e in encodings] != ["chunked"]:
            raise BadRequest("Only 'Transfer-Encoding: chunked' is supported")
        return None, True
    if not lengths:
        return 0, False
    values = {v.strip() for v in lengths}
    if len(values) != 1 or not _DIGITS_RE.match(next(iter(values))):
        raise BadRequest("Invalid Content-Length: expected one non-negative decimal integer")
    return int(next(iter(values))), False
