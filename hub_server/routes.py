"""The local Hub's route table and its handlers. A handler runs in a worker thread: it reads a starlette
``Request`` (``req.app`` is the ``HubServer``, ``req.state.account`` the caller) and returns a ``Response`` or
raises a ``HubError``. Limits, auth, faults and error answers are the dispatcher's (``server.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from enum import Enum
from functools import partial
from pathlib import PurePosixPath
from typing import NamedTuple

import anyio.from_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from briskbert.hub_cards.front_matter import FrontMatterError, load_front_matter
from briskbert.hub_cards.rules import check_metadata, metadata_warnings

from . import protocol
from .errors import BadRequest, Conflict, EntryNotFound, MethodNotAllowed, NotFound
from .index import FileEntry, looks_like_lfs
from .names import REPO_TYPES, validate_path, validate_repo_id
from .protocol import Fields, base64_field, parse_json

TREE_PAGE = 1000  # entries per /tree page, as on the Hub
COMMITS_PAGE = 100  # commits per /commits page


# ---- a handler runs in a worker thread: it reads the body through the event loop ---------------------------
def body_chunks(request: Request) -> Iterator[bytes]:
    stream = request.stream()
    with contextlib.suppress(StopAsyncIteration):
        while True:
            yield anyio.from_thread.run(stream.__anext__)


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


class Auth(Enum):
    PUBLIC = "public"  # anyone
    READ = "read"  # the repo exists and is public, or the token's account owns its namespace
    WRITE = "write"  # a valid token; on a repo, one whose account owns the repo's namespace
    SIGNED = "signed"  # a pre-signed LFS URL (the client sends no token there)


def repo_url(base_url: str, repo_type: str, repo_id: str) -> str:
    return f"{base_url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"


def repo_of(req: Request) -> tuple[str, str]:
    """(repo type, repo id) of a route on a repo."""
    return (req.path_params.get("repo_type") or "models").removesuffix("s"), req.path_params["repo_id"]


def _flag(req: Request, name: str) -> bool:
    return req.query_params.get(name, "").lower() in ("1", "true")


def _page(req: Request, largest: int) -> int:
    """The ``limit`` query parameter, between 1 and ``largest`` (``largest`` when absent or invalid)."""
    limit = protocol.parse_size(req.query_params.get("limit"))
    return largest if limit is None else max(min(limit, largest), 1)


def _next_page(req: Request, cursor: str) -> str:
    """A ``Link`` header to this request with ``cursor`` replaced."""
    query = [(k, v) for k, v in req.query_params.multi_items() if k != "cursor"] + [("cursor", cursor)]
    url = f"{req.app.base_url(req)}{req.scope['raw_path'].decode('latin-1')}?{urllib.parse.urlencode(query)}"
    return header_safe(f'<{url}>; rel="next"', 2000)


def _repo_spec(req: Request) -> tuple[str, str, bool]:
    """(type, id, private) of the repo a create or delete body names, in a namespace the caller may write in."""
    f = Fields(read_json(req), "request body")
    name, repo_type = f.get("name"), f.get("type", default=None) or "model"
    if repo_type not in REPO_TYPES:
        raise BadRequest(f"Invalid repo type {repo_type!r}: one of {REPO_TYPES}", code="InvalidRepoType")
    visibility = f.get("visibility", default=None)
    if visibility not in (None, "private", "public"):
        raise BadRequest(f"'visibility' must be 'private' or 'public', got {visibility!r}")
    namespace = f.get("organization", default=None) or req.state.account.name
    validate_repo_id(f"{namespace}/{name}")
    req.state.account.check_writes(namespace, f"a {repo_type} under the namespace {namespace!r}")
    return repo_type, f"{namespace}/{name}", visibility == "private" or f.get("private", bool, False)


def no_pull_requests(req: Request) -> Response:
    raise BadRequest(
        "Pull requests and discussions are not supported by this local Hub: commit to a branch instead "
        "(create_pr=False, revision=<branch>)",
        code="PullRequestsNotSupported",
    )


def no_xet(req: Request) -> Response:
    raise BadRequest(
        "This server does not implement Xet storage. Set HF_HUB_DISABLE_XET=1 on the client, or run the server "
        "with upload_mode='regular'.",
        code="XetNotSupported",
    )


# ---- repo management ----------------------------------------------------------------------------------
def validate_yaml(req: Request) -> Response:
    # The client reads "errors" before it checks the status: every answer here has them.
    try:
        content = Fields(read_json(req), "request body").get("content")
        meta = load_front_matter(content, req.app.limits.yaml) or {}
    except (BadRequest, FrontMatterError) as e:
        errors, warnings = [str(e)], []
    else:
        errors, warnings = check_metadata(meta), metadata_warnings(meta)
    body = {"errors": [{"message": m} for m in errors], "warnings": [{"message": m} for m in warnings]}
    if errors:
        raise BadRequest("; ".join(errors), code="InvalidMetadata", body=body)
    return json_response(body)


def create_repo(req: Request) -> Response:
    st, base = req.app.storage, req.app.base_url(req)
    repo_type, repo_id, private = _repo_spec(req)
    if st.create_repo(repo_type, repo_id, private, req.state.account.name) is None:
        existing = st.lookup(repo_type, repo_id)
        url = repo_url(base, repo_type, existing.repo_id if existing else repo_id)
        # The client reads "url" even from the 409 it swallows with exist_ok=True.
        raise Conflict("You already created this repo", body={"url": url})
    return json_response({"url": repo_url(base, repo_type, repo_id), "name": repo_id, "id": repo_id})


def delete_repo(req: Request) -> Response:
    req.app.storage.delete_repo(*_repo_spec(req)[:2])
    return json_response({})


def repo_info(req: Request) -> Response:
    st, (repo_type, repo_id) = req.app.storage, repo_of(req)
    record = st.lookup(repo_type, repo_id)  # the dispatcher found it; resolve refuses it if it is gone since
    sha = st.resolve(repo_type, repo_id, req.path_params.get("rev") or "main")
    index = st.index(repo_type, repo_id, sha)
    card, readme, limits = {}, index.get("README.md"), req.app.limits.yaml
    with contextlib.suppress(FrontMatterError, OSError):  # no card when it cannot be read within the limits
        if readme is not None:
            with open(st.blob_path(readme.sha256), "rb") as fh:
                text = fh.read(limits.max_bytes + 64).decode("utf-8", "replace")
            card = load_front_matter(text, limits) or {}
    tags = [t for t in card["tags"] if isinstance(t, str)] if isinstance(card.get("tags"), list) else []
    if isinstance(card.get("library_name"), str) and card["library_name"] not in tags:
        tags.insert(0, card["library_name"])
    info = {
        "id": record.repo_id,
        "author": record.namespace,
        "sha": sha,
        "lastModified": index.commit["date"],
        "createdAt": record.created_at,
        "private": record.private,
        "tags": tags,
        "cardData": card or None,
    }
    if repo_type == "model":
        info["modelId"] = record.repo_id
        info.update({k: card[k] for k in ("pipeline_tag", "library_name") if isinstance(card.get(k), str)})
    # The sibling list is built once per revision and sent as it is, however many files the repo has.
    head = json.dumps(info, default=str).encode()  # a YAML date in the card is sent as text
    pieces = (head[:-1], b', "siblings": ', index.siblings_json(_flag(req, "blobs")), b"}")
    length = str(sum(len(p) for p in pieces))
    return StreamingResponse(iter(pieces), headers={"Content-Length": length}, media_type="application/json")


# ---- uploads -------------------------------------------------------------------------------------------
def _writable_branch(req: Request) -> str:  # the storage refuses a commit to anything but a branch
    if _flag(req, "create_pr"):
        no_pull_requests(req)
    return req.path_params["rev"].removeprefix("refs/heads/")


def preupload(req: Request) -> Response:
    st, repo = req.app.storage, repo_of(req)
    head = st.resolve(*repo, _writable_branch(req))
    existing, out = st.index(*repo, head), []
    for i, item in enumerate(Fields(read_json(req), "request body").get("files", list, [])):
        f = Fields(item, f"files[{i}]")
        sample = base64_field(f.get("sample", default=""), f"files[{i}].sample")
        path, size = validate_path(f.get("path")), f.get("size", int, len(sample))
        lfs = req.app.upload_mode == "lfs" and looks_like_lfs(path, size, sample)
        current = existing.get(path)
        oid = current and (current.sha256 if lfs else current.git_oid)
        out.append(
            {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
        )
    return json_response({"files": out, "commitOid": head})


def lfs_batch(req: Request) -> Response:
    hub, limit, objects = req.app, req.app.limits.max_upload_bytes, []
    batch = Fields(read_json(req), "LFS batch request")
    if batch.get("operation") != "upload":
        raise BadRequest("Only the LFS 'upload' operation is supported")
    for i, item in enumerate(batch.get("objects", list)):
        f = Fields(item, f"objects[{i}]")
        oid, size = f.get("oid"), f.get("size", int)  # the storage checks the oid
        entry: dict = {"oid": oid, "size": size}
        if size > limit:
            entry["error"] = {"code": 413, "message": f"{size} bytes is over the upload limit of {limit}"}
        elif not hub.storage.reuse_blob(oid, size):
            repo_type, repo_id = repo_of(req)
            where = f"{repo_type}/{repo_id}/{oid}?size={size}&sig={hub.sign(repo_type, repo_id, oid, size)}"
            # No "verify" action: the upload itself checks the content against its oid and size.
            entry["actions"] = {"upload": {"href": f"{hub.base_url(req)}/lfs-upload/{where}", "header": {}}}
        objects.append(entry)
    body = json.dumps({"transfer": "basic", "objects": objects}).encode()
    return Response(body, media_type="application/vnd.git-lfs+json")


def lfs_upload(req: Request) -> Response:
    oid, size = req.path_params["oid"], req.app.check_signature(req)
    req.app.storage.put_stream(body_chunks(req), oid, size)
    return Response(headers={"ETag": f'"{oid}"'}, media_type="application/json")


def commit(req: Request) -> Response:
    hub, (repo_type, repo_id) = req.app, repo_of(req)
    branch = _writable_branch(req)
    (title, message, parent), operations = protocol.read_commit(
        body_chunks(req), hub.storage, hub.limits.max_commit_line_bytes, hub.limits.max_repo_files
    )
    author = req.state.account.name
    cid = hub.storage.commit(repo_type, repo_id, branch, operations, title, message, author, parent)
    url = f"{repo_url(hub.base_url(req), repo_type, repo_id)}/commit/{cid}"
    return json_response({"success": True, "commitOid": cid, "commitUrl": url, "pullRequestUrl": None})


# ---- reads ---------------------------------------------------------------------------------------------
def _file_range(path, offset: int, length: int):
    with open(path, "rb") as fh:
        fh.seek(offset)
        while length > 0 and (chunk := fh.read(min(1 << 20, length))):
            length -= len(chunk)
            yield chunk


def resolve(req: Request) -> Response:
    st, repo, path = req.app.storage, repo_of(req), req.path_params["path"]
    sha = st.resolve(*repo, req.path_params["rev"])
    entry = st.index(*repo, sha).get(path)
    if entry is None:
        # X-Repo-Commit lets the client cache the absence (transformers probes many optional files).
        raise EntryNotFound(f"Entry not found: {path}", headers={"X-Repo-Commit": sha})
    wanted = protocol.byte_range(req.headers.get("Range", ""), entry.size)
    first, last = wanted or (0, entry.size - 1)
    headers = {
        "X-Repo-Commit": sha,
        "ETag": f'"{entry.tree_oid()}"',
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'inline; filename="{urllib.parse.quote(PurePosixPath(path).name)}"',
        "Content-Length": str(last - first + 1),
    }
    if entry.lfs:
        headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
    if wanted:
        headers["Content-Range"] = f"bytes {first}-{last}/{entry.size}"
    status = 206 if wanted else 200
    if req.method == "HEAD":
        # From the commit: the clients take a 5xx on a HEAD for a network failure and retry it. A GET checks
        # the content before it sends it.
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    content = _file_range(st.verified_blob(entry), first, last - first + 1)
    return StreamingResponse(content, status, headers, media_type="application/octet-stream")


def _listed(item: FileEntry | str, expand: bool, commit: dict) -> dict:
    if isinstance(item, str):  # a folder
        return {"type": "directory", "oid": hashlib.sha1(item.encode()).hexdigest(), "size": 0, "path": item}
    out = {"type": "file", "oid": item.tree_oid(), "size": item.size, "path": item.path}
    if item.lfs:
        out["lfs"] = {"oid": item.sha256, "size": item.size, "pointerSize": 134}
    if expand:
        out["lastCommit"] = {k: commit[k] for k in ("id", "title", "date")}
    return out


def tree(req: Request) -> Response:
    """A folder's entries, a page at a time (``Link: <...>; rel="next"``, as on the Hub)."""
    st, repo = req.app.storage, repo_of(req)
    sha = st.resolve(*repo, req.path_params["rev"])
    index = st.index(*repo, sha)
    folder = req.path_params.get("path", "").strip("/")
    if folder and not index.has_folder(folder):
        raise EntryNotFound(f"Entry not found: {folder}")
    # The cursor is the path the previous page ended at.
    items, after = index.page(
        folder, _flag(req, "recursive"), req.query_params.get("cursor"), _page(req, TREE_PAGE)
    )
    headers = {"X-Repo-Commit": sha, **({"Link": _next_page(req, after)} if after is not None else {})}
    return json_response([_listed(i, _flag(req, "expand"), index.commit) for i in items], headers=headers)


