"""A request and its answer, within limits and deadlines.

uvicorn (h11) frames the bytes on the connection; what this module adds:

* A body's size is capped per kind of route and per caller (no valid token: a small cap), refused from its
  declared length before a byte of it is read, and it must arrive before a deadline that grows with its size
  (``read_timeout_s`` of grace plus ``min_transfer_rate``), never silent for ``read_timeout_s``; answers are
  sent under the same rule (``server.py``).
* The ``Range`` header and sizes in query strings are parsed strictly.

A handler reads a ``Request`` (its body a ``RequestBody``) and returns a ``Response``.
"""

from __future__ import annotations

import json
import re
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
    from starlette.datastructures import Headers

    from .accounts import Account
    from .server import HubServer

_CHUNK = 1 << 20
_DIGITS_RE = re.compile(r"[0-9]{1,19}")
_RANGE_RE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
_UNSAFE_HEADER_CHARS = re.compile(r"[^\x20-\x7e]")


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


class RequestBody:
    """One request's body, read from the ASGI server only when the handler asks for it (so a request refused
    from its headers never gets its ``100 Continue``), never beyond its limit or its deadline. ``receive``
    blocks the handler's thread until the next piece arrives (or raises ``TimeoutError`` at ``deadline``)."""

    def __init__(self, receive: Callable[[float], tuple[bytes, bool]], headers, limits: ServerLimits):
        self._receive, self._limits = receive, limits
        self._limit = 0
        declared = headers.get("content-length")
        self.length = int(declared) if declared is not None else None  # the server checked its framing
        self.done = self.length == 0 or (self.length is None and "transfer-encoding" not in headers)
        self.received = 0
        self.broken = False  # it timed out: nothing more is read

    def enforce_limit(self, limit: int) -> None:
        """Refuse a declared length over ``limit`` now; a chunked body is cut off when it passes it."""
        self._limit = limit
        if self.length is not None and self.length > limit:
            raise PayloadTooLarge(
                f"Request body of {self.length} bytes is larger than the limit of {limit} bytes"
            )

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces as they arrive; it must average ``min_transfer_rate`` after ``read_timeout_s``."""
        started, limits = time.monotonic(), self._limits
        while not self.done:
            # On average min_transfer_rate after read_timeout_s of grace, and never silent for read_timeout_s.
            expected = self.length if self.length is not None else self.received + 1024
            deadline = started + limits.read_timeout_s + expected / limits.min_transfer_rate
            try:
                piece, more = self._receive(min(deadline, time.monotonic() + limits.read_timeout_s))
            except TimeoutError:
                self.broken = True
                raise RequestTimeout(
                    f"No data for {limits.read_timeout_s:g} s, or less than {limits.min_transfer_rate} bytes/s "
                    "after that: the request body did not arrive in time"
                ) from None
            self.done = not more
            self.received += len(piece)
            if self.received > self._limit:
                raise PayloadTooLarge(f"Request body larger than the limit of {self._limit} bytes")
            yield piece

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def drain(self, most: int) -> bool:
        """Read and drop the rest of the body if it is at most ``most`` bytes, so the client can finish sending
        and read the answer (closing on unread data would reset the connection and could destroy the answer);
        False when the connection must be closed instead."""
        if self.broken or self.length is not None and self.length - self.received > most:
            return False
        self._limit = self.received + most
        try:
            for _ in self.chunks():
                pass
        except HubError:
            return False
        return True


@dataclass
class Request:
    hub: HubServer
    method: str
    path: str  # as sent, without the query
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Headers
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

    @property
    def pieces(self) -> tuple[bytes, ...]:
        return self.body if isinstance(self.body, tuple) else (self.body,)

    def file_pieces(self) -> Iterator[bytes]:
        with open(self.file, "rb") as fh:
            fh.seek(self.offset)
            left = self.length
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk


def header_safe(text: str, limit: int = 300) -> str:
    """A header value that cannot split or end the header block: printable ASCII only, bounded."""
    return _UNSAFE_HEADER_CHARS.sub("?", str(text))[:limit]


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
