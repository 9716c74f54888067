"""A Hub-compatible HTTP server for offline work and tests.

The unmodified ``huggingface_hub`` and ``transformers`` clients talk to it through ``HF_ENDPOINT``.
Standard library only (``http.server``), plus PyYAML for README front matter.

Requests go through one dispatcher (``_Handler._dispatch``) over the route table in ``routes.py``: it
checks the body's framing and the route's size limit and authorization from the headers alone, before a
byte of the body is read; injects faults; and maps every ``HubError`` to its status, ``X-Error-Code`` and
a sanitised ``X-Error-Message`` (request text is never reflected raw into a header). Connections that stay
silent longer than ``ServerLimits.read_timeout_s`` are closed, and at most ``max_connections`` are served
at once (the rest get a 503 at once).

Private repos answer anonymous (or wrong-token) reads exactly as a missing repo does: 404 with
``X-Error-Code: RepoNotFound`` and the same message, so a repo's existence is never revealed. (The real
Hub answers 401 to anonymous requests for both; the clients map either to ``RepositoryNotFoundError``
through ``X-Error-Code``.) Pull requests (``create_pr=True``, discussions) are refused with a 400
``PullRequestsNotSupported`` that says to commit to a branch instead.

Uploads. The client decides between Xet and LFS by itself (Xet whenever ``hf_xet`` is importable and
``HF_HUB_DISABLE_XET`` is unset) and this server does not speak Xet, so ``upload_mode`` picks what
``/preupload`` answers:

* ``"regular"`` (default): every file is sent base64 inside the ndjson commit. Works for every client; the
  commit is read line by line, so memory holds one file at a time.
* ``"lfs"``: large or binary files are marked ``lfs`` as on the Hub, and go through the LFS batch API,
  a pre-signed PUT streamed to disk and a verify call. Clients must run with ``HF_HUB_DISABLE_XET=1``.

Either way files are stored the same way and downloads of large/binary files carry the LFS headers.

Faults. ``fault={"step": STEP, "kind": "500"|"400"|"drop"|"stall", "times": N, "stall_s": S}`` makes the
next N requests of that protocol step fail before anything is changed: a 500 or 400 answer, a connection
closed without an answer, or a connection held for S seconds and then closed. Steps: see ``STEPS``.
``HubServer.set_fault`` changes it while the server runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import re
import secrets
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .errors import BadRequest, Forbidden, HubError, InjectedFault, Unauthorized
from .routes import Auth, Request, Response, Route, match
from .storage import Storage, repo_not_found, validate_repo_id
from .transport import RequestBody, ServerLimits

logger = logging.getLogger("hub_server")

STEPS = (
    "whoami",
    "create_repo",
    "delete_repo",
    "repo_info",
    "validate_yaml",
    "preupload",
    "lfs_batch",
    "lfs_upload",
    "lfs_verify",
    "commit",
    "resolve",
    "tree",
    "paths_info",
    "refs",
    "commits",
    "branch",
    "tag",
    "settings",
    "xet",
)
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
        upload_mode: str = "regular",
        fault: dict | None = None,
        log_file: str | None = None,
        limits: ServerLimits | None = None,
    ):
        if upload_mode not in ("regular", "lfs"):
            raise ValueError(f"upload_mode must be 'regular' or 'lfs', got {upload_mode!r}")
        self._data_lock = _lock_data_dir(Path(data_dir))
        try:
            super().__init__(address, _Handler)
        except OSError:
            self._data_lock.close()
            raise
        self.storage = Storage(data_dir)
        removed = self.storage.clean_tmp()  # leftovers of uploads a previous run was interrupted in
        if removed:
            logger.info("removed %d leftover temporary files", removed)
        self.token = token
        self.user = user
        self.upload_mode = upload_mode
        self.limits = limits or ServerLimits()
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self._signing_key = secrets.token_bytes(32)
        self._fault_lock = threading.Lock()
        self.fault: dict | None = None
        self.fault_hits = 0
        self.request_log: list[tuple[str, str, int]] = []  # (method, path without query, status)
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
    def token_ok(self, headers) -> bool:
        if self.token is None:
            return True
        auth = headers.get("Authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def _sign(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        msg = f"{repo_type}|{repo_id}|{oid}|{size}".encode()
        return hmac.new(self._signing_key, msg, hashlib.sha256).hexdigest()

    def signed_query(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        """The query string that makes an LFS upload URL usable without a token, like a pre-signed URL."""
        return f"size={size}&sig={self._sign(repo_type, repo_id, oid, size)}"

    def check_signature(self, req: Request) -> None:
        size = req.query.get("size", [""])[0]
        sig = req.query.get("sig", [""])[0]
        expected = (
            self._sign(req.repo_type, req.repo_id, req.params["oid"], int(size)) if size.isdigit() else ""
        )
        if not (expected and hmac.compare_digest(sig, expected)):
            raise Forbidden("Invalid or expired upload signature")

    # ---- connections ------------------------------------------------------------------------------
    def process_request(self, request, client_address):
        # A thread per connection, but never more than max_connections: the rest are told to retry.
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def log_request_line(self, method: str, path: str, status: int) -> None:
        self.request_log.append((method, path, status))
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
    server_version = "local-hub/0.2"

    # Quiet: the server keeps its own request log (no headers, so never the token).
    def log_message(self, format, *args):  # noqa: A002
        pass

    def setup(self):
        self.timeout = self.server.limits.read_timeout_s  # idle and slow connections are closed
        super().setup()

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # ---- the shared concerns, once for every route --------------------------------------------------
    def _dispatch(self, method: str) -> None:
        self._status = 0
        target = urllib.parse.urlsplit(self.path)
        body = None
        try:
            body = RequestBody(self.rfile, self.headers, self.server.limits.read_timeout_s)
            route, params = match(method, target.path)
            request = Request(
                self.server,
                method,
                params,
                urllib.parse.parse_qs(target.query),
                self.headers,
                body,
                self._base_url(),
            )
            self._authorize(route.auth, request)
            body.enforce_limit(self.server.limits.body_limit(route.body))
            self._inject_fault(route, body)
            response = route.handler(request)
            self._write(response, keep_alive=body.drain())
        except _Dropped:
            self._drop()
        except HubError as e:
            self._write_error(e, body)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - last resort: answer 500 instead of hanging the client
            logger.exception("internal error")
            self._write_error(HubError(f"Internal server error: {type(e).__name__}", 500, None), body)
        finally:
            self.server.log_request_line(method, target.path, self._status)

    def _authorize(self, auth: Auth, req: Request) -> None:
        """From the headers alone: nothing of the body has been read yet."""
        if "repo_id" in req.params:
            validate_repo_id(req.repo_id)
        if auth is Auth.WRITE and not self.server.token_ok(self.headers):
            raise Unauthorized("Invalid credentials in Authorization header: a valid write token is required")
        if auth is Auth.READ:
            storage = self.server.storage
            visible = storage.exists(req.repo_type, req.repo_id) and (
                not storage.meta(req.repo_type, req.repo_id)["private"] or self.server.token_ok(self.headers)
            )
            if not visible:
                raise repo_not_found(req.repo_type, req.repo_id)
        if auth is Auth.SIGNED:
            self.server.check_signature(req)

    def _inject_fault(self, route: Route, body: RequestBody) -> None:
        fault = self.server.take_fault(route.step)
        if not fault:
            return
        body.drain()
        if fault["kind"] == "500":
            raise InjectedFault(f"Injected server error at step {route.step}")
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
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        length = response.length if response.file is not None else len(response.body)
        self.send_header("Content-Length", str(length))
        for name, value in response.headers.items():
            self.send_header(name, header_safe(value))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        if response.file is None:
            self.wfile.write(response.body)
            return
        with open(response.file, "rb") as fh:
            fh.seek(response.offset)
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                self.wfile.write(chunk)

    def _write_error(self, error: HubError, body: RequestBody | None) -> None:
        # An unread body that is small is read and dropped (keep-alive survives); a large one closes.
        keep_alive = body is not None and body.drain()
        headers = {"X-Error-Message": error.message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        response = Response(error.status, json.dumps({"error": error.message}).encode(), headers=headers)
        with contextlib.suppress(OSError):
            self._write(response, keep_alive=keep_alive)
            if not keep_alive:
                self._linger()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends for a moment: closing with unread data would
        reset the connection and could destroy the answer before the client reads it."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_WR)
        self.connection.settimeout(0.25)
        deadline, dropped = time.monotonic() + 1.0, 0
        while time.monotonic() < deadline and dropped < (4 << 20):
            data = self.connection.recv(1 << 16)
            if not data:
                break
            dropped += len(data)

    def _drop(self) -> None:
        self._status = -1
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


# ---- starting and stopping --------------------------------------------------------------------------
def make_server(host: str, port: int, data_dir, token: str | None, **options) -> HubServer:
    """Bind a server (port 0 picks a free port); call ``serve_forever()`` or use ``running_server``."""
    return HubServer((host, port), data_dir, token, **options)


def serve(host: str, port: int, data_dir, token: str | None, fault: dict | None = None, **options) -> None:
    """Run in the foreground until interrupted."""
    server = make_server(host, port, data_dir, token, fault=fault, **options)
    try:
        server.serve_forever()
    finally:
        server.server_close()


class BackgroundHub:
    """A server running in a daemon thread: ``.url``, ``.server`` (for ``set_fault``), ``.stop()``."""

    def __init__(self, data_dir, token: str | None, host: str = "127.0.0.1", port: int = 0, **options):
        self.server = make_server(host, port, data_dir, token, **options)
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


@contextlib.contextmanager
def running_server(data_dir, token: str | None, **options):
    """``with running_server(dir, token) as hub: hub.url ...``"""
    hub = BackgroundHub(data_dir, token, **options)
    try:
        yield hub
    finally:
        hub.stop()
