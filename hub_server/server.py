"""A Hub-compatible HTTP server the unmodified ``huggingface_hub`` and ``transformers`` clients talk to through
``HF_ENDPOINT``. uvicorn frames HTTP (``_Protocol`` adds a connection cap and a head deadline); ``HubServer`` is
the ASGI app whose dispatcher applies the route table's shared concerns from the headers alone
(docs/security.md). ``fault={"step", "kind", "times", "stall_s"}`` fails the next requests of that step."""

from __future__ import annotations

import asyncio
import collections
import fcntl
import hashlib
import hmac
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import uvicorn
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from briskbert.errors import SettingError
from briskbert.hub_cards.front_matter import YamlLimits

from . import errors
from .errors import BadRequest, HubError
from .names import is_repo_name, repo_key, validate_repo_id
from .protocol import parse_size
from .routes import STEPS, Auth, Route, header_safe, json_response, match, read_body, repo_of
from .storage import Storage

logger = logging.getLogger("hub_server")

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
)


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits (docs/security.md)."""

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


@dataclass(frozen=True)
class Account:
    """A user (``name``) and the organisations its token may also write in; as on the Hub, a token reads
    private repos and writes only under those names. ``token`` is None only for a server without any token."""

    name: str
    token: str | None
    orgs: tuple[str, ...] = ()

    def __post_init__(self):
        for namespace in (self.name, *self.orgs):
            if not is_repo_name(namespace):
                raise SettingError(
                    "user", f"{namespace!r} cannot be a user or organisation name (letters, digits, -_.)"
                )

    def owns(self, namespace: str) -> bool:
        return repo_key(namespace) in {repo_key(n) for n in (self.name, *self.orgs)}

    def check_writes(self, namespace: str, what: str) -> None:
        if not self.owns(namespace):
            mine = ", ".join([self.name, *self.orgs])
            raise errors.Forbidden(
                f"You don't have the rights to write {what}: this token writes only under {mine}"
            )

    def whoami(self) -> dict:
        auth = {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}}
        orgs = [{"type": "org", "name": org, "fullname": org} for org in self.orgs]
        return {"type": "user", "name": self.name, "fullname": self.name, "orgs": orgs, "auth": auth}


def token_digest(token: str) -> bytes:
    """Tokens are compared by digest: the time a lookup takes tells nothing about how much of a token was right."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Body:
    """The ASGI ``receive`` a request's body is read through, within its limit and deadline. Nothing is read
    until a handler asks (a request refused from its headers never gets its ``100 Continue``)."""

    def __init__(self, receive, headers, limits: ServerLimits):
        self._receive, self._limits = receive, limits
        declared = headers.get("content-length")
        self.length = int(declared) if declared is not None else None  # h11 checked its framing
        self.done = self.length == 0 or (self.length is None and "transfer-encoding" not in headers)
        self.limit = self.received = 0
        self.broken = False  # it timed out: nothing more is read
        self._started: float | None = None

    def enforce_limit(self, limit: int) -> None:
        """Refuse a declared length over ``limit`` now; a chunked body is cut off when it passes it."""
        self.limit = limit
        if self.length is not None and self.length > limit:
            raise errors.PayloadTooLarge(
                f"Request body of {self.length} bytes is larger than the limit of {limit} bytes"
            )

    async def receive(self) -> dict:
        if self.done:
            return {"type": "http.request", "body": b"", "more_body": False}
        limits, now = self._limits, time.monotonic()
        self._started = self._started or now
        expected = self.length if self.length is not None else self.received + 1024
        deadline = self._started + limits.read_timeout_s + expected / limits.min_transfer_rate
        try:
            with anyio.fail_after(max(min(deadline - now, limits.read_timeout_s), 0)):
                message = await self._receive()
        except TimeoutError:
            self.broken = True
            raise errors.RequestTimeout(
                f"No data for {limits.read_timeout_s:g} s, or less than {limits.min_transfer_rate} bytes/s "
                "after that: the request body did not arrive in time"
            ) from None
        if message["type"] == "http.disconnect":
            self.broken = True
            raise BadRequest("The connection closed before the whole request body arrived")
        self.done = not message.get("more_body", False)
        self.received += len(message.get("body", b""))
        if self.received > self.limit:
            raise errors.PayloadTooLarge(f"Request body larger than the limit of {self.limit} bytes")
        return message


