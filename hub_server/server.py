"""A Hub-compatible HTTP server for offline work and tests.

The unmodified ``huggingface_hub`` and ``transformers`` clients talk to it through ``HF_ENDPOINT``.
Standard library only (``http.server``), plus PyYAML for README front matter.

Uploads. The client decides between Xet and LFS by itself (Xet whenever ``hf_xet`` is importable and
``HF_HUB_DISABLE_XET`` is unset) and this server does not speak Xet, so ``upload_mode`` picks what
``/preupload`` answers:

* ``"regular"`` (default): every file is sent base64 inside the ndjson commit. Works for every client.
* ``"lfs"``: large or binary files are marked ``lfs`` as on the Hub, and go through the LFS batch API,
  a pre-signed PUT and a verify call. Clients must run with ``HF_HUB_DISABLE_XET=1``.

Either way files are stored the same way and downloads of large/binary files carry the LFS headers.

Faults. ``fault={"step": STEP, "kind": "500"|"drop"|"stall", "times": N, "stall_s": S}`` makes the next N
requests of that protocol step fail before anything is changed: a 500 answer, a connection closed
without an answer, or a connection held for S seconds and then closed. Steps: see ``STEPS``.
``HubServer.set_fault`` changes it while the server runs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath

from briskbert.hub_cards.rules import check_metadata, split_front_matter

from .storage import (
    REPO_TYPES,
    FileEntry,
    HubError,
    Storage,
    git_blob_oid,
    looks_like_lfs,
    validate_path,
    validate_ref_name,
    validate_repo_id,
)

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
_CHUNK = 1 << 20


class _Dropped(Exception):
    """Raised by the fault injector to close the connection without an answer."""


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
    ):
        if upload_mode not in ("regular", "lfs"):
            raise ValueError(f"upload_mode must be 'regular' or 'lfs', got {upload_mode!r}")
        super().__init__(address, _Handler)
        self.storage = Storage(data_dir)
        self.token = token
        self.user = user
        self.upload_mode = upload_mode
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
            if fault.get("kind") not in ("500", "drop", "stall"):
                raise ValueError(f"fault kind must be '500', 'drop' or 'stall', got {fault.get('kind')!r}")
            fault = {"times": 1, "stall_s": 2.0, **fault}
        with self._fault_lock:
            self.fault = fault
            self.fault_hits = 0

    def take_fault(self, step: str) -> dict | None:
        with self._fault_lock:
            f = self.fault
            if f and f["step"] == step and self.fault_hits < int(f["times"]):
                self.fault_hits += 1
                return f
        return None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def sign(self, repo_type: str, repo_id: str, oid: str, size: int) -> str:
        msg = f"{repo_type}|{repo_id}|{oid}|{size}".encode()
        return hmac.new(self._signing_key, msg, hashlib.sha256).hexdigest()

    def log_request_line(self, method: str, path: str, status: int) -> None:
        self.request_log.append((method, path, status))
        line = f"{method} {path} {status}"
        logger.debug(line)
        if self._log_file:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    def server_close(self) -> None:
        super().server_close()
        if self._log_file:
            self._log_file.close()


def _repo_prefix(repo_type: str) -> str:
    return "" if repo_type == "model" else f"{repo_type}s/"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubServer
    server_version = "local-hub/0.1"

    # Quiet: the server keeps its own request log (no headers, so never the token).
    def log_message(self, format, *args):  # noqa: A002
        pass

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

    # ---- plumbing -------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        self._status = 0
        self._body_read = False
        parsed = urllib.parse.urlsplit(self.path)
        self._query = urllib.parse.parse_qs(parsed.query)
        raw_segments = [s for s in parsed.path.split("/")]
        if raw_segments and raw_segments[0] == "":
            raw_segments = raw_segments[1:]
        self._segs = [urllib.parse.unquote(s) for s in raw_segments]
        try:
            self._route(method)
        except _Dropped:
            self._drop()
        except HubError as e:
            self._error(e.status, e.message, e.code)
        except (TimeoutError, ConnectionError, BrokenPipeError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - last resort: answer 500 instead of hanging the client
            logger.exception("internal error")
            self._error(500, f"Internal server error: {type(e).__name__}", None)
        finally:
            self.server.log_request_line(method, parsed.path, self._status)

    def _drop(self) -> None:
        self._status = -1
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _fault(self, step: str) -> None:
        f = self.server.take_fault(step)
        if not f:
            return
        self._read_body()
        if f["kind"] == "500":
            raise HubError(500, f"Injected server error at step {step}", None)
        if f["kind"] == "stall":
            time.sleep(float(f["stall_s"]))
        raise _Dropped()

    def _read_body(self) -> bytes:
        if self._body_read:
            return self._body
        self._body_read = True
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._body = b"".join(self._iter_chunked())
        else:
            n = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(n) if n else b""
        return self._body

    def _iter_chunked(self):
        while True:
            line = self.rfile.readline()
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield self.rfile.read(size)
            self.rfile.readline()

    def _iter_body(self):
        """Stream the request body (used for LFS uploads)."""
        self._body_read = True
        self._body = b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            yield from self._iter_chunked()
            return
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(_CHUNK, left))
            if not chunk:
                raise ConnectionError("client went away")
            left -= len(chunk)
            yield chunk

    def _json_body(self):
        try:
            return json.loads(self._read_body() or b"{}")
        except ValueError as e:
            raise HubError(400, f"Invalid JSON body: {e}", "BadRequest") from e

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: dict | None = None,
    ) -> None:
        if not self._body_read:
            self._read_body()  # keep-alive: the request body must be consumed
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, obj, status: int = 200, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers=headers)

    def _error(
        self,
        status: int,
        message: str,
        code: str | None,
        extra: dict | None = None,
        headers: dict | None = None,
    ) -> None:
        h = {"X-Error-Message": message.encode("ascii", "replace").decode()}
        if code:
            h["X-Error-Code"] = code
        h.update(headers or {})
        with contextlib.suppress(OSError):
            self._json({"error": message, **(extra or {})}, status=status, headers=h)

    def _token_ok(self) -> bool:
        if self.server.token is None:
            return True
        auth = self.headers.get("Authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        return bool(given) and hmac.compare_digest(given.encode(), self.server.token.encode())

    def _require_write(self) -> None:
        if not self._token_ok():
            raise HubError(
                401,
                "Invalid credentials in Authorization header: a valid write token is required",
                "Unauthorized",
            )

    def _require_read(self, repo_type: str, repo_id: str) -> None:
        st = self.server.storage
        if not st.exists(repo_type, repo_id):
            raise HubError(404, f"Repository Not Found for url: {repo_type}s/{repo_id}.", "RepoNotFound")
        if st.meta(repo_type, repo_id)["private"] and not self._token_ok():
            # The Hub answers like this for private repos: indistinguishable from a missing one.
            raise HubError(
                401,
                f"Repository Not Found for url: {repo_type}s/{repo_id}. "
                "If the repo is private, make sure you are authenticated.",
                "RepoNotFound",
            )

    def _base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.server.url[7:]}"

    # ---- routing --------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        s = self._segs
        if s[:1] == ["api"]:
            return self._route_api(method, s[1:])
        repo_type = "model"
        if s and s[0] in ("datasets", "spaces", "kernels"):
            repo_type, s = s[0][:-1], s[1:]
        if len(s) >= 4 and s[2] == "resolve" and method in ("GET", "HEAD"):
            self._fault("resolve")
            return self._resolve(repo_type, f"{s[0]}/{s[1]}", s[3], "/".join(s[4:]))
        if (
            len(s) == 6
            and s[1].endswith(".git")
            and s[2:] == ["info", "lfs", "objects", "batch"]
            and method == "POST"
        ):
            self._fault("lfs_batch")
            return self._lfs_batch(repo_type, f"{s[0]}/{s[1][:-4]}")
        if s[:1] == ["lfs-upload"] and len(s) == 5 and method == "PUT":
            self._fault("lfs_upload")
            return self._lfs_upload(s[1], f"{s[2]}/{s[3]}", s[4])
        if s[:1] == ["lfs-verify"] and len(s) == 5 and method == "POST":
            self._fault("lfs_verify")
            return self._lfs_verify(s[1], f"{s[2]}/{s[3]}", s[4])
        raise HubError(404, f"Not found: {method} /{'/'.join(self._segs)}", "NotFound")

    def _route_api(self, method: str, s: list[str]) -> None:
        if s == ["whoami-v2"] and method == "GET":
            self._fault("whoami")
            if not self._token_ok():
                raise HubError(401, "Invalid user token.", "Unauthorized")
            return self._json(
                {
                    "type": "user",
                    "name": self.server.user,
                    "fullname": self.server.user,
                    "orgs": [],
                    "auth": {
                        "type": "access_token",
                        "accessToken": {"displayName": "local", "role": "write"},
                    },
                }
            )
        if s == ["agent-harnesses"]:
            return self._json({"standardEnvVars": [], "harnesses": {}})
        if s == ["validate-yaml"] and method == "POST":
            self._fault("validate_yaml")
            return self._validate_yaml()
        if s[:1] == ["repos"] and len(s) == 2:
            if s[1] == "create" and method == "POST":
                self._fault("create_repo")
                return self._create_repo()
            if s[1] == "delete" and method == "DELETE":
                self._fault("delete_repo")
                return self._delete_repo()
        if len(s) >= 3 and s[0] in {t + "s" for t in REPO_TYPES}:
            repo_type, repo_id, rest = s[0][:-1], f"{s[1]}/{s[2]}", s[3:]
            validate_repo_id(repo_id)
            return self._route_repo(method, repo_type, repo_id, rest)
        raise HubError(404, f"Not found: {method} /api/{'/'.join(s)}", "NotFound")

    def _route_repo(self, method: str, repo_type: str, repo_id: str, rest: list[str]) -> None:
        op = rest[0] if rest else ""
        if method == "GET" and (not rest or (op == "revision" and len(rest) >= 2)):
            self._fault("repo_info")
            rev = "/".join(rest[1:]) if rest else None
            return self._repo_info(repo_type, repo_id, rev)
        if op == "preupload" and method == "POST" and len(rest) >= 2:
            self._fault("preupload")
            return self._preupload(repo_type, repo_id, "/".join(rest[1:]))
        if op == "commit" and method == "POST" and len(rest) >= 2:
            self._fault("commit")
            return self._commit(repo_type, repo_id, "/".join(rest[1:]))
        if op == "tree" and method == "GET" and len(rest) >= 2:
            self._fault("tree")
            return self._tree(repo_type, repo_id, rest[1], "/".join(rest[2:]))
        if op == "paths-info" and method == "POST" and len(rest) >= 2:
            self._fault("paths_info")
            return self._paths_info(repo_type, repo_id, "/".join(rest[1:]))
        if op == "refs" and method == "GET":
            self._fault("refs")
            return self._refs(repo_type, repo_id)
        if op == "commits" and method == "GET" and len(rest) >= 2:
            self._fault("commits")
            return self._commits(repo_type, repo_id, "/".join(rest[1:]))
        if op == "branch" and len(rest) >= 2 and method in ("POST", "DELETE"):
            self._fault("branch")
            return self._branch(method, repo_type, repo_id, "/".join(rest[1:]))
        if op == "tag" and len(rest) >= 2 and method in ("POST", "DELETE"):
            self._fault("tag")
            return self._tag(method, repo_type, repo_id, "/".join(rest[1:]))
        if op == "settings" and method == "PUT":
            self._fault("settings")
            self._require_write()
            self.server.storage.require(repo_type, repo_id)
            body = self._json_body()
            if "private" in body:
                self.server.storage.set_private(repo_type, repo_id, bool(body["private"]))
            return self._json({})
        if op == "xet-write-token":
            self._fault("xet")
            raise HubError(
                400,
                "This server does not implement Xet storage. Set HF_HUB_DISABLE_XET=1 on the "
                "client, or run the server with upload_mode='regular'.",
                "XetNotSupported",
            )
        raise HubError(404, f"Not found: {method} {repo_type}s/{repo_id}/{'/'.join(rest)}", "NotFound")

    # ---- repo management ------------------------------------------------------------------------
    def _repo_from_body(self, body: dict) -> tuple[str, str]:
        repo_type = body.get("type") or "model"
        name, org = body.get("name"), body.get("organization")
        if not isinstance(name, str):
            raise HubError(400, "'name' is required", "BadRequest")
        repo_id = f"{org}/{name}" if org else f"{self.server.user}/{name}"
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"Invalid repo type {repo_type!r}", "InvalidRepoType")
        validate_repo_id(repo_id)
        return repo_type, repo_id

    def _create_repo(self) -> None:
        self._require_write()
        repo_type, repo_id = self._repo_from_body(self._json_body())
        body = self._json_body()
        url = f"{self._base_url()}/{_repo_prefix(repo_type)}{repo_id}"
        private = body.get("visibility") == "private" or bool(body.get("private"))
        if not self.server.storage.create_repo(repo_type, repo_id, private, self.server.user):
            # The client reads "url" even from the 409 it swallows with exist_ok=True.
            return self._error(409, "You already created this repo", "Conflict", extra={"url": url})
        return self._json({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self) -> None:
        self._require_write()
        repo_type, repo_id = self._repo_from_body(self._json_body())
        self.server.storage.delete_repo(repo_type, repo_id)
        self._json({})

    def _repo_info(self, repo_type: str, repo_id: str, revision: str | None) -> None:
        self._require_read(repo_type, repo_id)
        st = self.server.storage
        sha = st.resolve(repo_type, repo_id, revision or "main")
        obj = st.commit_object(repo_type, repo_id, sha)
        files = st.files(repo_type, repo_id, sha)
        meta = st.meta(repo_type, repo_id)
        card = {}
        if "README.md" in files:
            with contextlib.suppress(ValueError, OSError, UnicodeDecodeError):
                text = st.blob_path(files["README.md"].sha256).read_text("utf-8")
                card = split_front_matter(text)[0] or {}
        blobs = self._query.get("blobs", [""])[0].lower() in ("1", "true")
        siblings = []
        for p, e in sorted(files.items()):
            sib = {"rfilename": p}
            if blobs:
                sib.update({"size": e.size, "blobId": e.tree_oid()})
                if e.lfs:
                    sib["lfs"] = {"size": e.size, "sha256": e.sha256, "pointerSize": 134}
            siblings.append(sib)
        tags = list(card.get("tags") or []) if isinstance(card.get("tags"), list) else []
        if isinstance(card.get("library_name"), str) and card["library_name"] not in tags:
            tags.insert(0, card["library_name"])
        info = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": sha,
            "lastModified": obj["date"],
            "createdAt": meta.get("created_at"),
            "private": meta["private"],
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": tags,
            "siblings": siblings,
            "cardData": card or None,
        }
        if repo_type == "model":
            info["modelId"] = repo_id
            for key in ("pipeline_tag", "library_name"):
                if isinstance(card.get(key), str):
                    info[key] = card[key]
        self._json(info)

    def _validate_yaml(self) -> None:
        body = self._json_body()
        content = body.get("content")
        if not isinstance(content, str):
            return self._error(
                400,
                "'content' must be a string",
                "BadRequest",
                extra={"errors": [{"message": "'content' must be a string"}], "warnings": []},
            )
        try:
            meta, _ = split_front_matter(content)
            errors = check_metadata(meta or {})
        except ValueError as e:
            errors = [str(e)]
        if errors:
            return self._error(
                400,
                "; ".join(errors),
                "InvalidMetadata",
                extra={"errors": [{"message": m} for m in errors], "warnings": []},
            )
        self._json({"errors": [], "warnings": []})

    # ---- uploads --------------------------------------------------------------------------------
    def _writable_branch(self, repo_type: str, repo_id: str, revision: str) -> str:
        if self._query.get("create_pr"):
            raise HubError(400, "Pull requests are not supported by this server", "NotSupported")
        self.server.storage.require(repo_type, repo_id)
        branch = revision[len("refs/heads/") :] if revision.startswith("refs/heads/") else revision
        if branch not in self.server.storage.refs(repo_type, repo_id)["branches"]:
            raise HubError(404, f"Invalid rev id: {revision} (not a branch)", "RevisionNotFound")
        return branch

    def _preupload(self, repo_type: str, repo_id: str, revision: str) -> None:
        self._require_write()
        branch = self._writable_branch(repo_type, repo_id, revision)
        st = self.server.storage
        existing = st.files(repo_type, repo_id, st.resolve(repo_type, repo_id, branch))
        out = []
        for f in self._json_body().get("files", []):
            path = validate_path(f["path"])
            sample = base64.b64decode(f.get("sample") or "")
            lfs = self.server.upload_mode == "lfs" and looks_like_lfs(path, int(f.get("size", 0)), sample)
            cur = existing.get(path)
            oid = None if cur is None else (cur.sha256 if lfs else cur.git_oid)
            out.append(
                {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        self._json({"files": out, "commitOid": st.resolve(repo_type, repo_id, branch)})

    def _lfs_batch(self, repo_type: str, repo_id: str) -> None:
        self._require_write()
        self.server.storage.require(repo_type, repo_id)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise HubError(400, "Only the upload operation is supported", "BadRequest")
        base = self._base_url()
        objects = []
        for obj in body.get("objects", []):
            oid, size = str(obj.get("oid")), int(obj.get("size", -1))
            entry = {"oid": oid, "size": size}
            if not self.server.storage.has_blob(oid, size):
                sig = self.server.sign(repo_type, repo_id, oid, size)
                q = f"?size={size}&sig={sig}"
                entry["actions"] = {
                    "upload": {"href": f"{base}/lfs-upload/{repo_type}/{repo_id}/{oid}{q}", "header": {}},
                    "verify": {"href": f"{base}/lfs-verify/{repo_type}/{repo_id}/{oid}{q}", "header": {}},
                }
            objects.append(entry)
        body = json.dumps({"transfer": "basic", "objects": objects}).encode()
        self._send(200, body, content_type="application/vnd.git-lfs+json")

    def _check_signature(self, repo_type: str, repo_id: str, oid: str) -> int:
        size = int(self._query.get("size", ["-1"])[0])
        sig = self._query.get("sig", [""])[0]
        if not hmac.compare_digest(sig, self.server.sign(repo_type, repo_id, oid, size)):
            raise HubError(403, "Invalid or expired upload signature", "Forbidden")
        return size

    def _lfs_upload(self, repo_type: str, repo_id: str, oid: str) -> None:
        # Pre-signed: the client sends no Authorization header here.
        size = self._check_signature(repo_type, repo_id, oid)
        self.server.storage.put_stream(self._iter_body(), oid, size)
        self._send(200, b"", headers={"ETag": f'"{oid}"'})

    def _lfs_verify(self, repo_type: str, repo_id: str, oid: str) -> None:
        self._require_write()
        size = self._check_signature(repo_type, repo_id, oid)
        if not self.server.storage.has_blob(oid, size):
            raise HubError(404, f"LFS object {oid} was not uploaded", "EntryNotFound")
        self._json({"oid": oid, "size": size})

    def _commit(self, repo_type: str, repo_id: str, revision: str) -> None:
        self._require_write()
        branch = self._writable_branch(repo_type, repo_id, revision)
        st = self.server.storage
        header, ops = None, []
        for line in self._read_body().splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError) as e:
                raise HubError(400, f"Invalid ndjson commit line: {e}", "BadRequest") from e
            if key == "header":
                header = value
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, "Only base64 file content is supported", "BadRequest")
                data = base64.b64decode(value["content"])
                path = validate_path(value["path"])
                entry = FileEntry(
                    path,
                    st.put_bytes(data),
                    len(data),
                    git_blob_oid(data),
                    looks_like_lfs(path, len(data), data[:8000]),
                )
                ops.append({"op": "add", "path": path, "entry": entry})
            elif key == "lfsFile":
                path = validate_path(value["path"])
                oid = value["oid"]
                if not st.has_blob(oid):
                    raise HubError(
                        422, f"LFS object for {path} (oid {oid}) was never uploaded", "MissingContent"
                    )
                blob = st.blob_path(oid)
                size = blob.stat().st_size
                if value.get("size") is not None and int(value["size"]) != size:
                    raise HubError(422, f"Size mismatch for {path}", "BadOid")
                sha1 = hashlib.sha1(b"blob %d\0" % size)
                with open(blob, "rb") as fh:
                    for chunk in iter(lambda: fh.read(_CHUNK), b""):
                        sha1.update(chunk)
                ops.append(
                    {"op": "add", "path": path, "entry": FileEntry(path, oid, size, sha1.hexdigest(), True)}
                )
            elif key == "deletedFile":
                ops.append({"op": "delete_file", "path": value["path"]})
            elif key == "deletedFolder":
                ops.append({"op": "delete_folder", "path": value["path"]})
            else:
                raise HubError(400, f"Unsupported commit operation {key!r}", "BadRequest")
        if header is None:
            raise HubError(400, "The commit has no header line", "BadRequest")
        cid = st.commit(
            repo_type,
            repo_id,
            branch,
            ops,
            str(header.get("summary") or "update"),
            str(header.get("description") or ""),
            self.server.user,
            header.get("parentCommit"),
        )
        url = f"{self._base_url()}/{_repo_prefix(repo_type)}{repo_id}/commit/{cid}"
        self._json({"success": True, "commitOid": cid, "commitUrl": url, "pullRequestUrl": None})

    # ---- reads ----------------------------------------------------------------------------------
    def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        validate_repo_id(repo_id)
        self._require_read(repo_type, repo_id)
        st = self.server.storage
        sha = st.resolve(repo_type, repo_id, revision)
        validate_path(path)
        entry = st.files(repo_type, repo_id, sha).get(path)
        if entry is None:
            # X-Repo-Commit lets the client cache the absence (transformers probes many optional files).
            return self._error(
                404, f"Entry not found: {path}", "EntryNotFound", headers={"X-Repo-Commit": sha}
            )
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{entry.tree_oid() if entry.lfs else entry.git_oid}"',
            "Accept-Ranges": "bytes",
            "Content-Disposition": f'inline; filename="{PurePosixPath(path).name}"',
        }
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        start = 0
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes=") and rng[6:].endswith("-") and rng[6:-1].isdigit():
            start = min(int(rng[6:-1]), entry.size)
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{entry.size - 1}/{entry.size}"
        self._read_body()
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(entry.size - start))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(st.blob_path(entry.sha256), "rb") as fh:
            fh.seek(start)
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                self.wfile.write(chunk)

    def _tree_entries(
        self, files: dict[str, FileEntry], prefix: str, recursive: bool, expand: bool, commit: dict
    ) -> list[dict]:
        out, dirs = [], set()
        for p, e in sorted(files.items()):
            if prefix and not p.startswith(prefix + "/"):
                continue
            rel = p[len(prefix) + 1 :] if prefix else p
            parts = rel.split("/")
            for i in range(1, len(parts)):
                d = "/".join(([prefix] if prefix else []) + parts[:i])
                if (recursive or i == 1) and d not in dirs:
                    dirs.add(d)
                    out.append(
                        {
                            "type": "directory",
                            "oid": hashlib.sha1(d.encode()).hexdigest(),
                            "size": 0,
                            "path": d,
                        }
                    )
            if recursive or len(parts) == 1:
                out.append(self._file_entry(e, expand, commit))
        return out

    @staticmethod
    def _file_entry(e: FileEntry, expand: bool, commit: dict) -> dict:
        item = {"type": "file", "oid": e.tree_oid(), "size": e.size, "path": e.path}
        if e.lfs:
            item["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": 134}
        if expand:
            item["lastCommit"] = {"id": commit["id"], "title": commit["title"], "date": commit["date"]}
        return item

    def _tree(self, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        self._require_read(repo_type, repo_id)
        st = self.server.storage
        sha = st.resolve(repo_type, repo_id, revision)
        files = st.files(repo_type, repo_id, sha)
        path = path.strip("/")
        if path:
            validate_path(path)
            if not any(p.startswith(path + "/") for p in files):
                raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        q = self._query
        recursive = q.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = q.get("expand", ["false"])[0].lower() in ("1", "true")
        self._json(
            self._tree_entries(files, path, recursive, expand, st.commit_object(repo_type, repo_id, sha)),
            headers={"X-Repo-Commit": sha},
        )

    def _paths_info(self, repo_type: str, repo_id: str, revision: str) -> None:
        self._require_read(repo_type, repo_id)
        st = self.server.storage
        sha = st.resolve(repo_type, repo_id, revision)
        files = st.files(repo_type, repo_id, sha)
        raw = self._read_body().decode()
        if "json" in self.headers.get("Content-Type", ""):
            form = json.loads(raw or "{}")
            paths, expand = form.get("paths", []), bool(form.get("expand"))
        else:
            form = urllib.parse.parse_qs(raw)
            paths, expand = form.get("paths", []), form.get("expand", ["false"])[0].lower() == "true"
        commit = st.commit_object(repo_type, repo_id, sha)
        out = []
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(self._file_entry(files[p], expand, commit))
            elif any(f.startswith(p + "/") for f in files):
                out.append(
                    {"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p}
                )
        self._json(out)

    def _refs(self, repo_type: str, repo_id: str) -> None:
        self._require_read(repo_type, repo_id)
        refs = self.server.storage.refs(repo_type, repo_id)
        out = {
            "branches": [
                {"name": n, "ref": f"refs/heads/{n}", "targetCommit": c}
                for n, c in sorted(refs["branches"].items())
            ],
            "converts": [],
            "tags": [
                {"name": n, "ref": f"refs/tags/{n}", "targetCommit": c}
                for n, c in sorted(refs["tags"].items())
            ],
        }
        if self._query.get("include_prs"):
            out["pullRequests"] = []
        self._json(out)

    def _commits(self, repo_type: str, repo_id: str, revision: str) -> None:
        self._require_read(repo_type, repo_id)
        st = self.server.storage
        history = st.history(repo_type, repo_id, st.resolve(repo_type, repo_id, revision))
        out = []
        for c in history:
            item = {
                "id": c["id"],
                "title": c["title"],
                "message": c["message"],
                "date": c["date"],
                "authors": [{"user": c["author"]}],
            }
            if self._query.get("expand[]") == ["formatted"] or "formatted" in self._query.get("expand", []):
                item["formatted"] = {"title": c["title"], "message": c["message"]}
            out.append(item)
        self._json(out, headers={"X-Total-Count": str(len(out))})

    # ---- refs -----------------------------------------------------------------------------------
    def _branch(self, method: str, repo_type: str, repo_id: str, branch: str) -> None:
        self._require_write()
        st = self.server.storage
        st.require(repo_type, repo_id)
        validate_ref_name(branch)
        if method == "DELETE":
            st.set_ref(repo_type, repo_id, "branches", branch, None)
            return self._json({})
        body = self._json_body()
        start = body.get("startingPoint") or "main"
        target = st.resolve(repo_type, repo_id, start)
        st.set_ref(repo_type, repo_id, "branches", branch, target)
        self._json({})

    def _tag(self, method: str, repo_type: str, repo_id: str, rev: str) -> None:
        self._require_write()
        st = self.server.storage
        st.require(repo_type, repo_id)
        if method == "DELETE":
            st.set_ref(repo_type, repo_id, "tags", rev, None)
            return self._json({})
        body = self._json_body()
        name = body.get("tag")
        if not isinstance(name, str):
            raise HubError(400, "'tag' is required", "BadRequest")
        target = st.resolve(repo_type, repo_id, rev)
        st.set_ref(repo_type, repo_id, "tags", validate_ref_name(name), target)
        self._json({})


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
