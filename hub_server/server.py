"""A Hub-compatible HTTP server for offline work and tests.

The unmodified ``huggingface_hub`` and ``transformers`` clients talk to it through ``HF_ENDPOINT``.
Standard library (``http.server``), plus PyYAML and two huggingface_hub helpers (front matter, git hash).

Requests go through one dispatcher (``_Handler._dispatch``) over the route table in ``routes.py``: it
checks the body's framing, the caller's account, the route's authorization and size limit from the headers
alone, before a byte of the body is read (and before a ``100 Continue``); injects faults; and maps every
``HubError`` to its status, ``X-Error-Code`` and a sanitised ``X-Error-Message`` (request text is never
reflected raw into a header); a write that finds the disk full is a logged 507 ``InsufficientStorage``, with
nothing of it kept (``errors.disk_full``), and any other ``OSError`` closes the connection. The limits and
deadlines are ``ServerLimits`` (``transport.py``); at most ``max_connections`` connections are served at once
(the rest get a 503 at once). ``docs/security.md`` lists
what the server defends against and what it does not.

Accounts (``accounts.py``): each token belongs to a user and may write only under that user's name and the
organisations it is configured with. ``HubServer(..., token, user=..., orgs=...)`` is one account;
``accounts=[Account(...), ...]`` adds more. A server started without any token lets anyone act as ``user``.

Private repos answer reads by anyone outside their namespace exactly as a missing repo does: the same code
path, 404 with ``X-Error-Code: RepoNotFound`` and the same message, so a repo's existence is never revealed.
(The real Hub answers 401 to anonymous requests for both; the clients map either to
``RepositoryNotFoundError`` through ``X-Error-Code``.) Repo ids are case-insensitive and keep the case
their creator used. Pull requests (``create_pr=True``, discussions) are refused with a 400
``PullRequestsNotSupported`` that says to commit to a branch instead.

Uploads. The client decides between Xet and LFS by itself (Xet whenever ``hf_xet`` is importable and
``HF_HUB_DISABLE_XET`` is unset) and this server does not speak Xet, so ``upload_mode`` picks what
``/preupload`` answers:

* ``"regular"`` (default): every file is sent base64 inside the ndjson commit. Works for every client; the
  commit is read line by line and a file's content is decoded into the blob store as it streams in.
* ``"lfs"``: large or binary files are marked ``lfs`` as on the Hub, and go through the LFS batch API,
  a pre-signed PUT streamed to disk and a verify call. Clients must run with ``HF_HUB_DISABLE_XET=1``.

Either way files are stored the same way and downloads of large/binary files carry the LFS headers.

Faults. ``fault={"step": STEP, "kind": "500"|"400"|"drop"|"stall", "times": N, "stall_s": S}`` makes the
next N requests of that protocol step fail before anything is changed: a 500 or 400 answer, a connection
closed without an answer, or a connection held for S seconds and then closed. Steps: see ``STEPS``.
``HubServer.set_fault`` changes it while the server runs.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import hmac
import io
import json
import logging
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .accounts import Account, Accounts
from .errors import BadRequest, Forbidden, HubError, ServerError, Unauthorized, disk_full, repo_not_found
from .names import validate_repo_id
from .routes import STEPS, Auth, Request, Response, Route, match
from .storage import Storage
from .transport import ConnectionIO, HeadReader, RequestBody, ServerLimits, parse_size

logger = logging.getLogger("hub_server")

FAULT_KINDS = ("500", "400", "drop", "stall")
_UNSAFE_HEADER_CHARS = re.compile(r"[^\x20-\x7e]")
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
)


class DataDirInUse(RuntimeError):
    """Another server already serves this data folder (two would clean each other's temporary files)."""


class _Dropped(Exception):
    """Raised by the fault injector to close the connection without an answer."""


def header_safe(text: str, limit: int = 300) -> str:
    """A header value that cannot split or end the header block: printable ASCII only, bounded."""
    return _UNSAFE_HEADER_CHARS.sub("?", str(text))[:limit]


def _lock_data_dir(data_dir: Path):
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(data_dir / ".server.lock", "a+")  # noqa: SIM115 - held for the server's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise DataDirInUse(
            f"{data_dir} is already served by another local Hub; stop it or use another --data_dir"
        ) from None
    return handle


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self,
        address,
        data_dir,
        token: str | None,
        *,
        user: str = "testuser",
        orgs: Iterable[str] = (),
        accounts: Iterable[Account] = (),
        upload_mode: str = "regular",
        fault: dict | None = None,
        log_file: str | None = None,
        limits: ServerLimits | None = None,
    ):
        if upload_mode not in ("regular", "lfs"):
            raise ValueError(f"upload_mode must be 'regular' or 'lfs', got {upload_mode!r}")
        owner = Account(user, token, tuple(orgs))  # checks the names before anything is bound
        self.accounts = Accounts([*accounts, *([owner] if token else [])], open_account=owner)
        self.limits = limits or ServerLimits()
        self._log_file = None  # a failed bind calls server_close from inside socketserver's __init__
        self._data_lock = _lock_data_dir(Path(data_dir))
        try:
            self.storage = Storage(
                data_dir,
                max_repo_files=self.limits.max_repo_files,
                index_cache_bytes=self.limits.index_cache_bytes,
            )
            super().__init__(address, _Handler)
        except BaseException:
            self._data_lock.close()
            raise
        removed = self.storage.clean_tmp()  # leftovers of uploads a previous run was interrupted in
        if removed:
            logger.info("removed %d leftover temporary files", removed)
        self.upload_mode = upload_mode
        self._connections_lock = threading.Lock()
        self.open_connections = 0  # connections being served now (at most ``limits.max_connections``)
        self._signing_key = secrets.token_bytes(32)
        self._fault_lock = threading.Lock()
        self.fault: dict | None = None
        self.fault_hits = 0
        # (method, path without query cut to 256 characters, status) of the last requests only
        self.request_log: collections.deque[tuple[str, str, int]] = collections.deque(
            maxlen=self.limits.request_log_entries
        )
        self.set_fault(fault)
        self._log_file = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115

    # ---- configuration --------------------------------------------------------------------------
    def set_fault(self, fault: dict | None) -> None:
        if fault is not None:
            if fault.get("step") not in STEPS:
                raise ValueError(f"fault step must be one of {STEPS}, got {fault.get('step')!r}")
            if fault.get("kind") not in FAULT_KINDS:
                raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {fault.get('kind')!r}")
            fault = {"times": 1, "stall_s": 2.0, **fault}
        with self._fault_lock:
            self.fault = fault
            self.fault_hits = 0

    def take_fault(self, step: str | None) -> dict | None:
        with self._fault_lock:
            f = self.fault
            if step and f and f["step"] == step and self.fault_hits < int(f["times"]):
                self.fault_hits += 1
                return f
        return None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    # ---- credentials ------------------------------------------------------------------------------
    def _sign(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        msg = f"{repo_type}|{repo_id.lower()}|{oid}|{size}".encode()
        return hmac.new(self._signing_key, msg, hashlib.sha256).hexdigest()

    def signed_query(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        """The query string that makes an LFS upload URL usable without a token, like a pre-signed URL."""
        return f"size={size}&sig={self._sign(repo_type, repo_id, oid, size)}"

    def check_signature(self, req: Request) -> int:
        """The upload size a pre-signed LFS URL was signed for; ``Forbidden`` if the signature is wrong."""
        size, signature = parse_size(req.arg("size", "")), req.arg("sig", "")
        expected = self._sign(req.repo_type, req.repo_id, req.params["oid"], size) if size is not None else ""
        if not (signature and expected and hmac.compare_digest(signature.encode(), expected.encode())):
            raise Forbidden("Invalid or expired upload signature")
        return size

    # ---- connections ------------------------------------------------------------------------------
    def process_request(self, request, client_address):
        # A thread per connection, but never more than max_connections: the rest are told to retry.
        with self._connections_lock:
            busy = self.open_connections >= self.limits.max_connections
            if not busy:
                self.open_connections += 1
        if busy:
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connection_closed()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connection_closed()

    def _connection_closed(self) -> None:
        with self._connections_lock:
            self.open_connections -= 1

    def log_request_line(self, method: str, path: str, status: int) -> None:
        self.request_log.append((method, path[:256], status))
        line = header_safe(f"{method} {path} {status}", limit=2000)
        logger.debug(line)
        if self._log_file:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    def server_close(self) -> None:
        super().server_close()
        if self._log_file:
            self._log_file.close()
        self._data_lock.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubServer
    server_version = "local-hub/0.3"

    # Quiet: the server keeps its own request log (no headers, so never the token).
    def log_message(self, format, *args):  # noqa: A002
        pass

    def setup(self):
        # Reads and writes go through ConnectionIO: every wait is bounded, and so is each whole transfer.
        self.connection = self.request
        # Headers and body leave in separate writes: without this, Nagle's algorithm holds the body back until
        # the client's delayed ACK (40 ms per keep-alive request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._io = ConnectionIO(self.connection, self.server.limits.read_timeout_s)
        self._reader = io.BufferedReader(self._io, 64 << 10)
        self.rfile, self.wfile = self._reader, self._io

    def handle_one_request(self):
        """``BaseHTTPRequestHandler.handle_one_request`` with a deadline and a size cap on the head: an idle
        connection waits ``read_timeout_s`` for a request; once its first byte arrives, the request line and
        headers must be complete within ``head_timeout_s`` (or ``read_timeout_s`` if shorter) and
        ``max_head_bytes``."""
        limits = self.server.limits
        self._io.deadline = None
        try:
            if not self.rfile.peek(1):
                self.close_connection = True
                return
            self._io.deadline = time.monotonic() + min(limits.head_timeout_s, limits.read_timeout_s)
            self.raw_requestline = self.rfile.readline(limits.max_request_line_bytes + 1)
            if len(self.raw_requestline) > limits.max_request_line_bytes:
                self.requestline, self.request_version, self.command = "", "", ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            self.rfile = HeadReader(self._reader, limits.max_head_bytes - len(self.raw_requestline))
            try:
                parsed = self.parse_request()
            finally:
                self.rfile = self._reader
            if not parsed:
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
                return
            method()
        except OSError:  # a timeout, a deadline passed, or the client went away
            self.close_connection = True

    def handle_expect_100(self):
        # Not yet: the dispatcher checks the headers first and sends "100 Continue" only when it reads the body.
        return True

    def _send_continue(self) -> None:
        self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # ---- the shared concerns, once for every route --------------------------------------------------
    def _dispatch(self) -> None:
        method = self.command
        self._status, self._logged = 0, False
        target = urllib.parse.urlsplit(self.path)
        body = None
        try:
            expects_continue = self.headers.get("Expect", "").strip().lower() == "100-continue"
            body = RequestBody(
                self.rfile,
                self._io,
                self.headers,
                self.server.limits,
                self._send_continue if expects_continue else None,
            )
            route, params = match(method, target.path)
            request = Request(
                self.server,
                method,
                target.path,
                params,
                urllib.parse.parse_qs(target.query),
                self.headers,
                body,
                self._base_url(),
            )
            self._authorize(route.auth, request)
            trusted = request.account is not None or route.auth is Auth.SIGNED
            body.enforce_limit(self.server.limits.body_limit(route.body, trusted))
            self._inject_fault(route, body)
            response = route.handler(request)
            self._write(response, keep_alive=body.drain())
        except _Dropped:
            self._drop()
        except HubError as e:
            self._write_error(e, body)
        except OSError as e:
            full = disk_full(e, body.length if body is not None else None)
            if full is None:  # a timeout, a deadline passed, or the client went away
                self.close_connection = True
            else:  # storage removed what it had begun to write: answer, do not just hang up
                logger.error("%s %s: %s %s", method, target.path, full.message, e.filename or "")
                self._write_error(full, body)
        except Exception as e:  # noqa: BLE001 - last resort: answer 500 instead of hanging the client
            logger.exception("internal error")
            self._write_error(ServerError(f"Internal server error: {type(e).__name__}"), body)
        finally:
            self._log()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch

    def _authorize(self, auth: Auth, req: Request) -> None:
        """From the headers alone: nothing of the body has been read yet. A private repo outside the caller's
        namespaces takes the same steps as a missing one and ends in the same answer."""
        req.account = self.server.accounts.authenticate(self.headers.get("Authorization", ""))
        if "repo_id" in req.params:
            validate_repo_id(req.repo_id)
        if auth is Auth.WRITE and req.account is None:
            raise Unauthorized("Invalid credentials in Authorization header: a valid write token is required")
        if auth in (Auth.READ, Auth.WRITE) and "repo_id" in req.params:
            record = self.server.storage.lookup(req.repo_type, req.repo_id)
            account = req.account
            visible = record is not None and (
                not record.private or (account is not None and account.owns(record.namespace))
            )
            if not visible:
                raise repo_not_found(req.repo_type, req.repo_id)
            if auth is Auth.WRITE:
                account.check_writes(record.namespace, f"to {record.repo_id}")
        if auth is Auth.SIGNED:
            self.server.check_signature(req)

    def _inject_fault(self, route: Route, body: RequestBody) -> None:
        fault = self.server.take_fault(route.step)
        if not fault:
            return
        body.drain()
        if fault["kind"] == "500":
            raise ServerError(f"Injected server error at step {route.step}")
        if fault["kind"] == "400":
            raise BadRequest(f"Injected client error at step {route.step}", code="InjectedClientError")
        if fault["kind"] == "stall":
            time.sleep(float(fault["stall_s"]))
        raise _Dropped()

    # ---- answers --------------------------------------------------------------------------------------
    def _base_url(self) -> str:
        host = self.headers.get("Host") or ""
        # The Host header ends up in URLs the client follows: only a plain host[:port] is used.
        return f"http://{host}" if re.fullmatch(r"[A-Za-z0-9.\-\[\]:]{1,255}", host) else self.server.url

    def _write(self, response: Response, keep_alive: bool = True) -> None:
        if not keep_alive:
            self.close_connection = True
        self._status = response.status
        self._log()  # before the answer leaves: a client that has it finds its request in the log
        pieces = response.body if isinstance(response.body, tuple) else (response.body,)
        length = response.length if response.file is not None else sum(len(p) for p in pieces)
        # The answer must leave at the minimum rate too: a client that stops reading loses the connection.
        self._io.deadline = self.server.limits.transfer_deadline(length)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(length))
        for name, value in response.headers.items():
            self.send_header(name, header_safe(value))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self._send_body(response, pieces)
        self._io.deadline = None

    def _send_body(self, response: Response, pieces: tuple[bytes, ...]) -> None:
        if response.file is None:
            for piece in pieces:
                self.wfile.write(piece)
            return
        with open(response.file, "rb") as fh:
            fh.seek(response.offset)
            left = response.length
            while left > 0:
                chunk = fh.read(min(1 << 20, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def _write_error(self, error: HubError, body: RequestBody | None) -> None:
        # An unread body that is small is read and dropped (keep-alive survives); a large one closes.
        keep_alive = body is not None and body.drain()
        headers = {"X-Error-Message": error.message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        response = Response(
            error.status, json.dumps({"error": error.message, **error.body}).encode(), headers=headers
        )
        with contextlib.suppress(OSError):
            self._write(response, keep_alive=keep_alive)
            if not keep_alive:
                self._linger()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends for a moment: closing with unread data would
        reset the connection and could destroy the answer before the client reads it."""
        self.connection.shutdown(socket.SHUT_WR)
        self.connection.settimeout(0.25)
        deadline, dropped = time.monotonic() + 1.0, 0
        while time.monotonic() < deadline and dropped < (4 << 20):
            data = self.connection.recv(1 << 16)
            if not data:
                break
            dropped += len(data)

    def _log(self) -> None:
        if not self._logged:
            self._logged = True
            self.server.log_request_line(self.command, urllib.parse.urlsplit(self.path).path, self._status)

    def _drop(self) -> None:
        self._status = -1
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# ---- running in the background ----------------------------------------------------------------------
class BackgroundHub:
    """A server running in a daemon thread: ``.url``, ``.server`` (for ``set_fault``), ``.stop()``."""

    def __init__(self, data_dir, token: str | None, host: str = "127.0.0.1", port: int = 0, **options):
        self.server = HubServer((host, port), data_dir, token, **options)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="local-hub", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return self.server.url

    def set_fault(self, fault: dict | None) -> None:
        self.server.set_fault(fault)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> BackgroundHub:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