class DataDirInUse(RuntimeError):  # two servers would clean each other's temporary files
    pass


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 with what it lacks: at most ``max_connections`` connections (the rest get a 503 as they
    connect), a silent new connection closed after ``timeout_keep_alive``, and a request head complete
    ``head_timeout_s`` after its first byte, whatever the pace ("slowloris")."""

    head_timeout_s = 10.0
    max_connections = 64
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        if len(self.connections) >= self.max_connections:
            self.transport = transport
            transport.write(_BUSY)
            transport.close()
            return
        # Without TCP_NODELAY an answer's body waits for the client's delayed ACK of its head (40 ms a request).
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late, self.cycle)
        super().data_received(data)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before and self._head_timer is not None:  # a head arrived
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self, cycle) -> None:
        self._head_timer = None
        if self.cycle is cycle:
            self.transport.close()


class HubServer:
    def __init__(
        self,
        address,
        data_dir,
        token: str | None,
        *,
        user: str = "testuser",
        orgs: Iterable[str] = (),
        accounts: Iterable[Account] = (),
        upload_mode: str = "regular",  # or "lfs": large or binary files go through the LFS batch API
        fault: dict | None = None,
        log_file: str | None = None,
        limits: ServerLimits | None = None,
    ):
        # With no token at all every request acts for ``user``; otherwise one without a known token for nobody.
        self.open_account = Account(user, token, tuple(orgs))  # checks the names before anything is bound
        accounts = [*accounts, *([self.open_account] if token else [])]
        self.accounts = {token_digest(a.token or ""): a for a in accounts}
        if len(self.accounts) != len(accounts) or any(a.token is None for a in accounts):
            raise ValueError("every account needs its own token")
        self.open_account = None if accounts else self.open_account
        self.limits = limits = limits or ServerLimits()
        self.upload_mode = upload_mode
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        self._data_lock = open(Path(data_dir) / ".server.lock", "a+")  # noqa: SIM115 - held while serving
        try:
            fcntl.flock(self._data_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.storage = Storage(data_dir, limits.max_repo_files, limits.index_cache_revisions)
            self.socket = socket.create_server(address, backlog=64)  # bound now: a port in use fails here
        except BaseException as error:
            self._data_lock.close()
            if isinstance(error, BlockingIOError):
                raise DataDirInUse(
                    f"{data_dir} is already served by another local Hub; stop it or use another folder"
                ) from None
            raise
        self._signing_key = secrets.token_bytes(32)
        self._fault_lock = threading.Lock()
        self.set_fault(fault)
        # (method, path cut to 256 characters, status) of the last requests only
        self.request_log = collections.deque(maxlen=limits.request_log_entries)
        self._log_file = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115

        class Protocol(_Protocol):
            head_timeout_s = min(limits.head_timeout_s, limits.read_timeout_s)
            max_connections = limits.max_connections

        config = uvicorn.Config(
            self,
            http=Protocol,
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_keep_alive=limits.read_timeout_s,
            # A head in pieces is refused past twice max_head_bytes; _check_head applies the limit itself.
            h11_max_incomplete_event_size=2 * limits.max_head_bytes,
        )
        self._uvicorn = uvicorn.Server(config)

    def set_fault(self, fault: dict | None) -> None:
        if fault is not None and fault.get("step") not in STEPS:  # the command line's choices check the kind
            raise SettingError("fault_step", f"must be one of {', '.join(STEPS)}, got {fault.get('step')!r}")
        fault = fault and {"times": 1, "stall_s": 2.0, **fault}
        with self._fault_lock:
            self.fault: dict | None = fault
            self.fault_hits = 0

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def open_connections(self) -> int:
        return len(self._uvicorn.server_state.connections)

    def sign(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        """What makes an LFS upload URL usable without a token, like a pre-signed URL."""
        msg = f"{repo_type}|{repo_key(repo_id)}|{oid}|{size}".encode()
        return hmac.new(self._signing_key, msg, hashlib.sha256).hexdigest()

    def check_signature(self, req: Request) -> int:
        """The upload size a pre-signed LFS URL was signed for; ``Forbidden`` if the signature is wrong."""
        size, signature = parse_size(req.query_params.get("size")), req.query_params.get("sig", "")
        expected = self.sign(*repo_of(req), req.path_params["oid"], size) if size is not None else ""
        if not (signature and expected and hmac.compare_digest(signature.encode(), expected.encode())):
            raise errors.Forbidden("Invalid or expired upload signature")
        return size

    def serve_forever(self) -> None:
        self._uvicorn.run(sockets=[self.socket])

    def server_close(self) -> None:
        self.socket.close()
        if self._log_file:
            self._log_file.close()
        self._data_lock.close()

    def base_url(self, req: Request) -> str:
        host = req.headers.get("Host") or ""
        # The Host header ends up in URLs the client follows: only a plain host[:port] is used.
        return f"http://{host}" if re.fullmatch(r"[A-Za-z0-9.\-\[\]:]{1,255}", host) else self.url

    # ---- the ASGI app ---------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        scope["app"] = self  # what ``Request.app`` returns to a handler
        body = Body(receive, Headers(scope=scope), self.limits)
        response = await anyio.to_thread.run_sync(self._dispatch, Request(scope, body.receive), body)
        if response is not None:  # None: a dropped connection, no answer at all
            # The answer must leave at the minimum rate too: a client that stops reading loses the connection.
            length = int(response.headers.get("content-length", 0))
            with anyio.move_on_after(
                self.limits.read_timeout_s + length / self.limits.min_transfer_rate
            ) as sent:
                await response(scope, receive, send)
        if response is None or sent.cancelled_caught:
            for connection in list(self._uvicorn.server_state.connections):
                if list(connection.client or ()) == list(scope.get("client") or ()):
                    connection.transport.abort()

    # ---- the shared concerns, once for every route (in a worker thread) ------------------------------
    def _dispatch(self, req: Request, body: Body) -> Response | None:
        method, path = req.method, req.scope["raw_path"].decode("latin-1")
        waits = req.headers.get("expect", "").lower() == "100-continue"
        try:
            self._check_head(req)
            route, req.scope["path_params"] = match(method, path)
            self._authorize(route.auth, req)
            # Without a valid token (or upload signature) any body gets the public cap.
            cap = getattr(self.limits, route.body)
            trusted = req.state.account is not None or route.auth is Auth.SIGNED
            body.enforce_limit(cap if trusted else min(cap, self.limits.max_public_body_bytes))
            # None: the fault injector drops the connection without an answer
            response = None if self._inject_fault(route, req) else route.handler(req)
        except HubError as e:
            response = self._error(e, body, waits)
        except Exception as e:  # noqa: BLE001 - last resort: answer 500 instead of hanging the client
            error = errors.disk_full(e, body.length) if isinstance(e, OSError) else None
            if error is None:
                logger.exception("internal error")
                error = errors.ServerError(f"Internal server error: {type(e).__name__}")
            else:  # storage removed what it had begun to write
                logger.error("%s %s: %s %s", method, path, error.message, e.filename or "")
            response = self._error(error, body, waits)
        status = response.status_code if response is not None else -1
        self.request_log.append((method, path[:256], status))
        if self._log_file:
            print(header_safe(f"{method} {path} {status}", limit=2000), file=self._log_file, flush=True)
        return response

    def _check_head(self, req: Request) -> None:
        """A long request line or head (h11 caps only a head in pieces), both body framings at once."""
        scope = req.scope
        line = len(scope["raw_path"]) + len(scope["query_string"])
        if line > self.limits.max_request_line_bytes:
            raise HubError("Request line too long", status=414, code="URITooLong")
        if line + sum(len(k) + len(v) + 4 for k, v in scope["headers"]) > self.limits.max_head_bytes:
            raise HubError("Request header fields too large", status=431, code="HeadersTooLarge")
        if "transfer-encoding" in req.headers and "content-length" in req.headers:
            raise BadRequest(
                "Send Content-Length or Transfer-Encoding, not both", headers={"Connection": "close"}
            )

    def _authorize(self, auth: Auth, req: Request) -> None:
        """From the headers alone. A private repo outside the caller's namespaces takes the same steps as a
        missing one and ends in the same answer."""
        given = req.headers.get("Authorization", "")
        given = given[7:].strip() if given[:7].lower() == "bearer " else ""
        account = self.open_account or (self.accounts.get(token_digest(given)) if given else None)
        req.state.account = account
        on_repo = "repo_id" in req.path_params
        if on_repo:
            validate_repo_id(req.path_params["repo_id"])
        if auth is Auth.WRITE and account is None:
            raise errors.Unauthorized(
                "Invalid credentials in Authorization header: a valid write token is required"
            )
        if auth in (Auth.READ, Auth.WRITE) and on_repo:
            record = self.storage.lookup(*repo_of(req))
            if record is None or record.private and not (account and account.owns(record.namespace)):
                raise errors.repo_not_found(*repo_of(req))
            if auth is Auth.WRITE:
                account.check_writes(record.namespace, f"to {record.repo_id}")
        if auth is Auth.SIGNED:
            self.check_signature(req)

    def _inject_fault(self, route: Route, req: Request) -> bool:
        """Raise the injected error, or whether to drop the connection (after a stall)."""
        with self._fault_lock:
            fault = self.fault
            if not (
                route.step and fault and fault["step"] == route.step and self.fault_hits < fault["times"]
            ):
                return False
            self.fault_hits += 1
        if fault["kind"] == "500":
            raise errors.ServerError(f"Injected server error at step {route.step}")
        if fault["kind"] == "400":
            raise BadRequest(f"Injected client error at step {route.step}", code="InjectedClientError")
        read_body(req)
        if fault["kind"] == "stall":
            time.sleep(float(fault["stall_s"]))
        return True

    @staticmethod
    def _error(error: HubError, body: Body, waits_for_continue: bool) -> Response:
        headers = {"X-Error-Code": error.code, "X-Error-Message": header_safe(error.message), **error.headers}
        # uvicorn reads and drops a small unread body after the answer (closing on unread data would reset the
        # connection); a large, chunked or broken one, or one the client was not told to send, closes it.
        unread = body.length - body.received if body.length is not None else None
        if not body.done and (waits_for_continue or body.broken or unread is None or unread > 4 << 20):
            headers["Connection"] = "close"
        return json_response({"error": error.message, **error.body}, error.status, headers)


class BackgroundHub:
    """A server running in a daemon thread: ``.url``, ``.server``, ``.stop()``; a context manager."""

    def __init__(self, data_dir, token: str | None, host: str = "127.0.0.1", port: int = 0, **options):
        self.server = HubServer((host, port), data_dir, token, **options)
        self.url = self.server.url
        self._thread = threading.Thread(target=self.server.serve_forever, name="local-hub", daemon=True)
        self._thread.start()
        while not self.server._uvicorn.started and self._thread.is_alive():
            time.sleep(0.01)

    def set_fault(self, fault: dict | None) -> None:
        self.server.set_fault(fault)

    def stop(self) -> None:
        self.server._uvicorn.should_exit = True
        self._thread.join(timeout=5)
        self.server.server_close()

    def __enter__(self) -> BackgroundHub:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
