"""Bytes on a connection, within limits and deadlines.

* The request head (request line and headers) is capped in size and must arrive within ``head_timeout_s``
  (or ``read_timeout_s``, if shorter) of its first byte, so a client trickling a byte at a time
  ("slowloris") loses its connection instead of holding it for as long as it likes.
* A body's framing is checked from the headers before a byte of it is read, its size is capped per kind of
  route and per caller (no valid token: a small cap), and it must arrive before a deadline that grows with
  its size (``read_timeout_s`` of grace plus ``min_transfer_rate``); answers are written under the same rule.
* No single read or write waits longer than ``read_timeout_s``.

A handler reads a ``Request`` (its body a ``RequestBody``) and returns a ``Response``.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from briskbert.hub_cards.front_matter import YamlLimits

from .errors import BadRequest, HubError, PayloadTooLarge, RequestTimeout

if TYPE_CHECKING:
    from email.message import Message

    from .accounts import Account
    from .server import HubServer

_CHUNK = 1 << 20
_WRITE_PIECE = 256 << 10
_DIGITS_RE = re.compile(r"[0-9]{1,19}")
_RANGE_RE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
_CHUNK_SIZE_RE = re.compile(rb"[0-9a-fA-F]{1,15}")
_DRAIN_LIMIT = 1 << 20  # a refused body at most this large is read and dropped, so keep-alive survives


class BodyKind(Enum):
    """What a route reads: nothing, a JSON (or form) document, ndjson lines, or a raw upload."""

    NONE = "none"
    JSON = "json"
    NDJSON = "ndjson"
    STREAM = "stream"


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits. Memory per request is bounded by the body caps (JSON documents are read whole), by
    ``max_commit_line_bytes`` for ndjson commits (a file's base64 content streams to disk), and by the head
    cap; the caches by ``index_cache_bytes`` and ``request_log_entries``."""

    max_json_bytes: int = 16 << 20  # a JSON body from a caller with a valid token
    max_public_body_bytes: int = 1 << 20  # any body from a caller without one (e.g. /api/validate-yaml)
    max_commit_bytes: int = 4 << 30  # a whole ndjson commit (regular uploads)
    max_commit_line_bytes: int = 256 << 10  # an ndjson line, not counting a file's base64 content
    max_upload_bytes: int = 64 << 30  # one LFS upload
    max_head_bytes: int = 64 << 10  # request line and headers together
    max_request_line_bytes: int = 8 << 10
    read_timeout_s: float = 30.0  # the longest one read or write may wait (and an idle keep-alive connection)
    head_timeout_s: float = 10.0  # from a request's first byte to its headers' end (at most read_timeout_s)
    min_transfer_rate: int = 64 << 10  # bytes/s a body or an answer must average after read_timeout_s
    max_connections: int = 64
    max_repo_files: int = 100_000  # files in one revision (the Hub advises staying under 100k)
    max_paths_per_request: int = 10_000  # paths-info
    index_cache_bytes: int = 64 << 20  # per-revision file indexes kept in memory (LRU)
    request_log_entries: int = 4096  # the in-memory request log keeps the last N requests
    yaml: YamlLimits = YamlLimits()

    def body_limit(self, kind: BodyKind, trusted: bool) -> int:
        """The largest body a route of ``kind`` reads; ``trusted`` when the caller showed a valid token (or
        a valid upload signature)."""
        limit = {
            BodyKind.NONE: self.max_json_bytes,
            BodyKind.JSON: self.max_json_bytes,
            BodyKind.NDJSON: self.max_commit_bytes,
            BodyKind.STREAM: self.max_upload_bytes,
        }[kind]
        return limit if trusted else min(limit, self.max_public_body_bytes)

    def transfer_deadline(self, size: int) -> float:
        """When ``size`` bytes that start moving now must have arrived (or been sent)."""
        return time.monotonic() + self.read_timeout_s + size / self.min_transfer_rate


