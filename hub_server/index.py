"""The files of one commit, indexed once and shared by every read of it: sorted paths and their entries, so
lookups and listing pages are bisections."""

from __future__ import annotations

import json
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from huggingface_hub.utils.sha import git_hash as git_blob_oid  # git's blob sha1 of some content

# Files stored as LFS pointers on the real Hub (its default .gitattributes), plus anything large or binary.
LFS_SUFFIXES = tuple(
    ".7z .arrow .bin .bz2 .ckpt .ftz .gz .h5 .joblib .mlmodel .model .msgpack .npy .npz .onnx .ot .parquet .pb "
    ".pickle .pkl .pt .pth .rar .safetensors .tar .tflite .tgz .wasm .xz .zip .zst".split()
)

GITATTRIBUTES = (
    "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES)
    + "*tfevents* filter=lfs diff=lfs merge=lfs -text\n"
)


def looks_like_lfs(path: str, size: int, sample: bytes) -> bool:
    """The Hub's rule of thumb: LFS suffixes, files over 10 MB, and binary content go to LFS."""
    return path.lower().endswith(LFS_SUFFIXES) or size > 10 * 1024 * 1024 or b"\0" in sample[:8000]


@dataclass(slots=True)
class FileEntry:
    path: str
    sha256: str
    size: int
    git_oid: str  # git blob sha1 of the content
    lfs: bool

    def tree_oid(self) -> str:
        """The git oid the tree shows: of the pointer for LFS files, of the content otherwise."""
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
        return git_blob_oid(pointer.encode()) if self.lfs else self.git_oid

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "size": self.size, "git_oid": self.git_oid, "lfs": self.lfs}


class RevisionIndex:
    """One commit: its metadata (``commit``, without the file table) and its files."""

    def __init__(self, commit: dict, files: dict[str, dict]):
        self.commit = commit
        self.paths = sorted(files)
        self.entries = [FileEntry(path, **files[path]) for path in self.paths]
        self._lock = threading.Lock()
        self._siblings: dict[bool, bytes] = {}

    def get(self, path: str) -> FileEntry | None:
        i = bisect_left(self.paths, path)
        return self.entries[i] if i < len(self.paths) and self.paths[i] == path else None

    def has_folder(self, folder: str) -> bool:
        i = bisect_left(self.paths, folder + "/")
        return i < len(self.paths) and self.paths[i].startswith(folder + "/")

    def page(
        self, folder: str, recursive: bool, after: str | None, limit: int
    ) -> tuple[list[FileEntry | str], str | None]:
        """Up to about ``limit`` files (their entries) and folders (their paths) of ``folder`` (``""``: the root)
        in path order, starting after the path ``after``; and the ``after`` of the next page, or None at the end.
        A folder is listed just before the first file inside it, which needs no state across pages: it is new
        when the file before is not in it."""
        prefix = f"{folder}/" if folder else ""
        start = bisect_left(self.paths, prefix)
        # '0' sorts right after '/': the first path past the folder's
        end = bisect_left(self.paths, folder + "0") if folder else len(self.paths)
        i = max(start, bisect_right(self.paths, after)) if after is not None else start
        out: list[FileEntry | str] = []
        while i < end and len(out) < limit:
            parts = self.paths[i][len(prefix) :].split("/")
            before = self.paths[i - 1] if i > start else ""
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                sub = prefix + "/".join(parts[:depth])
                if not before.startswith(sub + "/"):
                    out.append(sub)
            if recursive or len(parts) == 1:
                out.append(self.entries[i])
                i += 1
            else:  # a non-recursive listing skips the rest of the sub-folder at once
                i = bisect_left(self.paths, prefix + parts[0] + "0", i)
        return out, (self.paths[i - 1] if i < end else None)

    def siblings_json(self, with_blobs: bool) -> bytes:
        """The ``siblings`` list of ``repo_info`` as JSON, built on first use."""
        with self._lock:
            if with_blobs not in self._siblings:
                siblings = [_sibling(e, with_blobs) for e in self.entries]
                self._siblings[with_blobs] = json.dumps(siblings).encode()
            return self._siblings[with_blobs]


def _sibling(entry: FileEntry, with_blobs: bool) -> dict:
    sibling: dict = {"rfilename": entry.path}
    if with_blobs:
        sibling.update({"size": entry.size, "blobId": entry.tree_oid()})
        if entry.lfs:
            sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256, "pointerSize": 134}
    return sibling