def paths_info(req: Request) -> Response:
    st, repo = req.app.storage, repo_of(req)
    index = st.index(*repo, st.resolve(*repo, req.path_params["rev"]))
    most = req.app.limits.max_paths_per_request
    try:  # a form-encoded body
        form = urllib.parse.parse_qs(read_body(req).decode("utf-8", "replace"), max_num_fields=most + 1)
    except ValueError:  # more fields than that
        form = {"paths": [""] * (most + 1)}
    paths = [p.strip("/") for p in form.get("paths", [])]
    expand = form.get("expand", [""])[0].lower() == "true"
    if len(paths) > most:
        raise BadRequest(f"At most {most} paths per request", code="TooManyPaths")
    found = [index.get(p) or (p if index.has_folder(p) else None) for p in paths if p]
    return json_response([_listed(item, expand, index.commit) for item in found if item is not None])


def refs(req: Request) -> Response:
    table = req.app.storage.refs(*repo_of(req))
    out = {
        kind: [{"name": n, "ref": f"{prefix}{n}", "targetCommit": c} for n, c in sorted(table[kind].items())]
        for kind, prefix in (("branches", "refs/heads/"), ("tags", "refs/tags/"))
    }
    out["converts"] = []
    if "include_prs" in req.query_params:
        out["pullRequests"] = []
    return json_response(out)