class ConnectionIO(io.RawIOBase):
    """One connection's socket. Each read or write waits at most ``idle_s``, and none goes on past
    ``deadline`` (monotonic seconds) while one is set."""

    def __init__(self, sock: socket.socket, idle_s: float):
        super().__init__()
        self._sock = sock
        self.idle_s = idle_s
        self.deadline: float | None = None
        self.waits_for_deadline = False  # the last wait was cut short by the deadline, not by idle_s

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def _arm(self) -> None:
        timeout = self.idle_s
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            self.waits_for_deadline = left < timeout
            if left <= 0:
                raise TimeoutError("the connection's deadline has passed")
            timeout = min(timeout, left)
        self._sock.settimeout(timeout)

    def readinto(self, buffer) -> int:
        self._arm()
        return self._sock.recv_into(buffer)

    def write(self, data) -> int:
        view = memoryview(data)
        for start in range(0, len(view), _WRITE_PIECE):
            self._arm()
            self._sock.sendall(view[start : start + _WRITE_PIECE])
        return len(view)


class HeadReader:
    """``rfile`` while the headers are parsed: ``http.client.parse_headers`` allows 100 lines of 64 KiB
    each; this stops at ``budget`` bytes in all (``LineTooLong`` becomes a 431)."""

    def __init__(self, inner: io.BufferedReader, budget: int):
        self._inner = inner
        self.left = budget

    def readline(self, limit: int = -1) -> bytes:
        cap = self.left + 1 if limit < 0 else min(limit, self.left + 1)
        line = self._inner.readline(cap)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("request head")
        return line


