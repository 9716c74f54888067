"""The local Hub's routes: one table of (methods, path pattern, handler, auth, body, fault step), and the
handlers. A handler does only its own work: it reads the typed request, returns a ``Response`` or raises a
``HubError``; limits, auth, faults and error answers are the dispatcher's job (``server.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from briskbert.hub_cards.rules import check_metadata, metadata_warnings, split_front_matter

from . import protocol
from .errors import BadRequest, EntryNotFound, HubError, RevisionNotFound, Unprocessable
from .storage import AddFile, FileEntry, git_blob_oid, looks_like_lfs, validate_ref_name
from .transport import BodyKind, RequestBody

if TYPE_CHECKING:
    from email.message import Message

    from .server import HubServer

_CHUNK = 1 << 20
_TYPE_NAMES = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}


class Auth(Enum):
    PUBLIC = "public"  # anyone
    READ = "read"  # the repo exists and is public, or the token is valid (private repos)
    WRITE = "write"  # a valid token
    SIGNED = "signed"  # a pre-signed LFS URL (the client sends no token there)


@dataclass
class Request:
    hub: HubServer
    method: str
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Message
    body: RequestBody
    base_url: str

    @property
    def repo_type(self) -> str:
        return _TYPE_NAMES.get(self.params.get("repo_type") or "models", self.params.get("repo_type", ""))

    @property
    def repo_id(self) -> str:
        return self.params["repo_id"]

    def flag(self, name: str) -> bool:
        return self.query.get(name, [""])[0].lower() in ("1", "true")

    def json(self):
        return protocol.parse_json(self.body.read(), "request body")


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    file: Path | None = None  # streamed after the headers, from ``offset``, ``length`` bytes
    offset: int = 0
    length: int = 0


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    return Response(status, json.dumps(obj).encode(), headers=dict(headers or {}))


def repo_url(base_url: str, repo_type: str, repo_id: str) -> str:
    return f"{base_url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"


# ---- repo management ----------------------------------------------------------------------------------
def whoami(req: Request) -> Response:
    user = req.hub.user
    auth = {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}}
    return json_response({"type": "user", "name": user, "fullname": user, "orgs": [], "auth": auth})


def agent_harnesses(req: Request) -> Response:
    return json_response({"standardEnvVars": [], "harnesses": {}})


def _yaml_answer(errors: list[str], warnings: list[str]) -> Response:
    body = {"errors": [{"message": m} for m in errors], "warnings": [{"message": m} for m in warnings]}
    if not errors:
        return json_response(body)
    message = "; ".join(errors)
    headers = {"X-Error-Code": "InvalidMetadata", "X-Error-Message": message}
    return json_response({"error": message, **body}, status=400, headers=headers)


def validate_yaml(req: Request) -> Response:
    # The client calls .json() before raise_for_status and reads "errors": every answer here has them.
    try:
        content = protocol.Fields(req.json(), "request body").text("content")
    except BadRequest as e:
        return _yaml_answer([e.message], [])
    try:
        meta = split_front_matter(content)[0] or {}
    except ValueError as e:
        return _yaml_answer([str(e)], [])
    return _yaml_answer(check_metadata(meta), metadata_warnings(meta))


def create_repo(req: Request) -> Response:
    spec = protocol.RepoSpec.from_body(req.json(), req.hub.user)
    url = repo_url(req.base_url, spec.repo_type, spec.repo_id)
    if not req.hub.storage.create_repo(spec.repo_type, spec.repo_id, spec.private, req.hub.user):
        # The client reads "url" even from the 409 it swallows with exist_ok=True.
        return json_response(
            {"error": "You already created this repo", "url": url},
            status=409,
            headers={"X-Error-Code": "Conflict", "X-Error-Message": "You already created this repo"},
        )
    return json_response({"url": url, "name": spec.repo_id, "id": spec.repo_id})


def delete_repo(req: Request) -> Response:
    spec = protocol.RepoSpec.from_body(req.json(), req.hub.user)
    req.hub.storage.delete_repo(spec.repo_type, spec.repo_id)
    return json_response({})


def update_settings(req: Request) -> Response:
    private = protocol.Fields(req.json(), "request body").flag("private", default=None)
    req.hub.storage.require(req.repo_type, req.repo_id)
    if private is not None:
        req.hub.storage.set_private(req.repo_type, req.repo_id, private)
    return json_response({})


def pull_requests_refused(req: Request) -> Response:
    raise BadRequest(
        "Pull requests and discussions are not supported by this local Hub: commit to a branch instead "
        "(create_pr=False, revision=<branch>)",
        code="PullRequestsNotSupported",
    )


def xet_refused(req: Request) -> Response:
    raise BadRequest(
        "This server does not implement Xet storage. Set HF_HUB_DISABLE_XET=1 on the "
        "client, or run the server with upload_mode='regular'.",
        code="XetNotSupported",
    )


def _card_of(storage, files: dict[str, FileEntry]) -> dict:
    if "README.md" not in files:
        return {}
    with contextlib.suppress(ValueError, OSError, UnicodeDecodeError):
        text = storage.blob_path(files["README.md"].sha256).read_text("utf-8")
        return split_front_matter(text)[0] or {}
    return {}


def _siblings(files: dict[str, FileEntry], with_blobs: bool) -> list[dict]:
    siblings = []
    for path, entry in sorted(files.items()):
        sibling = {"rfilename": path}
        if with_blobs:
            sibling.update({"size": entry.size, "blobId": entry.tree_oid()})
            if entry.lfs:
                sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256, "pointerSize": 134}
        siblings.append(sibling)
    return siblings


def repo_info(req: Request) -> Response:
    st, repo_type, repo_id = req.hub.storage, req.repo_type, req.repo_id
    sha = st.resolve(repo_type, repo_id, req.params.get("rev") or "main")
    files = st.files(repo_type, repo_id, sha)
    card = _card_of(st, files)
    tags = list(card["tags"]) if isinstance(card.get("tags"), list) else []
    if isinstance(card.get("library_name"), str) and card["library_name"] not in tags:
        tags.insert(0, card["library_name"])
    meta = st.meta(repo_type, repo_id)
    info = {
        "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
        "id": repo_id,
        "author": repo_id.split("/")[0],
        "sha": sha,
        "lastModified": st.commit_object(repo_type, repo_id, sha)["date"],
        "createdAt": meta.get("created_at"),
        "private": meta["private"],
        "disabled": False,
        "gated": False,
        "downloads": 0,
        "likes": 0,
        "tags": tags,
        "siblings": _siblings(files, req.flag("blobs")),
        "cardData": card or None,
    }
    if repo_type == "model":
        info["modelId"] = repo_id
        info.update({k: card[k] for k in ("pipeline_tag", "library_name") if isinstance(card.get(k), str)})
    return json_response(info)


# ---- uploads -------------------------------------------------------------------------------------------
def _writable_branch(req: Request) -> str:
    if req.flag("create_pr"):
        pull_requests_refused(req)
    revision = req.params["rev"]
    branch = revision.removeprefix("refs/heads/")
    if branch not in req.hub.storage.refs(req.repo_type, req.repo_id)["branches"]:
        raise RevisionNotFound(f"Invalid rev id: {revision} (not a branch)")
    return branch


def preupload(req: Request) -> Response:
    st, hub = req.hub.storage, req.hub
    branch = _writable_branch(req)
    head = st.resolve(req.repo_type, req.repo_id, branch)
    existing = st.files(req.repo_type, req.repo_id, head)
    out = []
    for f in protocol.preupload_files(req.json()):
        lfs = hub.upload_mode == "lfs" and looks_like_lfs(f.path, f.size, f.sample)
        current = existing.get(f.path)
        oid = None if current is None else (current.sha256 if lfs else current.git_oid)
        out.append(
            {"path": f.path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
        )
    return json_response({"files": out, "commitOid": head})


def lfs_batch(req: Request) -> Response:
    objects = []
    for obj in protocol.lfs_batch_objects(req.json()):
        entry = {"oid": obj.oid, "size": obj.size}
        if not req.hub.storage.has_blob(obj.oid, obj.size):
            query = req.hub.signed_query(req.repo_type, req.repo_id, obj.oid, obj.size)
            where = f"{req.repo_type}/{req.repo_id}/{obj.oid}?{query}"
            entry["actions"] = {
                "upload": {"href": f"{req.base_url}/lfs-upload/{where}", "header": {}},
                "verify": {"href": f"{req.base_url}/lfs-verify/{where}", "header": {}},
            }
        objects.append(entry)
    body = json.dumps({"transfer": "basic", "objects": objects}).encode()
    return Response(body=body, content_type="application/vnd.git-lfs+json")


def lfs_upload(req: Request) -> Response:
    # Auth.SIGNED: the dispatcher has checked the signature and the size in the query.
    oid, size = req.params["oid"], int(req.query["size"][0])
    req.hub.storage.put_stream(req.body.chunks(), oid, size)
    return Response(headers={"ETag": f'"{oid}"'})


def lfs_verify(req: Request) -> Response:
    req.hub.check_signature(req)
    oid, size = req.params["oid"], int(req.query["size"][0])
    if not req.hub.storage.has_blob(oid, size):
        raise EntryNotFound(f"LFS object {oid} was not uploaded")
    return json_response({"oid": oid, "size": size})


def _operation(storage, line: protocol.CommitLine):
    """A storage operation for one parsed commit line; inline content is stored as it arrives."""
    if isinstance(line, protocol.InlineFile):
        data = line.content
        lfs = looks_like_lfs(line.path, len(data), data[:8000])
        return AddFile(FileEntry(line.path, storage.put_bytes(data), len(data), git_blob_oid(data), lfs))
    if isinstance(line, protocol.LfsFileRef):
        if not storage.has_blob(line.oid):
            raise Unprocessable(f"LFS object for {line.path} (oid {line.oid}) was never uploaded")
        blob = storage.blob_path(line.oid)
        size = blob.stat().st_size
        if line.size is not None and line.size != size:
            raise Unprocessable(f"Size mismatch for {line.path}: {line.size} != {size}", code="BadOid")
        sha1 = hashlib.sha1(b"blob %d\0" % size)
        with open(blob, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                sha1.update(chunk)
        return AddFile(FileEntry(line.path, line.oid, size, sha1.hexdigest(), True))
    return line  # DeleteFile / DeleteFolder are storage operations already


def commit(req: Request) -> Response:
    st = req.hub.storage
    branch = _writable_branch(req)
    header, operations = None, []
    # Line by line: memory holds one file's content at a time, whatever the commit's size.
    for number, raw in enumerate(req.body.lines(), start=1):
        if not raw.strip():
            continue
        line = protocol.parse_commit_line(raw, number)
        if isinstance(line, protocol.CommitHeader):
            if header is not None or operations:
                raise BadRequest(f"commit line {number}: the header must be the first line, once")
            header = line
        else:
            operations.append(_operation(st, line))
    if header is None:
        raise BadRequest("The commit has no header line")
    cid = st.commit(
        req.repo_type,
        req.repo_id,
        branch,
        operations,
        header.summary,
        header.description,
        req.hub.user,
        header.parent_commit,
    )
    url = f"{repo_url(req.base_url, req.repo_type, req.repo_id)}/commit/{cid}"
    return json_response({"success": True, "commitOid": cid, "commitUrl": url, "pullRequestUrl": None})


# ---- reads ---------------------------------------------------------------------------------------------
def _range_start(header: str, size: int) -> int:
    spec = header.removeprefix("bytes=")
    if header.startswith("bytes=") and spec.endswith("-") and spec[:-1].isdigit():
        return min(int(spec[:-1]), size)
    return 0


def resolve(req: Request) -> Response:
    st, path = req.hub.storage, req.params["path"]
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    entry = st.files(req.repo_type, req.repo_id, sha).get(path)
    if entry is None:
        # X-Repo-Commit lets the client cache the absence (transformers probes many optional files).
        raise EntryNotFound(f"Entry not found: {path}", headers={"X-Repo-Commit": sha})
    headers = {
        "X-Repo-Commit": sha,
        "ETag": f'"{entry.tree_oid() if entry.lfs else entry.git_oid}"',
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'inline; filename="{urllib.parse.quote(PurePosixPath(path).name)}"',
    }
    if entry.lfs:
        headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
    start = _range_start(req.headers.get("Range", ""), entry.size)
    if start:
        headers["Content-Range"] = f"bytes {start}-{entry.size - 1}/{entry.size}"
    return Response(
        status=206 if start else 200,
        content_type="application/octet-stream",
        headers=headers,
        file=st.blob_path(entry.sha256),
        offset=start,
        length=entry.size - start,
    )


def _directory(path: str) -> dict:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def _file_entry(e: FileEntry, expand: bool, commit_obj: dict) -> dict:
    item = {"type": "file", "oid": e.tree_oid(), "size": e.size, "path": e.path}
    if e.lfs:
        item["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": 134}
    if expand:
        item["lastCommit"] = {
            "id": commit_obj["id"],
            "title": commit_obj["title"],
            "date": commit_obj["date"],
        }
    return item


def _tree_entries(files: dict[str, FileEntry], prefix: str, recursive: bool, expand: bool, commit_obj: dict):
    out, dirs = [], set()
    for p, e in sorted(files.items()):
        if prefix and not p.startswith(prefix + "/"):
            continue
        parts = (p[len(prefix) + 1 :] if prefix else p).split("/")
        for i in range(1, len(parts)):
            d = "/".join(([prefix] if prefix else []) + parts[:i])
            if (recursive or i == 1) and d not in dirs:
                dirs.add(d)
                out.append(_directory(d))
        if recursive or len(parts) == 1:
            out.append(_file_entry(e, expand, commit_obj))
    return out


def tree(req: Request) -> Response:
    st = req.hub.storage
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    files = st.files(req.repo_type, req.repo_id, sha)
    path = req.params.get("path", "").strip("/")
    if path and not any(p.startswith(path + "/") for p in files):
        raise EntryNotFound(f"Entry not found: {path}")
    commit_obj = st.commit_object(req.repo_type, req.repo_id, sha)
    entries = _tree_entries(files, path, req.flag("recursive"), req.flag("expand"), commit_obj)
    return json_response(entries, headers={"X-Repo-Commit": sha})


def paths_info(req: Request) -> Response:
    st = req.hub.storage
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    files = st.files(req.repo_type, req.repo_id, sha)
    raw = req.body.read()
    if "json" in req.headers.get("Content-Type", ""):
        f = protocol.Fields(protocol.parse_json(raw, "request body"), "request body")
        paths, expand = f.items("paths"), f.flag("expand")
    else:
        form = urllib.parse.parse_qs(raw.decode("utf-8", "replace"))
        paths, expand = form.get("paths", []), form.get("expand", ["false"])[0].lower() == "true"
    commit_obj = st.commit_object(req.repo_type, req.repo_id, sha)
    out = []
    for p in (p.strip("/") for p in paths if isinstance(p, str)):
        if p in files:
            out.append(_file_entry(files[p], expand, commit_obj))
        elif p and any(f.startswith(p + "/") for f in files):
            out.append(_directory(p))
    return json_response(out)


def refs(req: Request) -> Response:
    table = req.hub.storage.refs(req.repo_type, req.repo_id)

    def listing(kind: str, prefix: str) -> list[dict]:
        return [{"name": n, "ref": f"{prefix}{n}", "targetCommit": c} for n, c in sorted(table[kind].items())]

    out = {
        "branches": listing("branches", "refs/heads/"),
        "converts": [],
        "tags": listing("tags", "refs/tags/"),
    }
    if req.query.get("include_prs"):
        out["pullRequests"] = []
    return json_response(out)


def commits(req: Request) -> Response:
    st = req.hub.storage
    formatted = req.query.get("expand[]") == ["formatted"] or "formatted" in req.query.get("expand", [])
    out = []
    for c in st.history(
        req.repo_type, req.repo_id, st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    ):
        item = {"id": c["id"], "title": c["title"], "message": c["message"], "date": c["date"]}
        item["authors"] = [{"user": c["author"]}]
        if formatted:
            item["formatted"] = {"title": c["title"], "message": c["message"]}
        out.append(item)
    return json_response(out, headers={"X-Total-Count": str(len(out))})


# ---- refs ----------------------------------------------------------------------------------------------
def branch(req: Request) -> Response:
    st, name = req.hub.storage, req.params["name"]
    if req.method == "DELETE":
        st.set_ref(req.repo_type, req.repo_id, "branches", name, None)
        return json_response({})
    validate_ref_name(name)
    target = st.resolve(req.repo_type, req.repo_id, protocol.starting_point(req.json()))
    st.set_ref(req.repo_type, req.repo_id, "branches", name, target)
    return json_response({})


def tag(req: Request) -> Response:
    # POST /tag/{target revision} with the name in the body; DELETE /tag/{tag name}.
    st = req.hub.storage
    if req.method == "DELETE":
        st.set_ref(req.repo_type, req.repo_id, "tags", req.params["name"], None)
        return json_response({})
    new = protocol.NewTag.from_body(req.json())
    validate_ref_name(new.name)
    target = st.resolve(req.repo_type, req.repo_id, req.params["name"])
    st.set_ref(req.repo_type, req.repo_id, "tags", new.name, target)
    return json_response({})


# ---- the table -----------------------------------------------------------------------------------------
_PLACEHOLDERS = {
    "api_type": r"(?P<repo_type>models|datasets|spaces|kernels)",
    "url_type": r"(?:(?P<repo_type>datasets|spaces|kernels)/)?",
    "one_type": r"(?P<repo_type>model|dataset|space|kernel)",
    "repo": r"(?P<repo_id>[^/]+/[^/]+?)",
}


def _compile(pattern: str) -> re.Pattern:
    """``{name}`` is one path segment, ``{name+}`` the rest of the path; ``_PLACEHOLDERS`` are special;
    everything else is literal."""

    def piece(text: str) -> str:
        m = re.fullmatch(r"\{(\w+)(\+?)\}", text)
        if not m:
            return re.escape(text)
        name, rest = m.groups()
        return _PLACEHOLDERS.get(name) or (f"(?P<{name}>.+)" if rest else f"(?P<{name}>[^/]+)")

    return re.compile("".join(piece(p) for p in re.split(r"(\{\w+\+?\})", pattern)) + "$")


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    pattern: str
    handler: Callable[[Request], Response]
    auth: Auth = Auth.PUBLIC
    body: BodyKind = BodyKind.NONE
    step: str | None = None  # the fault-injection step (``server.STEPS``)
    regex: re.Pattern = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "regex", _compile(self.pattern))


R, W, J = Auth.READ, Auth.WRITE, BodyKind.JSON
ROUTES = (
    Route(("GET",), "/api/whoami-v2", whoami, W, step="whoami"),
    Route(("GET",), "/api/agent-harnesses", agent_harnesses),
    Route(("POST",), "/api/validate-yaml", validate_yaml, body=J, step="validate_yaml"),
    Route(("POST",), "/api/repos/create", create_repo, W, J, "create_repo"),
    Route(("DELETE",), "/api/repos/delete", delete_repo, W, J, "delete_repo"),
    Route(("GET",), "/api/{api_type}/{repo}", repo_info, R, step="repo_info"),
    Route(("GET",), "/api/{api_type}/{repo}/revision/{rev+}", repo_info, R, step="repo_info"),
    Route(("PUT",), "/api/{api_type}/{repo}/settings", update_settings, W, J, "settings"),
    Route(("POST",), "/api/{api_type}/{repo}/preupload/{rev+}", preupload, W, J, "preupload"),
    Route(("POST",), "/api/{api_type}/{repo}/commit/{rev+}", commit, W, BodyKind.NDJSON, "commit"),
    Route(("GET",), "/api/{api_type}/{repo}/tree/{rev}", tree, R, step="tree"),
    Route(("GET",), "/api/{api_type}/{repo}/tree/{rev}/{path+}", tree, R, step="tree"),
    Route(("POST",), "/api/{api_type}/{repo}/paths-info/{rev+}", paths_info, R, J, "paths_info"),
    Route(("GET",), "/api/{api_type}/{repo}/refs", refs, R, step="refs"),
    Route(("GET",), "/api/{api_type}/{repo}/commits/{rev+}", commits, R, step="commits"),
    Route(("POST", "DELETE"), "/api/{api_type}/{repo}/branch/{name+}", branch, W, J, "branch"),
    Route(("POST", "DELETE"), "/api/{api_type}/{repo}/tag/{name+}", tag, W, J, "tag"),
    Route(("GET",), "/api/{api_type}/{repo}/xet-write-token/{rev+}", xet_refused, W, step="xet"),
    Route(("GET", "POST"), "/api/{api_type}/{repo}/discussions", pull_requests_refused, W, J),
    Route(("GET", "HEAD"), "/{url_type}{repo}/resolve/{rev}/{path+}", resolve, R, step="resolve"),
    Route(("POST",), "/{url_type}{repo}.git/info/lfs/objects/batch", lfs_batch, W, J, "lfs_batch"),
    Route(
        ("PUT",),
        "/lfs-upload/{one_type}/{repo}/{oid}",
        lfs_upload,
        Auth.SIGNED,
        BodyKind.STREAM,
        "lfs_upload",
    ),
    Route(("POST",), "/lfs-verify/{one_type}/{repo}/{oid}", lfs_verify, W, J, "lfs_verify"),
)


def match(method: str, raw_path: str) -> tuple[Route, dict[str, str]]:
    """The route for a request and its unquoted parameters. Segments are split on the raw path, then
    unquoted, so a revision sent as ``refs%2Fpr%2F1`` stays one parameter."""
    allowed = []
    for route in ROUTES:
        m = route.regex.match(raw_path)
        if m is None:
            continue
        if method not in route.methods:
            allowed += route.methods
            continue
        return route, {k: urllib.parse.unquote(v) for k, v in m.groupdict().items() if v is not None}
    if allowed:
        raise HubError(f"Method {method} is not allowed here", status=405, code="MethodNotAllowed")
    raise HubError("Not found", status=404, code="NotFound")


__all__ = ["ROUTES", "Auth", "Request", "Response", "Route", "match"]
