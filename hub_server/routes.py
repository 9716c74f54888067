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
from pathlib import PurePosixPath

from briskbert.hub_cards.front_matter import FrontMatterError, YamlLimits, load_front_matter
from briskbert.hub_cards.rules import check_metadata, metadata_warnings

from . import protocol
from .errors import BadRequest, Conflict, EntryNotFound, MethodNotAllowed, NotFound, RevisionNotFound
from .index import FileEntry, Folder, looks_like_lfs
from .names import repo_key, validate_ref_name
from .transport import BodyKind, Request, Response, byte_range, json_response

TREE_PAGE = 1000  # entries per /tree page, as on the Hub
COMMITS_PAGE = 100  # commits per /commits page


class Auth(Enum):
    PUBLIC = "public"  # anyone
    READ = "read"  # the repo exists and is public, or the token's account owns its namespace
    WRITE = "write"  # a valid token; on a repo, one whose account owns the repo's namespace
    SIGNED = "signed"  # a pre-signed LFS URL (the client sends no token there)


def repo_url(base_url: str, repo_type: str, repo_id: str) -> str:
    return f"{base_url}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"


def _repo_spec(req: Request) -> protocol.RepoSpec:
    """The repo a create or delete body names, in a namespace the caller may write in."""
    spec = protocol.RepoSpec.from_body(req.json(), req.account.name)
    namespace = spec.repo_id.split("/")[0]
    req.account.check_writes(namespace, f"a {spec.repo_type} under the namespace {namespace!r}")
    return spec


# ---- repo management ----------------------------------------------------------------------------------
def whoami(req: Request) -> Response:
    return json_response(req.account.whoami())


def agent_harnesses(req: Request) -> Response:
    return json_response({"standardEnvVars": [], "harnesses": {}})


def validate_yaml(req: Request) -> Response:
    # The client calls .json() before raise_for_status and reads "errors": every answer here has them.
    try:
        content = protocol.Fields(req.json(), "request body").text("content")
        meta = load_front_matter(content, req.hub.limits.yaml) or {}
    except (BadRequest, FrontMatterError) as e:
        errors, warnings = [str(e)], []
    else:
        errors, warnings = check_metadata(meta), metadata_warnings(meta)
    body = {"errors": [{"message": m} for m in errors], "warnings": [{"message": m} for m in warnings]}
    if errors:
        raise BadRequest("; ".join(errors), code="InvalidMetadata", body=body)
    return json_response(body)


def create_repo(req: Request) -> Response:
    st, spec = req.hub.storage, _repo_spec(req)
    if st.create_repo(spec.repo_type, spec.repo_id, spec.private, req.account.name) is None:
        existing = st.lookup(spec.repo_type, spec.repo_id)
        url = repo_url(req.base_url, spec.repo_type, existing.repo_id if existing else spec.repo_id)
        # The client reads "url" even from the 409 it swallows with exist_ok=True.
        raise Conflict("You already created this repo", body={"url": url})
    url = repo_url(req.base_url, spec.repo_type, spec.repo_id)
    return json_response({"url": url, "name": spec.repo_id, "id": spec.repo_id})


def delete_repo(req: Request) -> Response:
    spec = _repo_spec(req)
    req.hub.storage.delete_repo(spec.repo_type, spec.repo_id)
    return json_response({})


def update_settings(req: Request) -> Response:
    private = protocol.Fields(req.json(), "request body").flag("private", default=None)
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


def _read_card(storage, readme: FileEntry, limits: YamlLimits) -> dict:
    """The README's front matter, or ``{}`` when it has none or it cannot be read within ``limits``."""
    with contextlib.suppress(FrontMatterError, OSError):
        with open(storage.blob_path(readme.sha256), "rb") as fh:
            text = fh.read(limits.max_bytes + 64).decode("utf-8", "replace")
        return load_front_matter(text, limits) or {}
    return {}


