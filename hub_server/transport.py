"""What uvicorn and starlette leave to the server: the limits, a request body's cap and deadline, and the
bridges by which handlers in worker threads read a body and answer."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import anyio.from_thread
from starlette.requests import Request
from starlette.responses import Response

from briskbert.hub_cards.front_matter import YamlLimits

from .errors import BadRequest, HubError, PayloadTooLarge, RequestTimeout
from .protocol import parse_json


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits (docs/security.md): memory per request is bounded by the body caps, the ndjson line cap
    and the head cap; the caches by ``index_cache_revisions`` and ``request_log_entries``."""

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
    index_cache_revisions: int = 8  # the file indexes of the most recently read revisions kept in memory
    request_log_entries: int = 4096  # the in-memory request log keeps the last N requests
    yaml: YamlLimits = YamlLimits()


class Body:
    """The ASGI ``receive`` a request's body is read through, within its limit and deadline. Nothing is read
    until a handler asks (a request refused from its headers never gets its ``100 Continue``)."""

    def __init__(self, receive, headers, limits: ServerLimits):
        self._receive, self._limits = receive, limits
        declared = headers.get("content-length")
        self.length = int(declared) if declared is not None else None  # h11 checked its framing
        self.done = self.length == 0 or (self.length is None and "transfer-encoding" not in headers)
        self.limit = 0
        self.received = 0
        self.broken = False  # it timed out: nothing more is read
        self._started: float | None = None

    def enforce_limit(self, limit: int) -> None:
        """Refuse a declared length over ``limit`` now; a chunked body is cut off when it passes it."""
        self.limit = limit
        if self.length is not None and self.length > limit:
            raise PayloadTooLarge(
                f"Request body of {self.length} bytes is larger than the limit of {limit} bytes"
            )

    async def receive(self) -> dict:
        if self.done:
            return {"type": "http.request", "body": b"", "more_body": False}
        limits = self._limits
        now = time.monotonic()
        self._started = self._started or now
        expected = self.length if self.length is not None else self.received + 1024
        deadline = self._started + limits.read_timeout_s + expected / limits.min_transfer_rate
        wait = min(deadline - now, limits.read_timeout_s)
        try:
            with anyio.fail_after(max(wait, 0)):
                message = await self._receive()
        except TimeoutError:
            self.broken = True
            raise RequestTimeout(
                f"No data for {limits.read_timeout_s:g} s, or less than {limits.min_transfer_rate} bytes/s "
                "after that: the request body did not arrive in time"
            ) from None
        if message["type"] == "http.disconnect":
            self.broken = True
            raise BadRequest("The connection closed before the whole request body arrived")
        self.done = not message.get("more_body", False)
        self.received += len(message.get("body", b""))
        if self.received > self.limit:
            raise PayloadTooLarge(f"Request body larger than the limit of {self.limit} bytes")
        return message

    def drain(self, most: int) -> bool:
        """Read and drop the rest of the body if it is at most ``most`` bytes (closing on unread data would reset
        the connection and could destroy the answer); False when the connection must be closed instead."""
        if self.broken or self.length is not None and self.length - self.received > most:
            return False
        self.limit = self.received + most
        try:
            while not self.done:
                anyio.from_thread.run(self.receive)
        except HubError:
            return False
        return True


# ---- for handlers, which run in worker threads -------------------------------------------------------------
def body_chunks(request: Request) -> Iterator[bytes]:
    stream = request.stream()
    while True:
        try:
            yield anyio.from_thread.run(stream.__anext__)
        except StopAsyncIteration:
            return


def read_body(request: Request) -> bytes:
    return anyio.from_thread.run(request.body)


def read_json(request: Request):
    return parse_json(read_body(request), "request body")


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    # json.dumps escapes non-ASCII, so a lone surrogate echoed in a message cannot break the encoding.
    return Response(json.dumps(obj).encode(), status, headers, media_type="application/json")


def header_safe(text: str, limit: int = 300) -> str:
    """Printable ASCII only, bounded and stripped (as h11 requires): request text never splits a header."""
    return re.sub(r"[^\x20-\x7e]", "?", str(text))[:limit].strip()