class RequestBody:
    """One request's body, read lazily and never beyond its limit or its deadline. With ``Expect:
    100-continue`` the client waits for a go-ahead: ``send_continue`` is called before the first read, so a
    request refused from its headers never receives one."""

    def __init__(
        self,
        rfile: io.BufferedReader,
        conn: ConnectionIO,
        headers,
        limits: ServerLimits,
        send_continue: Callable[[], None] | None = None,
    ):
        self._rfile, self._conn, self._limits = rfile, conn, limits
        self._send_continue = send_continue
        self._limit = 0
        self.length, self.chunked = _framing(headers)
        self._left = self.length or 0
        self.done = not self.chunked and self._left == 0
        self.received = 0
        self._broken = False  # a read timed out or the client went away: nothing more will be read

    def enforce_limit(self, limit: int) -> None:
        """Refuse a declared length over ``limit`` now; a chunked body is cut off when it passes it."""
        self._limit = limit
        if self.length is not None and self.length > limit:
            raise PayloadTooLarge(
                f"Request body of {self.length} bytes is larger than the limit of {limit} bytes"
            )

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces as they arrive."""
        if self.done:
            return
        if self._send_continue is not None:
            self._send_continue()
            self._send_continue = None
        started = time.monotonic()
        source = self._dechunk(started) if self.chunked else self._fixed()
        if not self.chunked:
            self._conn.deadline = self._limits.transfer_deadline(self._left)
        for piece in source:
            self.received += len(piece)
            if self.received > self._limit:
                raise PayloadTooLarge(f"Request body larger than the limit of {self._limit} bytes")
            yield piece
        self.done = True
        self._conn.deadline = None

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def drain(self) -> bool:
        """Read and drop what is left if it is small; False when the connection must be closed instead
        (also when the client still waits for a ``100 Continue`` it will never get)."""
        if self.done:
            return True
        if self._send_continue is not None or self._broken:
            return False
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
    def _timed_out(self) -> RequestTimeout:
        self._broken = True
        if self._conn.waits_for_deadline:
            return RequestTimeout(
                f"The request body did not arrive in time: after {self._limits.read_timeout_s:g} s it must "
                f"average {self._limits.min_transfer_rate} bytes/s"
            )
        return RequestTimeout(f"No data for {self._limits.read_timeout_s:g} s while reading the request body")

    def _read_some(self, n: int) -> bytes:
        try:
            data = self._rfile.read1(n)
        except TimeoutError:
            raise self._timed_out() from None
        if not data:
            self._broken = True
            raise BadRequest("The connection closed before the whole request body arrived")
        return data

    def _fixed(self) -> Iterator[bytes]:
        while self._left > 0:
            data = self._read_some(min(_CHUNK, self._left))
            self._left -= len(data)
            yield data

    def _read_line(self) -> bytes:
        try:
            line = self._rfile.readline(1024)
        except TimeoutError:
            raise self._timed_out() from None
        if not line.endswith(b"\n"):
            raise BadRequest("Malformed chunked encoding: a chunk header line is missing or too long")
        return line

    def _dechunk(self, started: float) -> Iterator[bytes]:
        rate, grace = self._limits.min_transfer_rate, self._limits.read_timeout_s
        while True:
            # The deadline moves with what has arrived: on average min_transfer_rate after the grace time.
            self._conn.deadline = started + grace + (self.received + 1024) / rate
            size_text = self._read_line().split(b";")[0].strip()
            if not _CHUNK_SIZE_RE.fullmatch(size_text):
                raise BadRequest(f"Malformed chunked encoding: chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                while self._read_line() not in (b"\r\n", b"\n"):
                    pass  # trailers are ignored
                return
            if self.received + size > self._limit:
                raise PayloadTooLarge(f"Request body larger than the limit of {self._limit} bytes")
            self._conn.deadline = started + grace + (self.received + size) / rate
            while size > 0:
                data = self._read_some(min(_CHUNK, size))
                size -= len(data)
                yield data
            if self._read_line().strip():
                raise BadRequest("Malformed chunked encoding: data longer than its chunk size")


@dataclass
class Request:
    hub: HubServer
    method: str
    path: str  # as sent, without the query
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Message
    body: RequestBody
    base_url: str
    account: Account | None = None  # who the token belongs to (the dispatcher fills it in)

    @property
    def repo_type(self) -> str:
        return self.params.get("repo_type", "models").removesuffix("s")  # the route matched a known type

    @property
    def repo_id(self) -> str:
        return self.params["repo_id"]

    def arg(self, name: str, default: str | None = None) -> str | None:
        """The first value of a query parameter."""
        return self.query.get(name, [default])[0]

    def flag(self, name: str) -> bool:
        return self.arg(name, "").lower() in ("1", "true")

    def page_size(self, largest: int) -> int:
        """The ``limit`` query parameter, between 1 and ``largest`` (``largest`` when absent or invalid)."""
        limit = parse_size(self.arg("limit", ""))
        return largest if limit is None else max(min(limit, largest), 1)

    def json(self):
        return parse_json(self.body.read(), "request body")

    def next_page(self, **query: str) -> str:
        """The URL of this request with ``query`` replacing those parameters (for a ``Link`` header)."""
        merged = {**self.query, **{k: [v] for k, v in query.items()}}
        return f"{self.base_url}{self.path}?{urllib.parse.urlencode(merged, doseq=True)}"


@dataclass
class Response:
    status: int = 200
    body: bytes | tuple[bytes, ...] = b""  # a tuple is sent piece after piece, never joined
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    file: Path | None = None  # streamed after the headers, from ``offset``, ``length`` bytes
    offset: int = 0
    length: int = 0


def json_response(obj, headers: dict | None = None) -> Response:
    return Response(body=json.dumps(obj).encode(), headers=dict(headers or {}))


def parse_json(raw: bytes, what: str):
    try:
        return json.loads(raw) if raw.strip() else {}
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise BadRequest(f"{what} is not valid JSON: {e}") from None


def parse_size(text: str) -> int | None:
    """A non-negative decimal of at most 19 ASCII digits, or None (``int()`` also takes '²' and '٣')."""
    return int(text) if isinstance(text, str) and _DIGITS_RE.fullmatch(text) else None


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
    length = parse_size(next(iter(values))) if len(values) == 1 else None
    if length is None:
        raise BadRequest("Invalid Content-Length: expected one non-negative decimal integer")
    return length, False


def _position(digits: str) -> int:
    return int(digits) if len(digits) <= 19 else 1 << 64  # int() on 5,000 digits is an error, not a number


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The (first, last) byte a ``Range`` header asks for, or None to send the whole file (no header, or
    one this server does not serve: several ranges, or not ``bytes=``). A range that starts past the end
    is a 416 with ``Content-Range: bytes */size``."""
    m = _RANGE_RE.fullmatch(header.strip()) if header else None
    if m is None or not (m[1] or m[2]):
        return None
    if m[1]:
        first, last = _position(m[1]), (_position(m[2]) if m[2] else size - 1)
        if m[2] and last < first:
            return None  # not a valid range: ignored, as RFC 9110 says
    else:  # a suffix: the last N bytes (none at all: a 416)
        first, last = max(0, size - _position(m[2])), size - 1
    if first >= size:
        raise HubError(
            f"Range {header.strip()[:40]!r} is outside the file's {size} bytes",
            status=416,
            code="RangeNotSatisfiable",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return first, min(last, size - 1)
