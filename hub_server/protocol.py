"""The request payloads of the Hub protocol, parsed into small dataclasses that check themselves, and the
ndjson commit read into storage operations (``read_commit``).

Handlers never index raw JSON: a missing or mistyped field, a JSON array where an object belongs, invalid
base64 or absurd nesting become a ``BadRequest`` that names the field, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import urllib.parse
from dataclasses import dataclass

from .commit_stream import RawLine, commit_lines
from .errors import BadRequest, PayloadTooLarge, Unprocessable
from .index import FileEntry, git_blob_oid, looks_like_lfs
from .names import COMMIT_ID_RE, REPO_TYPES, SHA256_RE, validate_path, validate_repo_id
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

    def flag(self, key: str, *, default: bool = False) -> bool:
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


# ---- repo management -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RepoSpec:
    """The repo a create/delete body names."""

    repo_type: str
    repo_id: str
    private: bool = False

    @classmethod
    def from_body(cls, body, default_namespace: str) -> RepoSpec:
        f = Fields(body, "request body")
        name = f.text("name")
        namespace = f.text("organization", required=False) or default_namespace
        repo_type = f.text("type", required=False) or "model"
        if repo_type not in REPO_TYPES:
            raise BadRequest(f"Invalid repo type {repo_type!r}: one of {REPO_TYPES}", code="InvalidRepoType")
        visibility = f.text("visibility", required=False)
        if visibility not in (None, "private", "public"):
            raise BadRequest(f"'visibility' must be 'private' or 'public', got {visibility!r}")
        private = visibility == "private" or f.flag("private")
        repo_id = f"{namespace}/{name}"
        validate_repo_id(repo_id)
        return cls(repo_type, repo_id, private)


# ---- preupload and LFS ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreuploadFile:
    path: str
    sample: bytes
    size: int

    @classmethod
    def from_json(cls, obj, index: int) -> PreuploadFile:
        f = Fields(obj, f"files[{index}]")
        path = validate_path(f.text("path"))
        sample = _base64(f.text("sample", required=False, default=""), f"files[{index}].sample")
        return cls(path, sample, f.integer("size", required=False, default=len(sample)))


def preupload_files(body) -> list[PreuploadFile]:
    return [
        PreuploadFile.from_json(item, i) for i, item in enumerate(Fields(body, "request body").items("files"))
    ]


@dataclass(frozen=True)
class LfsObject:
    oid: str
    size: int

    def __post_init__(self):
        if not isinstance(self.oid, str) or not SHA256_RE.fullmatch(self.oid):
            raise BadRequest(f"LFS oid {self.oid!r} is not a lowercase sha256", code="InvalidOid")

    @classmethod
    def from_json(cls, obj, index: int) -> LfsObject:
        f = Fields(obj, f"objects[{index}]")
        return cls(f.text("oid"), f.integer("size"))


def lfs_batch_objects(body) -> list[LfsObject]:
    f = Fields(body, "LFS batch request")
    if f.text("operation") != "upload":
        raise BadRequest("Only the LFS 'upload' operation is supported")
    return [LfsObject.from_json(item, i) for i, item in enumerate(f.items("objects", required=True))]


# ---- the ndjson commit ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitHeader:
    summary: str
    description: str
    parent_commit: str | None

    def __post_init__(self):
        if self.parent_commit is not None and not COMMIT_ID_RE.fullmatch(self.parent_commit):
            raise BadRequest(f"parentCommit {self.parent_commit!r} is not a 40-hex commit id")


@dataclass(frozen=True)
class InlineFile:
    """A ``file`` line: content inside the commit, base64. A short one arrives decoded (``bytes``), a long one
    already streamed into the blob store (``StoredBlob``, see ``commit_stream``)."""

    path: str
    content: bytes | StoredBlob

    def __post_init__(self):
        validate_path(self.path)


@dataclass(frozen=True)
class LfsFileRef:
    """An ``lfsFile`` line: content uploaded before, named by sha256 (``size`` is absent for copies)."""

    path: str
    oid: str
    size: int | None

    def __post_init__(self):
        validate_path(self.path)
        LfsObject(self.oid, self.size or 0)


CommitLine = CommitHeader | InlineFile | LfsFileRef | DeleteFile | DeleteFolder


def _header(v: Fields) -> CommitHeader:
    return CommitHeader(
        v.text("summary", required=False, default="") or "update",
        v.text("description", required=False, default=""),
        v.text("parentCommit", required=False),
    )


def _inline_file(v: Fields, streamed: StoredBlob | None = None) -> InlineFile:
    if v.text("encoding", required=False, default="base64") != "base64":
        raise BadRequest(f"{v.where}: only base64 file content is supported")
    return InlineFile(v.text("path"), streamed or _base64(v.text("content"), f"{v.where}.content"))


_LINE_PARSERS = {
    "header": _header,
    "file": _inline_file,
    "lfsFile": lambda v: LfsFileRef(v.text("path"), v.text("oid"), v.integer("size", required=False)),
    "deletedFile": lambda v: DeleteFile(v.text("path")),
    "deletedFolder": lambda v: DeleteFolder(v.text("path")),
}


def parse_commit_line(raw: RawLine, number: int) -> CommitLine:
    where = f"commit line {number}"
    line = Fields(parse_json(raw.text, where), where)
    key = line.text("key")
    if key not in _LINE_PARSERS:
        raise BadRequest(f"{where}: unsupported operation {key!r}; one of {sorted(_LINE_PARSERS)}")
    value = line.child("value")
    if raw.blob is None:
        return _LINE_PARSERS[key](value)
    # The one long string of this line was streamed: it must have been the file's content.
    if (
        key != "file"
        or value.obj.get("content") != raw.placeholder
        or raw.text.count(raw.placeholder.encode()) != 1
    ):
        raise BadRequest(f"{where}: only a file's base64 content may be longer than 64 KiB")
    return _inline_file(value, raw.blob)


def _operation(storage, line: CommitLine):
    """The storage operation of one parsed commit line; inline content is stored as it arrives."""
    if isinstance(line, InlineFile):
        if isinstance(line.content, StoredBlob):  # streamed into the blob store already
            blob, git_oid = line.content, storage.git_oid(line.content.sha256)
        else:
            data = line.content
            blob, git_oid = StoredBlob(storage.put_bytes(data), len(data), data[:8000]), git_blob_oid(data)
        lfs = looks_like_lfs(line.path, blob.size, blob.sample)
        return AddFile(FileEntry(line.path, blob.sha256, blob.size, git_oid, lfs))
    if isinstance(line, LfsFileRef):
        if not storage.has_blob(line.oid):
            raise Unprocessable(f"LFS object for {line.path} (oid {line.oid}) was never uploaded")
        size = storage.blob_path(line.oid).stat().st_size
        if line.size is not None and line.size != size:
            raise Unprocessable(f"Size mismatch for {line.path}: {line.size} != {size}", code="BadOid")
        return AddFile(FileEntry(line.path, line.oid, size, storage.git_oid(line.oid), True))
    return line  # DeleteFile / DeleteFolder are storage operations already


def read_commit(chunks, storage, max_line: int, max_operations: int) -> tuple[CommitHeader, list]:
    """The header and the storage operations of an ndjson commit body, read line by line: a file's content
    streams to disk, so memory holds one line's JSON, whatever the size."""
    header, operations = None, []
    with contextlib.closing(commit_lines(chunks, max_line, storage.blob_writer)) as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.text.strip():
                continue
            line = parse_commit_line(raw, number)
            if isinstance(line, CommitHeader):
                if header is not None or operations:
                    raise BadRequest(f"commit line {number}: the header must be the first line, once")
                header = line
                continue
            operations.append(_operation(storage, line))
            if len(operations) > max_operations:
                raise PayloadTooLarge(
                    f"A commit holds at most {max_operations} operations", code="TooManyFiles"
                )
    if header is None:
        raise BadRequest("The commit has no header line")
    return header, operations


# ---- reads ---------------------------------------------------------------------------------------------
def paths_request(raw: bytes, content_type: str, max_paths: int) -> tuple[list[str], bool]:
    """The paths (at most ``max_paths``) and the expand flag of a paths-info body, form-encoded as the
    client sends it, or JSON."""
    if "json" in content_type:
        f = Fields(parse_json(raw, "request body"), "request body")
        paths, expand = f.items("paths"), f.flag("expand")
    else:
        try:
            form = urllib.parse.parse_qs(raw.decode("utf-8", "replace"), max_num_fields=max_paths + 1)
        except ValueError:
            form = {"paths": [""] * (max_paths + 1)}
        paths, expand = form.get("paths", []), form.get("expand", ["false"])[0].lower() == "true"
    if len(paths) > max_paths:
        raise BadRequest(f"At most {max_paths} paths per request", code="TooManyPaths")
    return [p.strip("/") for p in paths if isinstance(p, str)], expand