def repo_info(req: Request) -> Response:
    st, repo_type = req.hub.storage, req.repo_type
    record = st.meta(repo_type, req.repo_id)
    sha = st.resolve(repo_type, req.repo_id, req.params.get("rev") or "main")
    index = st.index(repo_type, req.repo_id, sha)
    card = index.card(lambda readme: _read_card(st, readme, req.hub.limits.yaml))
    tags = [t for t in card["tags"] if isinstance(t, str)] if isinstance(card.get("tags"), list) else []
    if isinstance(card.get("library_name"), str) and card["library_name"] not in tags:
        tags.insert(0, card["library_name"])
    info = {
        "_id": hashlib.sha1(repo_key(record.repo_id).encode()).hexdigest()[:24],
        "id": record.repo_id,
        "author": record.namespace,
        "sha": sha,
        "lastModified": index.commit["date"],
        "createdAt": record.created_at,
        "private": record.private,
        "disabled": False,
        "gated": False,
        "downloads": 0,
        "likes": 0,
        "tags": tags,
        "cardData": card or None,
    }
    if repo_type == "model":
        info["modelId"] = record.repo_id
        info.update({k: card[k] for k in ("pipeline_tag", "library_name") if isinstance(card.get(k), str)})
    head = json.dumps(info, default=str).encode()
    # The sibling list is built once per revision and sent as it is, however many files the repo has.
    return Response(body=(head[:-1], b', "siblings": ', index.siblings_json(req.flag("blobs")), b"}"))


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
    existing = st.index(req.repo_type, req.repo_id, head)
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
        entry: dict = {"oid": obj.oid, "size": obj.size}
        if obj.size > req.hub.limits.max_upload_bytes:
            limit = req.hub.limits.max_upload_bytes
            entry["error"] = {"code": 413, "message": f"{obj.size} bytes is over the upload limit of {limit}"}
        elif not req.hub.storage.reuse_blob(obj.oid, obj.size):
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
    oid, size = req.params["oid"], req.hub.check_signature(req)
    req.hub.storage.put_stream(req.body.chunks(), oid, size)
    return Response(headers={"ETag": f'"{oid}"'})


def lfs_verify(req: Request) -> Response:
    oid, size = req.params["oid"], req.hub.check_signature(req)
    if not req.hub.storage.has_blob(oid, size):
        raise EntryNotFound(f"LFS object {oid} was not uploaded")
    return json_response({"oid": oid, "size": size})


def commit(req: Request) -> Response:
    branch = _writable_branch(req)
    limits = req.hub.limits
    header, operations = protocol.read_commit(
        req.body.chunks(), req.hub.storage, limits.max_commit_line_bytes, limits.max_repo_files
    )
    cid = req.hub.storage.commit(
        req.repo_type,
        req.repo_id,
        branch,
        operations,
        header.summary,
        header.description,
        req.account.name,
        header.parent_commit,
    )
    url = f"{repo_url(req.base_url, req.repo_type, req.repo_id)}/commit/{cid}"
    return json_response({"success": True, "commitOid": cid, "commitUrl": url, "pullRequestUrl": None})


# ---- reads ---------------------------------------------------------------------------------------------
def resolve(req: Request) -> Response:
    st, path = req.hub.storage, req.params["path"]
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    entry = st.index(req.repo_type, req.repo_id, sha).get(path)
    if entry is None:
        # X-Repo-Commit lets the client cache the absence (transformers probes many optional files).
        raise EntryNotFound(f"Entry not found: {path}", headers={"X-Repo-Commit": sha})
    headers = {
        "X-Repo-Commit": sha,
        "ETag": f'"{entry.tree_oid()}"',
        "Accept-Ranges": "bytes",
        "Content-Disposition": f'inline; filename="{urllib.parse.quote(PurePosixPath(path).name)}"',
    }
    if entry.lfs:
        headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
    wanted = byte_range(req.headers.get("Range", ""), entry.size)
    first, last = wanted or (0, entry.size - 1)
    if wanted:
        headers["Content-Range"] = f"bytes {first}-{last}/{entry.size}"
    return Response(
        status=206 if wanted else 200,
        content_type="application/octet-stream",
        headers=headers,
        # The content is checked when it is sent; a HEAD answers from the commit (the clients take a 5xx there for
        # a network failure, retry it and then say so).
        file=st.verified_blob(entry) if req.method == "GET" else st.blob_path(entry.sha256),
        offset=first,
        length=last - first + 1,
    )


def _directory(path: str) -> dict:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def _file_entry(e: FileEntry, expand: bool, commit_obj: dict) -> dict:
    item = {"type": "file", "oid": e.tree_oid(), "size": e.size, "path": e.path}
    if e.lfs:
        item["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": 134}
    if expand:
        item["lastCommit"] = {k: commit_obj[k] for k in ("id", "title", "date")}
    return item


def tree(req: Request) -> Response:
    """A folder's entries, a page at a time (``Link: <...>; rel="next"``, as on the Hub)."""
    st = req.hub.storage
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    index = st.index(req.repo_type, req.repo_id, sha)
    folder = req.params.get("path", "").strip("/")
    if folder and not index.has_folder(folder):
        raise EntryNotFound(f"Entry not found: {folder}")
    # The cursor is the path the previous page ended at.
    items, after = index.page(folder, req.flag("recursive"), req.arg("cursor"), req.page_size(TREE_PAGE))
    expand = req.flag("expand")
    entries = [
        _directory(i.path) if isinstance(i, Folder) else _file_entry(i, expand, index.commit) for i in items
    ]
    headers = {"X-Repo-Commit": sha}
    if after is not None:
        headers["Link"] = f'<{req.next_page(cursor=after)}>; rel="next"'
    return json_response(entries, headers=headers)


