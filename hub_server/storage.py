"""On-disk storage of the local Hub: content-addressed blobs, immutable commits, atomically replaced refs.

    blobs/<sha256[:2]>/<sha256>         file contents
    tmp/                                partial writes, renamed into place when whole (emptied at start-up)
    repos/<type>s/<namespace>/<name>/   lower-cased: repo ids are case-insensitive, as on the Hub
        meta.json                       {"id": as its creator spelled it, "private", "created_at"}
        commits/<id>.json               {"id", "parent", "title", "message", "date", "author"}
        trees/<id>.json                 {path: {"sha256", "size", "git_oid", "lfs"}}: the commit's files
        refs.json                       {"branches": {name: commit id}, "tags": {name: commit id}}

``refs.json`` is replaced only after the blobs, the file table and the commit are on disk, and only commits a ref
reaches are served, so an interrupted write leaves unreferenced files, which the next collection removes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from briskbert.files import file_digest, write_atomic

from . import errors, names
from .errors import BadRequest, HubError, RevisionNotFound, damaged, repo_not_found
from .index import GITATTRIBUTES, FileEntry, RevisionIndex, git_blob_oid
from .names import COMMIT_ID_RE, repo_key

logger = logging.getLogger("hub_server")
UNNAMED_BLOB_S = 3600  # how long an uploaded blob waits for a commit to name it before it can be collected
# A stored blob: its sha256, size and first bytes (for the LFS rule of thumb)
StoredBlob = tuple[str, int, bytes]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def _read_record_file(path: Path) -> tuple[dict, str | None]:
    """``meta.json`` or ``refs.json``, read at start-up: (its content, None), or ({}, what is wrong with it)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}, "missing"
    except ValueError as e:
        return {}, f"not valid JSON ({e})"
    if path.name == "meta.json":
        ok = isinstance(data, dict) and type(data.get("private")) is bool and type(data.get("id", "")) is str
        return (data, None) if ok else ({}, "not an object with a true or false 'private' and a text 'id'")
    tables = [data.get(kind) for kind in ("branches", "tags")] if isinstance(data, dict) else [None]
    ok = all(
        isinstance(t, dict) and all(isinstance(c, str) and COMMIT_ID_RE.fullmatch(c) for c in t.values())
        for t in tables
    )
    return (data, None) if ok else ({}, "not an object with 'branches' and 'tags' naming commit ids")


# ---- commit operations ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AddFile:  # the protocol checked the path and stored the blob when it made the entry
    entry: FileEntry


@dataclass(frozen=True)
class DeleteFile:
    path: str

    def __post_init__(self):
        names.validate_path(self.path)


@dataclass(frozen=True)
class DeleteFolder:
    path: str

    def __post_init__(self):
        object.__setattr__(self, "path", names.validate_path(self.path.strip("/")))


def _apply(files: dict[str, FileEntry], op: AddFile | DeleteFile | DeleteFolder) -> None:
    if isinstance(op, AddFile):
        files[op.entry.path] = op.entry
    elif isinstance(op, DeleteFile):
        if files.pop(op.path, None) is None:
            raise errors.EntryNotFound(f"A file with this name doesn't exist: {op.path}")
    else:
        doomed = [p for p in files if p.startswith(op.path + "/")]
        if not doomed:
            raise errors.EntryNotFound(f"A folder with this name doesn't exist: {op.path}")
        for p in doomed:
            del files[p]


@dataclass(frozen=True)
class RepoRecord:  # what is known about a repo without reading the disk
    repo_id: str  # as its creator spelled it
    private: bool
    created_at: str | None
    damaged: str | None = None  # which file is damaged and why: the repo answers 500

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]


