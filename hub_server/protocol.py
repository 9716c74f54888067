"""The request payloads of the Hub protocol, read into checked values, and the ndjson commit read into storage
operations (``read_commit``). A missing or mistyped field, invalid base64 or absurd nesting is a ``BadRequest``
naming the field, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import urllib.parse

from .commit_stream import RawLine, commit_lines
from .errors import BadRequest, PayloadTooLarge, Unprocessable
from .index import FileEntry, git_blob_oid, looks_like_lfs
from .names import REPO_TYPES, validate_path, validate_repo_id
from .storage import AddFile, DeleteFile, DeleteFolder, StoredBlob
from .transport import parse_json


class Fields:
    """Typed access to one JSON object, with errors that say where: ``Fields(obj, "commit header")``."""

    def __init__(self, obj, where: str):
        if not isinstance(obj, dict):
            raise BadRequest(f"{where} must be a JSON object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def _get(self, key: str, types: tuple[type, ...], type_name: str, required: bool, default):
        if key not in self.obj or self.obj[key] is None:
            if required:
                raise BadRequest(f"{self.where}: '{key}' is required")
            return default
        value = self.obj[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise BadRequest(f"{self.where}: '{key}' must be {type_name}, got {type(value).__name__}")
        return value

    def text(self, key: str, *, required: bool = True, default: str | None = None) -> str | None:
        return self._get(key, (str,), "a string", required, default)

    def integer(self, key: str, *, required: bool = True, default: int | None = None) -> int | None:
        value = self._get(key, (int,), "an integer", required, default)
        if value is not None and value < 0:
            raise BadRequest(f"{self.where}: '{key}' must not be negative")
        return value

    def flag(self, key: str, *, default: bool | None = False) -> bool | None:
        return self._get(key, (bool,), "true or false", False, default)

    def items(self, key: str, *, required: bool = False) -> list:
        return self._get(key, (list,), "a list", required, [])

    def child(self, key: str) -> Fields:
        return Fields(self._get(key, (dict,), "an object", True, None), f"{self.where}.{key}")


def _base64(value: str, where: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where} is not valid base64") from None


def repo_spec(body, default_namespace: str) -> tuple[str, str, bool]:
    """(repo type, repo id, private) of a create or delete body."""
    f = Fields(body, "request body")
    name = f.text("name")
    namespace = f.text("organization", required=False) or default_namespace
    repo_type = f.text("type", required=False) or "model"
    if repo_type not in REPO_TYPES:
        raise BadRequest(f"Invalid repo type {repo_type!r}: one of {REPO_TYPES}", code="InvalidRepoType")
    visibility = f.text("visibility", required=False)
    if visibility not in (None, "private", "public"):
        raise BadRequest(f"'visibility' must be 'private' or 'public', got {visibility!r}")
    repo_id = f"{namespace}/{name}"
    validate_repo_id(repo_id)
    return repo_type, repo_id, visibility == "private" or f.flag("private")


def preupload_files(body) -> list[tuple[str, int, bytes]]:
    """(path, size, first bytes) of each file a preupload body names."""
    out = []
    for i, item in enumerate(Fields(body, "request body").items("files")):
        f = Fields(item, f"files[{i}]")
        path = validate_path(f.text("path"))
        sample = _base64(f.text("sample", required=False, default=""), f"files[{i}].sample")
        out.append((path, f.integer("size", required=False, default=len(sample)), sample))
    return out


def lfs_batch_objects(body) -> list[tuple[str, int]]:
    """(oid, size) of each object an LFS upload batch names."""
    f = Fields(body, "LFS batch request")
    if f.text("operation") != "upload":
        raise BadRequest("Only the LFS 'upload' operation is supported")
    out = []
    for i, item in enumerate(f.items("objects", required=True)):
        obj = Fields(item, f"objects[{i}]")
        out.append((obj.text("oid"), obj.integer("size")))  # the storage checks the oid
    return out


# ---- the ndjson commit ---------------------------------------------------------------------------------
def _header(v: Fields, storage, streamed) -> tuple[str, str, str | None]:
    # The storage compares parentCommit with the branch's head.
    summary = v.text("summary", required=False) or "update"
    return summary, v.text("description", required=False, default=""), v.text("parentCommit", required=False)


def _inline_file(v: Fields, storage, streamed: StoredBlob | None) -> AddFile:
    """A ``file`` line: base64 content inside the commit, short (decoded here) or already streamed to disk."""
    if v.text("encoding", required=False, default="base64") != "base64":
        raise BadRequest(f"{v.where}: only base64 file content is supported")
    path = validate_path(v.text("path"))
    if streamed is None:
        data = _base64(v.text("content"), f"{v.where}.content")
        blob, git_oid = StoredBlob(storage.put_bytes(data), len(data), data[:8000]), git_blob_oid(data)
    else:
        blob, git_oid = streamed, storage.git_oid(streamed.sha256)
    lfs = looks_like_lfs(path, blob.size, blob.sample)
    return AddFile(FileEntry(path, blob.sha256, blob.size, git_oid, lfs))


def _lfs_file(v: Fields, storage, streamed) -> AddFile:
    """An ``lfsFile`` line: content uploaded before, named by sha256 (``size`` is absent for copies)."""
    path, oid, size = validate_path(v.text("path")), v.text("oid"), v.integer("size", required=False)
    if not storage.has_blob(oid):
        raise Unprocessable(f"LFS object for {path} (oid {oid}) was never uploaded")
    stored = storage.blob_path(oid).stat().st_size
    if size is not None and size != stored:
        raise Unprocessable(f"Size mismatch for {path}: {size} != {stored}", code="BadOid")
    return AddFile(FileEntry(path, oid, stored, storage.git_oid(oid), True))


_LINE_PARSERS = {
    "header": _header,
    "file": _inline_file,
    "lfsFile": _lfs_file,
    "deletedFile": lambda v, storage, streamed: DeleteFile(v.text("path")),
    "deletedFolder": lambda v, storage, streamed: DeleteFolder(v.text("path")),
}


def parse_commit_line(raw: RawLine, number: int, storage):
    """The header (summary, description, parent commit) or the storage operation of one commit line."""
    where = f"commit line {number}"
    line = Fields(parse_json(raw.text, where), where)
    key = line.text("key")
    if key not in _LINE_PARSERS:
        raise BadRequest(f"{where}: unsupported operation {key!r}; one of {sorted(_LINE_PARSERS)}")
    value = line.child("value")
    # The one long string of a line is streamed: it must have been the file's content.
    if raw.blob is not None and (
        key != "file"
        or value.obj.get("content") != raw.placeholder
        or raw.text.count(raw.placeholder.encode()) != 1
    ):
        raise BadRequest(f"{where}: only a file's base64 content may be longer than 64 KiB")
    return _LINE_PARSERS[key](value, storage, raw.blob)


def read_commit(chunks, storage, max_line: int, max_operations: int) -> tuple[tuple, list]:
    """The header and the storage operations of an ndjson commit body, read line by line: a file's content
    streams to disk, so memory holds one line's JSON, whatever the size."""
    header, operations = None, []
    with contextlib.closing(commit_lines(chunks, max_line, storage.blob_writer)) as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.text.strip():
                continue
            line = parse_commit_line(raw, number, storage)
            if isinstance(line, tuple):
                if header is not None or operations:
                    raise BadRequest(f"commit line {number}: the header must be the first line, once")
                header = line
            elif len(operations) < max_operations:
                operations.append(line)
            else:
                raise PayloadTooLarge(
                    f"A commit holds at most {max_operations} operations", code="TooManyFiles"
                )
    if header is None:
        raise BadRequest("The commit has no header line")
    return header, operations


def paths_request(raw: bytes, max_paths: int) -> tuple[list[str], bool]:
    """The paths (at most ``max_paths``) and the expand flag of a form-encoded paths-info body."""
    try:
        form = urllib.parse.parse_qs(raw.decode("utf-8", "replace"), max_num_fields=max_paths + 1)
    except ValueError:  # more fields than that
        form = {"paths": [""] * (max_paths + 1)}
    paths = form.get("paths", [])
    if len(paths) > max_paths:
        raise BadRequest(f"At most {max_paths} paths per request", code="TooManyPaths")
    return [p.strip("/") for p in paths], form.get("expand", ["false"])[0].lower() == "true"