def commits(req: Request) -> Response:
    """A revision's history, newest first, a page at a time (``Link: <...>; rel="next"``)."""
    st, repo, query = req.app.storage, repo_of(req), req.query_params
    formatted = "formatted" in query.getlist("expand[]") + query.getlist("expand")
    cid, out = st.resolve(*repo, query.get("cursor") or req.path_params["rev"]), []
    while cid and len(out) < _page(req, COMMITS_PAGE):
        c = st.commit_object(*repo, cid)
        item = {k: c[k] for k in ("id", "title", "message", "date")} | {"authors": [{"user": c["author"]}]}
        if formatted:
            item["formatted"] = {"title": c["title"], "message": c["message"]}
        out.append(item)
        cid = c["parent"]
    return json_response(out, headers={"Link": _next_page(req, cid)} if cid else None)


def ref(req: Request, kind: str) -> Response:
    """POST /branch/{name} (from ``startingPoint``), POST /tag/{revision} (named ``tag``), DELETE either."""
    st, repo, name = req.app.storage, repo_of(req), req.path_params["name"]
    if req.method == "DELETE":
        st.set_ref(*repo, kind, name, None)
        return json_response({})
    body = Fields(read_json(req), "request body")
    if kind == "branches":
        target = body.get("startingPoint", default=None) or "main"
    else:
        name, target = body.get("tag"), name
    st.set_ref(*repo, kind, name, st.resolve(*repo, target))
    return json_response({})