class BlobWriter:
    """Content written to ``tmp/`` and hashed as it arrives, until ``finish`` moves it into the store."""

    def __init__(self, storage: Storage):
        self._storage = storage
        fd, self._tmp = tempfile.mkstemp(dir=storage.root / "tmp")
        self._file = os.fdopen(fd, "wb")
        self._sha256 = hashlib.sha256()
        self.size = 0
        self._sample = bytearray()

    def write(self, data: bytes) -> None:
        self._sha256.update(data)
        self.size += len(data)
        self._sample += data[: 8000 - len(self._sample)]
        self._file.write(data)

    def finish(self, expected_sha256: str | None = None, expected_size: int | None = None) -> StoredBlob:
        with contextlib.closing(self):
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            sha = self._sha256.hexdigest()
            if expected_sha256 not in (None, sha) or expected_size not in (None, self.size):
                raise BadRequest(
                    f"Uploaded content does not match oid {expected_sha256} / size {expected_size} "
                    f"(got sha256 {sha}, size {self.size})",
                    code="BadOid",
                )
            self._storage.keep_blob(sha, self._tmp)
            return sha, self.size, bytes(self._sample)

    def close(self) -> None:
        self._file.close()
        Path(self._tmp).unlink(missing_ok=True)


class Storage:
    """Thread-safe storage for one server process. All writes go through ``tmp/`` and ``os.replace``."""

    def __init__(self, data_dir, max_repo_files: int = 100_000, index_cache_revisions: int = 8):
        """Empties ``tmp/`` of what interrupted writes left: one process at a time (the server's lock file)."""
        self.root = Path(data_dir).resolve()
        shutil.rmtree(self.root / "tmp", ignore_errors=True)
        for sub in ("blobs", "tmp", "repos"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.max_repo_files = max_repo_files
        # The most recently read revisions; built one at a time, so many large ones at once cost one build's memory.
        self.indexes = functools.lru_cache(index_cache_revisions)(self._read_index)
        self._index_lock = threading.Lock()
        self._unnamed: dict[str, float] = {}  # blobs kept for a commit to come, with when they arrived
        self._lock = threading.RLock()  # every write: repos, refs, blob arrivals, collection
        self._repos: dict[tuple[str, str], RepoRecord] = {}
        for repo_type in names.REPO_TYPES:
            for refs in sorted((self.root / "repos" / f"{repo_type}s").glob("*/*/refs.json")):
                record = self._load_repo(repo_type, refs.parent)
                if record is not None:
                    self._repos[(repo_type, repo_key(record.repo_id))] = record

    def _load_repo(self, repo_type: str, folder: Path) -> RepoRecord | None:
        """The repo in ``folder``. A damaged ``meta.json`` or ``refs.json`` is logged in one line naming it, and
        the repo is served as damaged (as a private one when its ``meta.json`` cannot say it is public)."""
        meta, bad_meta = _read_record_file(folder / "meta.json")
        bad_refs = _read_record_file(folder / "refs.json")[1]
        repo_id = meta.get("id") or f"{folder.parent.name}/{folder.name}"
        owner, _, repo_name = repo_id.partition("/")
        valid = names.is_repo_name(owner) and names.is_repo_name(repo_name)
        if not (valid and folder == self._folder_of(repo_type, repo_id)):  # not a folder of an older layout
            logger.warning("%s does not hold a repo of this layout (%s): not served", folder, repo_id)
            return None
        problems = {name: why for name, why in (("meta.json", bad_meta), ("refs.json", bad_refs)) if why}
        for name, why in problems.items():
            logger.error("%s is damaged (%s): %s answers 500 StorageDamaged", folder / name, why, repo_id)
        if problems:
            what = "; ".join(f"{name}: {why}" for name, why in problems.items())
            return RepoRecord(repo_id, meta.get("private", True), None, what)
        return RepoRecord(repo_id, meta["private"], meta.get("created_at"))

    def _write_atomic(self, target: Path, data: bytes) -> None:
        write_atomic(target, data, fsync=True, temp_dir=self.root / "tmp")

    def _read_json(self, path: Path, missing: HubError):
        """A stored JSON file; ``missing`` when it is gone (a repo deleted while a request was running)."""
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            raise missing from None
        except ValueError as e:
            raise self._damaged(path, f"not valid JSON: {e}") from None

    def _damaged(self, path: Path, why: str) -> HubError:
        logger.error("%s is damaged: %s", path, why)
        _, ns, name, *inside = path.relative_to(self.root / "repos").parts
        return damaged(f"{ns}/{name}", f"{'/'.join(inside)}: {why}")

    # ---- blobs --------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if not (isinstance(sha256, str) and names.SHA256_RE.fullmatch(sha256)):  # a client's oid, or a tree's
            raise BadRequest(f"Invalid sha256 {sha256!r}", code="InvalidOid")
        return self.root / "blobs" / sha256[:2] / sha256

    def has_blob(self, sha256: str, size: int | None = None) -> bool:
        path = self.blob_path(sha256)
        return path.is_file() and size in (None, path.stat().st_size)

    def put_stream(self, chunks, expected_sha256: str, expected_size: int | None) -> StoredBlob:
        with contextlib.closing(BlobWriter(self)) as writer:
            for chunk in chunks:
                writer.write(chunk)
            return writer.finish(expected_sha256, expected_size)

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.reuse_blob(sha, len(data)):
            self.put_stream([data], sha, len(data))
        return sha

    def keep_blob(self, sha256: str, written: str) -> None:
        """Move the file ``written`` into the store as blob ``sha256``, safe from collection until a commit
        names it (or ``UNNAMED_BLOB_S`` passed)."""
        target = self.blob_path(sha256)
        with self._lock:
            self._unnamed[sha256] = time.monotonic()
            if not target.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(written, target)

    def reuse_blob(self, sha256: str, size: int) -> bool:
        """Whether blob ``sha256`` of ``size`` bytes is stored; if so it is kept as ``keep_blob`` keeps it (the
        client will not upload it again)."""
        with self._lock:
            found = self.has_blob(sha256, size)
            if found:
                self._unnamed[sha256] = time.monotonic()
            return found

    def git_oid(self, sha256: str) -> str:
        with open(self.blob_path(sha256), "rb") as fh:
            header = b"blob %d\0" % os.fstat(fh.fileno()).st_size
            return hashlib.file_digest(fh, lambda: hashlib.sha1(header)).hexdigest()

    def verified_blob(self, entry: FileEntry) -> Path:
        """The blob of ``entry``, its content checked against the id its commit gives it: the sha256 of an LFS
        file, the git blob sha1 otherwise."""
        path = self.blob_path(entry.sha256)
        size = path.stat().st_size if path.is_file() else None
        if size != entry.size:
            why = "missing" if size is None else f"{size} bytes instead of {entry.size}"
        elif entry.lfs:
            why = file_digest(path) != entry.sha256 and "its sha256 changed"
        else:
            why = self.git_oid(entry.sha256) != entry.git_oid and "its git blob sha1 changed"
        if why:
            logger.error("%s is damaged: %s, the content of %s", path, why, entry.path)
            raise errors.StorageDamaged(
                f"The stored content of {entry.path} is damaged ({why}); the Hub's log names the file. Restore "
                "it from a backup, or upload the file again."
            )
        return path

    # ---- repos --------------------------------------------------------------------------------
    def _folder_of(self, repo_type: str, repo_id: str) -> Path:
        # Ids are checked where they arrive (a request, or a meta.json at start-up): the path stays inside root.
        # They are case-insensitive, as on the Hub: me/Pub and me/pub are one repo.
        return self.root / "repos" / f"{repo_type}s" / repo_key(repo_id)

    def lookup(self, repo_type: str, repo_id: str) -> RepoRecord | None:
        """The repo, whatever the case of ``repo_id``, or None; from memory, never the disk."""
        return self._repos.get((repo_type, repo_key(repo_id)))

    def require(self, repo_type: str, repo_id: str) -> Path:
        """The folder of a repo that exists and is not damaged."""
        record = self.lookup(repo_type, repo_id)
        if record is None:
            raise repo_not_found(repo_type, repo_id)  # the same 404 for a missing and a private repo
        if record.damaged:
            raise damaged(record.repo_id, record.damaged)
        return self._folder_of(repo_type, repo_id)

    def create_repo(self, repo_type: str, repo_id: str, private: bool, author: str) -> RepoRecord | None:
        """Create a repo whose initial commit holds ``.gitattributes``; None if it exists (in any case)."""
        d = self._folder_of(repo_type, repo_id)
        with self._lock:
            if self.lookup(repo_type, repo_id) is not None:
                return None
            shutil.rmtree(d, ignore_errors=True)  # what a create interrupted before its refs.json left
            record = RepoRecord(repo_id, bool(private), _now())
            meta = {"id": repo_id, "private": record.private, "created_at": record.created_at}
            data = GITATTRIBUTES.encode()
            entry = FileEntry(".gitattributes", self.put_bytes(data), len(data), git_blob_oid(data), False)
            try:  # a failure (a full disk) leaves no folder behind
                self._write_atomic(d / "meta.json", json.dumps(meta).encode())
                self._write_commit(d, None, {entry.path: entry}, "initial commit", "", author)
            except BaseException:
                shutil.rmtree(d, ignore_errors=True)
                raise
            self._repos[(repo_type, repo_key(repo_id))] = record
            return record

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        """Delete a repo, a damaged one too (the way to be rid of it), and the blobs only it named."""
        d = self._folder_of(repo_type, repo_id)
        with self._lock:
            if self._repos.pop((repo_type, repo_key(repo_id)), None) is None:
                raise repo_not_found(repo_type, repo_id)
            trash = self.root / "tmp" / f"deleted-{secrets.token_hex(8)}"
            os.replace(d, trash)  # gone at once; then removed at leisure
            shutil.rmtree(trash, ignore_errors=True)
            self._collect_blobs()

    def refs(self, repo_type: str, repo_id: str) -> dict:
        # Read from the disk: a repo deleted since it was looked up is a 404, never a half-made commit.
        return self._read_json(
            self.require(repo_type, repo_id) / "refs.json", repo_not_found(repo_type, repo_id)
        )

    def resolve(self, repo_type: str, repo_id: str, revision: str) -> str:
        refs = self.refs(repo_type, repo_id)
        # A commit id first (ref names never look like one), and only one a ref reaches: a deleted branch's
        # commits are gone at once, even before their files are.
        if COMMIT_ID_RE.fullmatch(revision) and revision in self._reachable(
            self._folder_of(repo_type, repo_id), refs
        ):
            return revision
        for kind, prefix in (("branches", "refs/heads/"), ("tags", "refs/tags/")):
            name = revision.removeprefix(prefix)
            if name in refs[kind]:
                return refs[kind][name]
        raise RevisionNotFound(f"Invalid rev id: {revision}")

    def _commit(self, d: Path, commit_id: str, folder: str = "commits") -> dict:
        """A commit's metadata or, with ``folder="trees"``, its file table."""
        missing = RevisionNotFound(f"Invalid rev id: {commit_id}")
        if not COMMIT_ID_RE.fullmatch(commit_id):
            raise missing
        return self._read_json(d / folder / f"{commit_id}.json", missing)

    def commit_object(self, repo_type: str, repo_id: str, commit_id: str) -> dict:
        return self._commit(self.require(repo_type, repo_id), commit_id)

    def _read_index(self, d: Path, commit_id: str) -> RevisionIndex:
        commit, files = self._commit(d, commit_id), self._commit(d, commit_id, "trees")
        try:
            return RevisionIndex(commit, files)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            tree = d / "trees" / f"{commit_id}.json"
            raise self._damaged(tree, f"not a file table ({type(e).__name__}: {e})") from None

    def index(self, repo_type: str, repo_id: str, commit_id: str) -> RevisionIndex:
        d = self.require(repo_type, repo_id)
        with self._index_lock:
            return self.indexes(d, commit_id)

    def files(self, repo_type: str, repo_id: str, commit_id: str) -> dict[str, FileEntry]:
        index = self.index(repo_type, repo_id, commit_id)
        return dict(zip(index.paths, index.entries, strict=True))

    def _write_commit(self, d: Path, parent, files: dict, title, message, author, refs=None, branch="main"):
        """A new commit, then ``refs`` with ``branch`` moved to it; a failure (a full disk) removes both."""
        refs = refs or {"branches": {}, "tags": {}}
        meta = {"parent": parent, "title": title, "message": message, "date": _now(), "author": author}
        tree = json.dumps({p: e.to_json() for p, e in sorted(files.items())}).encode()
        cid = secrets.token_hex(20)  # random: never reused, whatever the content
        written = (d / "trees" / f"{cid}.json", d / "commits" / f"{cid}.json")
        moved = {**refs, "branches": {**refs["branches"], branch: cid}}
        try:
            self._write_atomic(written[0], tree)
            self._write_atomic(written[1], json.dumps({"id": cid, **meta}).encode())
            self._write_atomic(d / "refs.json", json.dumps(moved).encode())
        except BaseException:  # no ref named the commit, so no reader saw it
            for path in written:
                path.unlink(missing_ok=True)
            raise
        return cid

    def commit(
        self, repo_type: str, repo_id: str, branch: str, operations: list, title, message, author, parent=None
    ) -> str:
        """Apply ``operations`` to ``branch`` as one new commit; ``parent``, when given, must be its head."""
        d = self.require(repo_type, repo_id)
        with self._lock:
            refs = self.refs(repo_type, repo_id)
            if branch not in refs["branches"]:
                raise RevisionNotFound(f"Invalid rev id: {branch} (commits go to an existing branch)")
            head = refs["branches"][branch]
            if parent and parent != head:
                raise errors.PreconditionFailed(
                    f"A commit has happened since. Please refresh and try again. "
                    f"(parentCommit {parent} is not the head {head} of {branch})"
                )
            files = self.files(repo_type, repo_id, head)
            for op in operations:
                _apply(files, op)
            if len(files) > self.max_repo_files:
                raise errors.PayloadTooLarge(
                    f"This commit would leave {len(files)} files in {repo_id}; a revision holds at most "
                    f"{self.max_repo_files}",
                    code="TooManyFiles",
                )
            cid = self._write_commit(d, head, files, title, message, author, refs, branch)
            for op in operations:
                if isinstance(op, AddFile):
                    self._unnamed.pop(op.entry.sha256, None)
            return cid

    def set_ref(self, repo_type: str, repo_id: str, kind: str, name: str, target: str | None) -> None:
        """Create (``target`` a commit id) or delete (None) a branch or tag. Branches and tags share one
        namespace: a branch named like a tag would shadow it for ``revision=``."""
        d = self.require(repo_type, repo_id)
        if target is not None:
            names.validate_ref_name(name)
        with self._lock:
            refs = self.refs(repo_type, repo_id)
            table, other = refs[kind], "tags" if kind == "branches" else "branches"
            what = {"branches": "branch", "tags": "tag"}
            if target is None:
                if name not in table:
                    raise RevisionNotFound(f"{what[kind].capitalize()} {name} not found")
                if kind == "branches" and name == "main":
                    raise errors.Forbidden("The main branch cannot be deleted")
                del table[name]
            elif name in table:
                raise errors.Conflict(f"{what[kind].capitalize()} {name} already exists")
            elif name in refs[other]:
                raise errors.Conflict(
                    f"A {what[other]} named {name} already exists; branches and tags share one namespace",
                    code="RefConflict",
                )
            else:
                table[name] = target
            self._write_atomic(d / "refs.json", json.dumps(refs).encode())
            if target is None:
                # Remove the commits no ref reaches now, their file tables, then the blobs nothing reachable
                # names: each step removes only what nothing that stays refers to, so a crash leaves a whole
                # store, and the next collection removes what it left.
                keep = self._reachable(d, refs)
                for path in [*(d / "commits").glob("*.json"), *(d / "trees").glob("*.json")]:
                    if path.stem not in keep:
                        path.unlink(missing_ok=True)
                self._collect_blobs()

    # ---- collection: what no ref reaches is removed ------------------------------------------------------
    def _reachable(self, d: Path, refs: dict) -> set[str]:
        """The commits the refs of the repo in ``d`` reach."""
        seen: set[str] = set()
        todo = [cid for kind in ("branches", "tags") for cid in refs[kind].values()]
        while todo:
            cid = todo.pop()
            if cid not in seen:
                seen.add(cid)
                todo += [parent] if (parent := self._commit(d, cid).get("parent")) else []
        return seen

    def _collect_blobs(self) -> None:
        """Remove the blobs no reachable commit of any repo names, but those kept for a commit to come. A
        damaged repo keeps every blob."""
        now = time.monotonic()
        self._unnamed = {sha: t for sha, t in self._unnamed.items() if now - t < UNNAMED_BLOB_S}
        named = set(self._unnamed)
        try:
            for refs_file in (self.root / "repos").glob("*/*/*/refs.json"):
                d = refs_file.parent
                for cid in self._reachable(d, self._read_json(refs_file, BadRequest("gone"))):
                    named.update(entry["sha256"] for entry in self._commit(d, cid, "trees").values())
        except (HubError, OSError, KeyError, TypeError, AttributeError) as e:
            logger.warning("blobs not collected: %s", e)
            return
        for path in (self.root / "blobs").glob("*/*"):
            if path.name not in named:
                path.unlink(missing_ok=True)
