"""Files and folders that appear whole or not at all: written under a temporary name, then renamed into place.

A rename within one file system is atomic, so a reader (or the next run, after a kill) finds the old content or
the new, never half of it. What a kill leaves behind is a hidden ``.NAME.partial`` file or folder beside the
target, which the next write of the same target replaces.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def partial_path(path: str | os.PathLike) -> Path:
    """Where ``path`` is written before it is renamed into place: ``.NAME.partial`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}{PARTIAL_SUFFIX}")


@contextmanager
def atomic_file(
    path: str | os.PathLike, *, fsync: bool = False, temp_dir: str | os.PathLike | None = None
) -> Iterator[Path]:
    """Yields a temporary path to write ``path``'s new content to; when the body returns it replaces ``path``
    in one rename (after ``fsync``: the content is on disk before the name points at it), and when it raises
    it is removed. ``temp_dir``: a folder on the same file system shared by many writers, where each write
    gets a unique name; otherwise the temporary file is ``.NAME.partial`` beside ``path``."""
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
        if fsync:
            with open(partial, "rb+") as written:
                os.fsync(written.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomic(
    path: str | os.PathLike,
    data: str | bytes,
    *,
    fsync: bool = False,
    temp_dir: str | os.PathLike | None = None,
) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through :func:`atomic_file`."""
    with atomic_file(path, fsync=fsync, temp_dir=temp_dir) as partial:
        partial.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def replace_folder(staged: str | os.PathLike, folder: str | os.PathLike) -> None:
    """Rename a completely written ``staged`` folder to ``folder``, replacing any old one: the old folder is
    first renamed aside to ``.NAME.old.partial`` (a hidden partial name, so a kill between the two renames
    leaves only what a clean-up of partial folders removes) and deleted once the new one is in place."""
    staged, folder = Path(staged), Path(folder)
    if folder.exists():
        retired = folder.with_name(f".{folder.name}.old{PARTIAL_SUFFIX}")
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(folder, retired)
        os.replace(staged, folder)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staged, folder)


@contextmanager
def staged_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Yields an empty ``.NAME.partial`` folder beside ``folder``, which replaces ``folder`` whole
    (:func:`replace_folder`) once the body returns, and is removed if it raises."""
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
