"""Files and folders that appear whole or not at all: written as a hidden ``.NAME.partial`` beside the target,
then renamed into place (a kill leaves only the partial, which the next write replaces)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from briskbert.errors import UserError

PARTIAL_SUFFIX = ".partial"


def partial_path(path: str | os.PathLike) -> Path:
    """Where ``path`` is written before it is renamed into place: ``.NAME.partial`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}{PARTIAL_SUFFIX}")


@contextmanager
def atomic_file(
    path: str | os.PathLike, *, fsync: bool = False, temp_dir: str | os.PathLike | None = None
) -> Iterator[Path]:
    """Yields a temporary path (``.NAME.partial``, or a unique name in a shared ``temp_dir``) that replaces
    ``path`` in one rename when the body returns (synced first with ``fsync``), and is removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if temp_dir is None:
        partial = partial_path(path)
    else:
        handle, name = tempfile.mkstemp(dir=temp_dir)
        os.close(handle)
        partial = Path(name)
    try:
        yield partial
        honour_umask(partial)
        if fsync:
            with open(partial, "rb+") as written:
                os.fsync(written.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, **options) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through :func:`atomic_file` (``options``: its own)."""
    with atomic_file(path, **options) as partial:
        partial.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def honour_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (and a folder's contents) the mode ``open()``/``mkdir`` would, not a temporary file's 0o600."""
    mask = os.umask(0)
    os.umask(mask)
    path = Path(path)
    for entry in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not entry.is_symlink():
            executable = entry.is_dir() or entry.stat().st_mode & 0o100
            entry.chmod((0o777 if executable else 0o666) & ~mask)


def replace_folder(staged: str | os.PathLike, folder: str | os.PathLike) -> None:
    """Rename a completely written ``staged`` folder to ``folder``; an old one is first renamed aside to a partial
    name (what a clean-up of partial folders removes after a kill) and then deleted."""
    staged, folder = Path(staged), Path(folder)
    honour_umask(staged)
    retired = folder.with_name(f".{folder.name}.old{PARTIAL_SUFFIX}")
    if folder.exists():
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(folder, retired)
    os.replace(staged, folder)
    shutil.rmtree(retired, ignore_errors=True)
    fsync_folder(folder.parent)  # the rename itself survives a power loss


@contextmanager
def staged_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Yields an empty ``.NAME.partial`` folder that replaces ``folder`` when the body returns."""
    folder = Path(folder)
    staged = partial_path(folder)
    shutil.rmtree(staged, ignore_errors=True)  # what a killed run left
    staged.mkdir(parents=True)
    try:
        yield staged
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    replace_folder(staged, folder)


MANIFEST_FILE = "manifest.json"


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make a folder's new names and renames durable across a power loss."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def file_digest(path: str | os.PathLike) -> str:
    """The sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as opened:
        while chunk := opened.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str | os.PathLike) -> None:
    """Sync every file under ``folder``, then write ``manifest.json`` (each file's size and sha256) last."""
    folder = Path(folder)
    entries = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE):
        with open(path, "rb+") as written:
            os.fsync(written.fileno())
        entries[path.relative_to(folder).as_posix()] = {
            "size": path.stat().st_size,
            "sha256": file_digest(path),
        }
    write_atomic(folder / MANIFEST_FILE, json.dumps({"files": entries}, indent=1), fsync=True)
    for sub in sorted({p.parent for p in folder.rglob("*") if p.is_file()}, key=lambda p: -len(p.parts)):
        fsync_folder(sub)


def manifest_problem(folder: str | os.PathLike) -> str | None:
    """What is wrong with ``folder`` against its ``manifest.json``, in one line; None if it matches or is absent."""
    folder = Path(folder)
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        listed = {name: (int(entry["size"]), str(entry["sha256"])) for name, entry in entries.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{manifest} is not a readable manifest"
    for name, (size, sha256) in listed.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing (listed in {MANIFEST_FILE})"
        if path.stat().st_size != size:
            return f"{path} has {path.stat().st_size:,} bytes, {size:,} when it was written (truncated or replaced)"
        if file_digest(path) != sha256:
            return f"{path} does not match the sha256 it was written with (its bytes changed since)"
    return None


LOCK_FILE = ".briskbert.lock"


def free_space(path: str | os.PathLike) -> int:
    """Bytes free on the file system that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) is "no space left", as an errno or in words."""
    while error is not None:
        said = "No space left on device" in str(error) or "StorageFull" in str(error)
        if said or getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__cause__ or error.__context__
    return False


@contextmanager
def space_for(target: str | os.PathLike, needed: int) -> Iterator[None]:
    """The body writes the folder ``target`` through its ``.partial`` (about ``needed`` bytes): when it raises, the
    partial goes, and a lack of space (said, or less than ``needed`` left) is one line."""
    target = Path(target)
    try:
        yield
    except Exception as error:
        shutil.rmtree(partial_path(target), ignore_errors=True)
        if out_of_space(error) or free_space(target) < needed:
            raise UserError(
                f"no space left on the device for {target}: it needs about {needed / 2**20:,.1f} MiB and "
                f"{free_space(target) / 2**20:,.1f} MiB is free; free some space or write elsewhere, then run again"
            ) from error
        raise


def output_folder_problem(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot be a job's output folder (a writable folder, or one that can be made), or None."""
    folder = Path(folder)
    for path in (folder, *folder.parents):  # the folder, or the nearest one above it that exists
        subject = str(folder) if path == folder else f"{folder} is inside {path}, which"
        if path.is_symlink() and not path.exists():
            target = os.readlink(path)
            return f"{subject} is a symbolic link to the missing {target}; create {target} or pass another folder"
        if not path.exists():
            continue
        if not path.is_dir():
            return f"{subject} is a file, not a folder; pass a folder (a missing one is made)"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{subject} is not writable by this user; pass a folder you can write to"
        return None
    return None


@contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[str | None]:
    """Hold ``folder``'s ``flock`` for the body (one writer per folder); yields what a dead writer's leftover
    lock file said, or None. A release deletes the file, and the folder when the lock made it and it is empty."""
    folder = Path(folder)
    problem = output_folder_problem(folder)
    if problem:
        raise UserError(problem)
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    handle = _locked_handle(folder, path)
    try:
        leftover = os.pread(handle, 4096, 0).decode("utf-8", "replace").strip() or None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
        try:
            yield leftover
        finally:
            path.unlink(missing_ok=True)  # while still held: whoever opened it meanwhile sees it is gone
            if made and not any(folder.iterdir()):
                folder.rmdir()
    finally:
        os.close(handle)  # releases the lock


def _locked_handle(folder: Path, path: Path) -> int:
    """An open descriptor of ``path`` holding its ``flock``, on the file the path names now."""
    import fcntl

    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 4096, 0).decode("utf-8", "replace").strip()
            os.close(handle)
            raise UserError(
                f"{folder} is in use by another run ({holder or 'a process starting up'}); wait for it to finish "
                "or choose another folder"
            ) from None
        try:  # a releasing holder may have deleted the file in between
            if os.stat(path).st_ino == os.fstat(handle).st_ino:
                return handle
        except FileNotFoundError:
            pass
        os.close(handle)