def paths_info(req: Request) -> Response:
    st = req.hub.storage
    sha = st.resolve(req.repo_type, req.repo_id, req.params["rev"])
    index = st.index(req.repo_type, req.repo_id, sha)
    paths, expand = protocol.paths_request(
        req.body.read(), req.headers.get("Content-Type", ""), req.hub.limits.max_paths_per_request
    )
    out = []
    for p in paths:
        entry = index.get(p) if p else None
        if entry is not None:
            out.append(_file_entry(entry, expand, index.commit))
        elif p and index.has_folder(p):
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
    """A revision's history, newest first, a page at a time (``Link: <...>; rel="next"``)."""
    st = req.hub.storage
    formatted = req.query.get("expand[]") == ["formatted"] or "formatted" in req.query.get("expand", [])
    start = st.resolve(req.repo_type, req.repo_id, req.arg("cursor") or req.params["rev"])
    history, next_id = st.history(req.repo_type, req.repo_id, start, req.page_size(COMMITS_PAGE))
    out = []
    for c in history:
        item = {"id": c["id"], "title": c["title"], "message": c["message"], "date": c["date"]}
        item["authors"] = [{"user": c["author"]}]
        if formatted:
            item["formatted"] = {"title": c["title"], "message": c["message"]}
        out.append(item)
    headers = {"Link": f'<{req.next_page(cursor=next_id)}>; rel="next"'} if next_id else {}
    return json_response(out, headers=headers)


# ---- refs ----------------------------------------------------------------------------------------------
def branch(req: Request) -> Response:
    st, name = req.hub.storage, req.params["name"]
    if req.method == "DELETE":
        st.set_ref(req.repo_type, req.repo_id, "branches", name, None)
        return json_response({})
    validate_ref_name(name)
    start = protocol.Fields(req.json(), "request body").text("startingPoint", required=False) or "main"
    target = st.resolve(req.repo_type, req.repo_id, start)
    st.set_ref(req.repo_type, req.repo_id, "branches", name, target)
    return json_response({})


def tag(req: Request) -> Response:
    # POST /tag/{target revision} with the name in the body; DELETE /tag/{tag name}.
    st = req.hub.storage
    if req.method == "DELETE":
        st.set_ref(req.repo_type, req.repo_id, "tags", req.params["name"], None)
        return json_response({})
    name = validate_ref_name(protocol.Fields(req.json(), "request body").text("tag"))
    target = st.resolve(req.repo_type, req.repo_id, req.params["name"])
    st.set_ref(req.repo_type, req.repo_id, "tags", name, target)
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

    return re.compile("".join(piece(p) for p in re.split(r"(\{\w+\+?\})", pattern)))


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    pattern: str
    handler: Callable[[Request], Response]
    auth: Auth = Auth.PUBLIC
    body: BodyKind = BodyKind.NONE
    step: str | None = None  # the fault-injection step (``STEPS``)

    regex: re.Pattern = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "regex", _compile(self.pattern))  # once, when the table is built


R, W, J, S = Auth.READ, Auth.WRITE, BodyKind.JSON, BodyKind.STREAM
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
    Route(("PUT",), "/lfs-upload/{one_type}/{repo}/{oid}", lfs_upload, Auth.SIGNED, S, "lfs_upload"),
    Route(("POST",), "/lfs-verify/{one_type}/{repo}/{oid}", lfs_verify, W, J, "lfs_verify"),
)
# The protocol steps a fault can be injected at (``HubServer.set_fault``).
STEPS = tuple(dict.fromkeys(route.step for route in ROUTES if route.step))


def match(method: str, raw_path: str) -> tuple[Route, dict[str, str]]:
    """The route for a request and its unquoted parameters. Segments are split on the raw path, then
    unquoted, so a revision sent as ``refs%2Fpr%2F1`` stays one parameter."""
    allowed = []
    for route in ROUTES:
        m = route.regex.fullmatch(raw_path)
        if m is None:
            continue
        if method not in route.methods:
            allowed += route.methods
            continue
        return route, {k: urllib.parse.unquote(v) for k, v in m.groupdict().items() if v is not None}
    if allowed:
        raise MethodNotAllowed(f"Method {method} is not allowed here")
    raise NotFound("Not found")


__all__ = ["ROUTES", "STEPS", "Auth", "Request", "Response", "Route", "match"]
