"""On-disk storage of the local Hub: content-addressed blobs, immutable commits, atomically updated refs.

Layout under ``data_dir``::

    blobs/<sha256[:2]>/<sha256>          file contents, named by their sha256 (written once, never changed)
    tmp/                                  partial writes; renamed into place only when complete (what an
                                          interrupted write leaves here is removed when a server starts)
    repos/<type>s/<namespace>/<name>/
        meta.json                         {"private": bool, "created_at": ...}
        commits/<40-hex>.json             {"id", "parent", "title", "message", "date", "author", "files"}
        refs.json                         {"branches": {name: commit}, "tags": {name: commit}}

A commit is visible only once ``refs.json`` names it, and ``refs.json`` is replaced with ``os.replace``
after the blobs and the commit object are on disk. A crash or a failed upload at any earlier point leaves
at most unreferenced blobs or commit objects behind; readers never see a half-written commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import (
    BadRequest,
    Conflict,
    EntryNotFound,
    Forbidden,
    HubError,
    PreconditionFailed,
    RepoNotFound,
    RevisionNotFound,
    Unprocessable,
)

REPO_TYPES = ("model", "dataset", "space", "kernel")
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_HEX40_RE = re.compile(r"^[0-9a-fA-F]{40}$")
# What ``git check-ref-format`` refuses, plus names that would be read as something else here.
_REF_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")

# Files stored as LFS pointers on the real Hub (its default .gitattributes), plus anything large or binary.
LFS_SUFFIXES = (
    ".7z",
    ".arrow",
    ".bin",
    ".bz2",
    ".ckpt",
    ".ftz",
    ".gz",
    ".h5",
    ".joblib",
    ".mlmodel",
    ".model",
    ".msgpack",
    ".npy",
    ".npz",
    ".onnx",
    ".ot",
    ".parquet",
    ".pb",
    ".pickle",
    ".pkl",
    ".pt",
    ".pth",
    ".rar",
    ".safetensors",
    ".tar",
    ".tflite",
    ".tgz",
    ".wasm",
    ".xz",
    ".zip",
    ".zst",
)
LFS_MIN_SIZE = 10 * 1024 * 1024

GITATTRIBUTES = (
    "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES)
    + "*tfevents* filter=lfs diff=lfs merge=lfs -text\n"
)


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def looks_like_lfs(path: str, size: int, sample: bytes) -> bool:
    """The Hub's rule of thumb: LFS suffixes, files over 10 MB, and binary content go to LFS."""
    return path.lower().endswith(LFS_SUFFIXES) or size > LFS_MIN_SIZE or b"\0" in sample[:8000]


def validate_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if (
        len(parts) != 2
        or not all(_NAME_RE.match(p) for p in parts)
        or any(".." in p or p.endswith(".git") for p in parts)
    ):
        raise BadRequest(
            f"Invalid repo id {repo_id!r}: expected 'namespace/name' made of letters, digits, "
            "'-', '_' and '.' (no '..', no '.git' suffix)",
            code="InvalidRepoId",
        )
    return parts[0], parts[1]


def validate_path(path: str) -> str:
    """A file path inside a repo: relative, POSIX, no '.'/'..' segments, no control characters."""
    if (
        not isinstance(path, str)
        or not path
        or len(path) > 1000
        or path.startswith("/")
        or "\\" in path
        or any(ord(c) < 32 for c in path)
        or any(seg in ("", ".", "..") for seg in path.split("/"))
        or path.split("/")[0] == ".git"
    ):
        raise BadRequest(
            f"Invalid file path {path!r}: paths are relative, use '/', and contain no "
            "empty, '.' or '..' segments",
            code="InvalidPath",
        )
    return path