# ---- the table: patterns are matched on the raw path, so a revision sent as refs%2Fpr%2F1 is one parameter --
class Route(NamedTuple):
    methods: str
    pattern: str  # a regular expression; its named groups are the (unquoted) path parameters
    handler: Callable[[Request], Response]
    auth: Auth = Auth.PUBLIC
    step: str | None = None  # the fault-injection step (``STEPS``)
    body: str = "max_json_bytes"  # the ``ServerLimits`` field that caps the body


_REPO = r"(?P<repo_id>[^/]+/[^/]+?)"
API = r"/api/(?P<repo_type>models|datasets|spaces|kernels)/" + _REPO
URL = r"/(?:(?P<repo_type>datasets|spaces|kernels)/)?" + _REPO
SIGNED = r"(?P<repo_type>model|dataset|space|kernel)/" + _REPO + r"/(?P<oid>[^/]+)"
R, W = Auth.READ, Auth.WRITE
ROUTES = (
    Route("GET", "/api/whoami-v2", lambda req: json_response(req.state.account.whoami()), W, "whoami"),
    Route("GET", "/api/agent-harnesses", lambda req: json_response({"standardEnvVars": [], "harnesses": {}})),
    Route("POST", "/api/validate-yaml", validate_yaml, step="validate_yaml"),
    Route("POST", "/api/repos/create", create_repo, W, "create_repo"),
    Route("DELETE", "/api/repos/delete", delete_repo, W, "delete_repo"),
    Route("GET", API + "(?:/revision/(?P<rev>.+))?", repo_info, R, "repo_info"),
    Route("POST", API + "/preupload/(?P<rev>.+)", preupload, W, "preupload"),
    Route("POST", API + "/commit/(?P<rev>.+)", commit, W, "commit", body="max_commit_bytes"),
    Route("GET", API + "/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", tree, R, "tree"),
    Route("POST", API + "/paths-info/(?P<rev>.+)", paths_info, R, "paths_info"),
    Route("GET", API + "/refs", refs, R, "refs"),
    Route("GET", API + "/commits/(?P<rev>.+)", commits, R, "commits"),
    Route("POST DELETE", API + "/branch/(?P<name>.+)", partial(ref, kind="branches"), W, "branch"),
    Route("POST DELETE", API + "/tag/(?P<name>.+)", partial(ref, kind="tags"), W, "tag"),
    Route("GET", API + "/xet-write-token/.+", no_xet, W, "xet"),
    Route("GET POST", API + "/discussions", no_pull_requests, W),
    Route("GET HEAD", URL + "/resolve/(?P<rev>[^/]+)/(?P<path>.+)", resolve, R, "resolve"),
    Route("POST", URL + r"\.git/info/lfs/objects/batch", lfs_batch, W, "lfs_batch"),
    Route("PUT", "/lfs-upload/" + SIGNED, lfs_upload, Auth.SIGNED, "lfs_upload", "max_upload_bytes"),
)
# The protocol steps a fault can be injected at (``HubServer.set_fault``).
STEPS = tuple(dict.fromkeys(route.step for route in ROUTES if route.step))


def match(method: str, raw_path: str) -> tuple[Route, dict[str, str]]:
    """The route for a request and its unquoted parameters."""
    allowed = []
    for route in ROUTES:
        m = re.fullmatch(route.pattern, raw_path)  # re caches the compiled patterns
        if m is not None and method in route.methods.split():
            return route, {k: urllib.parse.unquote(v) for k, v in m.groupdict().items() if v is not None}
        allowed += route.methods.split() if m else []
    if allowed:
        raise MethodNotAllowed(f"Method {method} is not allowed here")
    raise NotFound("Not found")
