"""The files of one commit, indexed once and shared by every read of it: sorted paths plus a packed 61-byte
record per file, so lookups and listing pages are bisections. ``IndexCache`` keeps recent ones within a budget.
"""

from __future__ import annotations

import json
import struct
import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from huggingface_hub.utils.sha import git_hash as git_blob_oid  # git's blob sha1 of some content

_RECORD = struct.Struct("<32s20sQ?")  # sha256, git blob sha1, size, stored as LFS
_PER_FILE_COST = 160  # bytes: the record, the path's str object, list slots


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


# Files stored as LFS pointers on the real Hub (its default .gitattributes), plus anything large or binary.
LFS_SUFFIXES = tuple(
    ".7z .arrow .bin .bz2 .ckpt .ftz .gz .h5 .joblib .mlmodel .model .msgpack .npy .npz .onnx .ot .parquet .pb "
    ".pickle .pkl .pt .pth .rar .safetensors .tar .tflite .tgz .wasm .xz .zip .zst".split()
)
LFS_MIN_SIZE = 10 * 1024 * 1024

GITATTRIBUTES = (
    "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES)
    + "*tfevents* filter=lfs diff=lfs merge=lfs -text\n"
)


def looks_like_lfs(path: str, size: int, sample: bytes) -> bool:
    """The Hub's rule of thumb: LFS suffixes, files over 10 MB, and binary content go to LFS."""
    return path.lower().endswith(LFS_SUFFIXES) or size > LFS_MIN_SIZE or b"\0" in sample[:8000]


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


@dataclass(frozen=True)
class Folder:
    path: str


def _after(folder: str) -> str:
    """The smallest string after every path inside ``folder`` ('0' follows '/')."""
    return folder + "0"


class RevisionIndex:
    """One commit: its metadata (``commit``, without the file table) and its files."""

    def __init__(self, commit: dict, files: dict[str, dict]):
        self.commit = {k: v for k, v in commit.items() if k != "files"}
        self.paths = sorted(files)
        self._records = b"".join(
            _RECORD.pack(
                bytes.fromhex(e["sha256"]), bytes.fromhex(e["git_oid"]), int(e["size"]), bool(e["lfs"])
            )
            for e in (files[p] for p in self.paths)
        )
        self._paths_cost = sum(len(p) for p in self.paths) + _PER_FILE_COST * len(self.paths)
        self._lock = threading.Lock()
        self._siblings: dict[bool, bytes] = {}
        self._card: dict | None = None
        self.card_cost = 0

    @property
    def cost(self) -> int:
        """Bytes this index holds, roughly: what the cache budget counts."""
        return self._paths_cost + sum(len(s) for s in self._siblings.values()) + self.card_cost

    def _entry(self, i: int) -> FileEntry:
        sha256, git_oid, size, lfs = _RECORD.unpack_from(self._records, i * _RECORD.size)
        return FileEntry(self.paths[i], sha256.hex(), size, git_oid.hex(), lfs)

    def get(self, path: str) -> FileEntry | None:
        i = bisect_left(self.paths, path)
        return self._entry(i) if i < len(self.paths) and self.paths[i] == path else None

    def has_folder(self, folder: str) -> bool:
        i = bisect_left(self.paths, folder + "/")
        return i < len(self.paths) and self.paths[i].startswith(folder + "/")

    def entries(self) -> Iterator[FileEntry]:
        return (self._entry(i) for i in range(len(self.paths)))

    def as_dict(self) -> dict[str, FileEntry]:
        return {e.path: e for e in self.entries()}

    # ---- listings ---------------------------------------------------------------------------------
    def page(
        self, folder: str, recursive: bool, after: str | None, limit: int
    ) -> tuple[list[FileEntry | Folder], str | None]:
        """Up to about ``limit`` entries of ``folder`` (``""``: the root) in path order, starting after the
        path ``after``; and the ``after`` of the next page, or None at the end. A folder is listed just before
        the first file inside it, which needs no state across pages: it is new when the file before is not in
        it."""
        prefix = f"{folder}/" if folder else ""
        start = bisect_left(self.paths, prefix)
        end = bisect_left(self.paths, _after(folder)) if folder else len(self.paths)
        i = max(start, bisect_right(self.paths, after)) if after is not None else start
        out: list[FileEntry | Folder] = []
        while i < end and len(out) < limit:
            parts = self.paths[i][len(prefix) :].split("/")
            before = self.paths[i - 1] if i > start else ""
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                sub = prefix + "/".join(parts[:depth])
                if not before.startswith(sub + "/"):
                    out.append(Folder(sub))
            if recursive or len(parts) == 1:
                out.append(self._entry(i))
                i += 1
            else:  # a non-recursive listing skips the rest of the sub-folder at once
                i = bisect_left(self.paths, _after(prefix + parts[0]), i)
        return out, (self.paths[i - 1] if i < end else None)

    # ---- computed once per revision -------------------------------------------------------------
    def siblings_json(self, with_blobs: bool) -> bytes:
        """The ``siblings`` list of ``repo_info`` as JSON, built on first use."""
        with self._lock:
            if with_blobs not in self._siblings:
                self._siblings[with_blobs] = json.dumps(
                    [_sibling(e, with_blobs) for e in self.entries()]
                ).encode()
            return self._siblings[with_blobs]

    def card(self, load: Callable[[FileEntry], dict]) -> dict:
        """The README's front matter (``{}`` without one), read by ``load`` on first use."""
        with self._lock:
            if self._card is None:
                readme = self.get("README.md")
                self._card = load(readme) if readme is not None else {}
                self.card_cost = len(json.dumps(self._card, default=str)) * 4
            return self._card


def _sibling(entry: FileEntry, with_blobs: bool) -> dict:
    sibling: dict = {"rfilename": entry.path}
    if with_blobs:
        sibling.update({"size": entry.size, "blobId": entry.tree_oid()})
        if entry.lfs:
            sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256, "pointerSize": 134}
    return sibling


class IndexCache:
    """Recently used ``RevisionIndex``es within ``budget`` bytes. Builds run one at a time, and a request for an
    index being built waits for that build: a build holds a whole file table in memory (and is CPU work the GIL
    serialises anyway), so requests for many large revisions at once cost one build's memory."""

    def __init__(self, budget: int):
        self.budget = budget
        self._items: OrderedDict[tuple, RevisionIndex] = OrderedDict()
        self._lock = threading.Lock()  # the items
        self._one_build = threading.Lock()
        self.builds = 0  # how many indexes were built (tests read it)

    def get(self, key: tuple, build: Callable[[], RevisionIndex]) -> RevisionIndex:
        with self._lock:
            index = self._items.get(key)
            if index is not None:
                self._items.move_to_end(key)
                self._evict(keep=key)  # its sibling list and card may have grown since
                return index
        with self._one_build:
            with self._lock:
                if key in self._items:  # built while this request waited
                    return self._items[key]
            index = build()
            with self._lock:
                self.builds += 1
                self._items[key] = index
                self._evict(keep=key)
            return index

    def drop(self, prefix: tuple) -> None:
        """Forget every index whose key starts with ``prefix`` (a deleted repo)."""
        with self._lock:
            for key in [k for k in self._items if k[: len(prefix)] == prefix]:
                del self._items[key]

    def _evict(self, keep: tuple) -> None:
        total = sum(index.cost for index in self._items.values())
        for key in list(self._items):
            if total <= self.budget:
                break
            if key != keep:
                total -= self._items.pop(key).cost
        if total > self.budget and keep in self._items:
            del self._items[keep]  # larger than the whole budget: served, but not kept