def ref_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a branch or tag (git's ref-name rules; no 40-hex names, which would shadow
    commit ids in ``resolve``; no ``refs/`` prefix, which ``resolve`` strips), or None when it can."""
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        return "it must be 1 to 200 characters"
    if _HEX40_RE.match(name):
        return "40 hexadecimal characters would shadow a commit id"
    if name.startswith("refs/"):
        return "the refs/ prefix is implied"
    if _REF_FORBIDDEN_CHARS.search(name):
        return "it contains a space, a control character or one of ~ ^ : ? * [ \\"
    if name == "@" or "@{" in name or ".." in name or name.endswith("."):
        return "'@', '@{', '..' and a trailing '.' are not allowed"
    parts = name.split("/")
    if any(not p or p.startswith(".") or p.endswith(".lock") for p in parts):
        return "no empty component, no component starting with '.' or ending with '.lock'"
    return None


def validate_ref_name(name: str) -> str:
    problem = ref_name_problem(name)
    if problem:
        raise BadRequest(f"Invalid branch or tag name {name!r}: {problem}", code="InvalidRef")
    return name


@dataclass
class FileEntry:
    path: str
    sha256: str
    size: int
    git_oid: str  # git blob sha1 of the content
    lfs: bool

    def tree_oid(self) -> str:
        """The git oid the tree shows: of the pointer for LFS files, of the content otherwise."""
        return git_blob_oid(lfs_pointer(self.sha256, self.size)) if self.lfs else self.git_oid

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "size": self.size, "git_oid": self.git_oid, "lfs": self.lfs}


# ---- commit operations: each checks its path once, when it is made ---------------------------------------
@dataclass(frozen=True)
class AddFile:
    """Add or replace ``entry.path``; the blob must already be stored."""

    entry: FileEntry

    def __post_init__(self):
        validate_path(self.entry.path)


@dataclass(frozen=True)
class DeleteFile:
    path: str

    def __post_init__(self):
        validate_path(self.path)


@dataclass(frozen=True)
class DeleteFolder:
    path: str

    def __post_init__(self):
        object.__setattr__(
            self, "path", validate_path(self.path.strip("/") if isinstance(self.path, str) else "")
        )


CommitOperation = AddFile | DeleteFile | DeleteFolder


def _apply(files: dict[str, FileEntry], op: CommitOperation, has_blob) -> None:
    if isinstance(op, AddFile):
        entry = op.entry
        if not has_blob(entry.sha256, entry.size):
            raise Unprocessable(f"Content of {entry.path} (sha256 {entry.sha256}) was never uploaded")
        files[entry.path] = entry
    elif isinstance(op, DeleteFile):
        if op.path not in files:
            raise EntryNotFound(f"A file with this name doesn't exist: {op.path}")
        del files[op.path]
    else:
        doomed = [p for p in files if p.startswith(op.path + "/")]
        if not doomed:
            raise EntryNotFound(f"A folder with this name doesn't exist: {op.path}")
        for p in doomed:
            del files[p]


def repo_not_found(repo_type: str, repo_id: str) -> RepoNotFound:
    # The same words whether the repo is missing or private: its existence is not revealed.
    return RepoNotFound(
        f"Repository Not Found for url: {repo_type}s/{repo_id}. If you are trying to access a private "
        "repo, make sure you are authenticated."
    )


class Storage:
    """Thread-safe storage for one server process. All writes go through ``tmp/`` and ``os.replace``."""

    def __init__(self, data_dir: str | os.PathLike):
        self.root = Path(data_dir).resolve()
        for sub in ("blobs", "tmp", "repos"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def clean_tmp(self) -> int:
        """Remove what interrupted writes left in ``tmp/``; call only while no write is running."""
        leftovers = list((self.root / "tmp").iterdir())
        for path in leftovers:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return len(leftovers)

    # ---- low-level helpers -------------------------------------------------------------------
    def _lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def _write_atomic(self, target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _inside(self, path: Path) -> Path:
        resolved = path.resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise BadRequest("Path escapes the data folder", code="InvalidPath")
        return resolved

    @staticmethod
    def _read_json(path: Path, missing: HubError) -> dict:
        """A stored JSON file; ``missing`` when it is gone (a repo deleted while a request was running)."""
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise missing from None

    # ---- blobs --------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise BadRequest(f"Invalid sha256 {sha256!r}", code="InvalidOid")
        return self.root / "blobs" / sha256[:2] / sha256

    def has_blob(self, sha256: str, size: int | None = None) -> bool:
        p = self.blob_path(sha256)
        return p.is_file() and (size is None or p.stat().st_size == size)

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.has_blob(sha):
            self._write_atomic(self.blob_path(sha), data)
        return sha

    def put_stream(self, chunks, expected_sha256: str, expected_size: int | None) -> None:
        """Store streamed content, keeping it only if its sha256 (and size) match."""
        target = self.blob_path(expected_sha256)
        h = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            if h.hexdigest() != expected_sha256 or (expected_size is not None and size != expected_size):
                raise BadRequest(
                    f"Uploaded content does not match oid {expected_sha256} / size "
                    f"{expected_size} (got sha256 {h.hexdigest()}, size {size})",
                    code="BadOid",
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    # ---- repos --------------------------------------------------------------------------------
    def repo_dir(self, repo_type: str, repo_id: str) -> Path:
        if repo_type not in REPO_TYPES:
            raise BadRequest(f"Invalid repo type {repo_type!r}", code="InvalidRepoType")
        ns, name = validate_repo_id(repo_id)
        return self._inside(self.root / "repos" / f"{repo_type}s" / ns / name)

    def exists(self, repo_type: str, repo_id: str) -> bool:
        return (self.repo_dir(repo_type, repo_id) / "refs.json").is_file()

    def require(self, repo_type: str, repo_id: str) -> Path:
        d = self.repo_dir(repo_type, repo_id)
        if not (d / "refs.json").is_file():
            raise repo_not_found(repo_type, repo_id)
        return d

    def meta(self, repo_type: str, repo_id: str) -> dict:
        d = self.require(repo_type, repo_id)
        return self._read_json(d / "meta.json", repo_not_found(repo_type, repo_id))

    def set_private(self, repo_type: str, repo_id: str, private: bool) -> None:
        d = self.require(repo_type, repo_id)
        with self._lock(str(d)):
            meta = self._read_json(d / "meta.json", repo_not_found(repo_type, repo_id))
            meta["private"] = bool(private)
            self._write_atomic(d / "meta.json", json.dumps(meta).encode())

    def create_repo(self, repo_type: str, repo_id: str, private: bool, author: str) -> bool:
        """Create a repo with an initial commit holding ``.gitattributes``. False if it already exists."""
        d = self.repo_dir(repo_type, repo_id)
        with self._lock(str(d)):
            if (d / "refs.json").is_file():
                return False
            (d / "commits").mkdir(parents=True, exist_ok=True)
            self._write_atomic(
                d / "meta.json", json.dumps({"private": bool(private), "created_at": _now()}).encode()
            )
            data = GITATTRIBUTES.encode()
            entry = FileEntry(".gitattributes", self.put_bytes(data), len(data), git_blob_oid(data), False)
            cid = self._write_commit(d, None, {entry.path: entry}, "initial commit", "", author)
            self._write_atomic(d / "refs.json", json.dumps({"branches": {"main": cid}, "tags": {}}).encode())
            return True

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        d = self.require(repo_type, repo_id)
        with self._lock(str(d)):
            if not (d / "refs.json").is_file():
                raise repo_not_found(repo_type, repo_id)  # deleted by a racing request
            trash = self.root / "tmp" / f"deleted-{secrets.token_hex(8)}"
            os.replace(d, trash)  # atomic disappearance; blobs stay (they may be shared)
            shutil.rmtree(trash, ignore_errors=True)

    # ---- refs and commits ---------------------------------------------------------------------
    def refs(self, repo_type: str, repo_id: str) -> dict:
        d = self.require(repo_type, repo_id)
        return self._read_json(d / "refs.json", repo_not_found(repo_type, repo_id))

    def resolve(self, repo_type: str, repo_id: str, revision: str) -> str:
        d = self.require(repo_type, repo_id)
        refs = self._read_json(d / "refs.json", repo_not_found(repo_type, repo_id))
        # A commit id first: ref names can never look like one, so a branch cannot shadow a commit.
        if _COMMIT_RE.match(revision) and (d / "commits" / f"{revision}.json").is_file():
            return revision
        for prefix, kind in (
            ("refs/heads/", "branches"),
            ("refs/tags/", "tags"),
            ("", "branches"),
            ("", "tags"),
        ):
            name = revision[len(prefix) :] if revision.startswith(prefix) else None
            if name in refs[kind]:
                return refs[kind][name]
        raise RevisionNotFound(f"Invalid rev id: {revision}")

    def commit_object(self, repo_type: str, repo_id: str, commit_id: str) -> dict:
        d = self.require(repo_type, repo_id)
        if not _COMMIT_RE.match(commit_id):
            raise RevisionNotFound(f"Invalid rev id: {commit_id}")
        return self._read_json(
            d / "commits" / f"{commit_id}.json", RevisionNotFound(f"Invalid rev id: {commit_id}")
        )

    def files(self, repo_type: str, repo_id: str, commit_id: str) -> dict[str, FileEntry]:
        obj = self.commit_object(repo_type, repo_id, commit_id)
        return {p: FileEntry(p, **e) for p, e in obj["files"].items()}

    def history(self, repo_type: str, repo_id: str, commit_id: str) -> list[dict]:
        out = []
        cid: str | None = commit_id
        while cid:
            obj = self.commit_object(repo_type, repo_id, cid)
            out.append(obj)
            cid = obj["parent"]
        return out

    def _write_commit(
        self, d: Path, parent: str | None, files: dict[str, FileEntry], title: str, message: str, author: str
    ) -> str:
        body = {
            "parent": parent,
            "title": title,
            "message": message,
            "date": _now(),
            "author": author,
            "files": {p: e.to_json() for p, e in sorted(files.items())},
        }
        # Content, parent, time and a random salt: never reused for different content.
        cid = hashlib.sha1(json.dumps(body, sort_keys=True).encode() + secrets.token_bytes(16)).hexdigest()
        self._write_atomic(d / "commits" / f"{cid}.json", json.dumps({"id": cid, **body}).encode())
        return cid

    def commit(
        self,
        repo_type: str,
        repo_id: str,
        branch: str,
        operations: list[CommitOperation],
        title: str,
        message: str,
        author: str,
        parent_commit: str | None = None,
    ) -> str:
        """Apply ``operations`` to ``branch`` as one new commit and move the branch to it."""
        d = self.require(repo_type, repo_id)
        with self._lock(str(d)):
            # Read under the lock: a repo deleted since ``require`` is a 404, never a half-made commit.
            refs = self._read_json(d / "refs.json", repo_not_found(repo_type, repo_id))
            if branch not in refs["branches"]:
                raise RevisionNotFound(f"Invalid rev id: {branch} (commits go to an existing branch)")
            head = refs["branches"][branch]
            if parent_commit and parent_commit != head:
                raise PreconditionFailed(
                    f"A commit has happened since. Please refresh and try again. "
                    f"(parentCommit {parent_commit} is not the head {head} of {branch})"
                )
            files = self.files(repo_type, repo_id, head)
            for op in operations:
                _apply(files, op, self.has_blob)
            cid = self._write_commit(d, head, files, title, message, author)
            refs["branches"][branch] = cid
            self._write_atomic(d / "refs.json", json.dumps(refs).encode())
            return cid

    def set_ref(self, repo_type: str, repo_id: str, kind: str, name: str, target: str | None) -> None:
        """Create (target set) or delete (target None) a branch or tag."""
        d = self.require(repo_type, repo_id)
        if target is not None:
            validate_ref_name(name)
        with self._lock(str(d)):
            refs = self._read_json(d / "refs.json", repo_not_found(repo_type, repo_id))
            table = refs[kind]
            what = "Branch" if kind == "branches" else "Tag"
            if target is None:
                if name not in table:
                    raise RevisionNotFound(f"{what} {name} not found")
                if kind == "branches" and name == "main":
                    raise Forbidden("The main branch cannot be deleted")
                del table[name]
            else:
                if name in table:
                    raise Conflict(f"{what} {name} already exists")
                table[name] = target
            self._write_atomic(d / "refs.json", json.dumps(refs).encode())


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
