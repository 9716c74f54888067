"""The Hub storage layer (``hub_server/storage.py``) called directly, for what the HTTP tests do not reach:
branch and tag names checked when they are created (not when deleted), messages that say "Branch" or "Tag",
the main branch that cannot be deleted while others can, commit operations that keep the path they checked,
and which files go to LFS.
"""

import dataclasses
import hashlib

import pytest

from briskbert.hub_server.errors import BadRequest, Forbidden, RevisionNotFound
from briskbert.hub_server.storage import DeleteFile, DeleteFolder, Storage, looks_like_lfs


@pytest.fixture
def storage(tmp_path):
    store = Storage(tmp_path / "hub")
    store.create_repo("model", "me/repo", private=False, author="me")
    return store


def test_new_branch_and_tag_names_are_checked_and_deleting_an_unknown_one_says_which(storage):
    main = storage.resolve("model", "me/repo", "main")
    for kind in ("branches", "tags"):
        with pytest.raises(BadRequest, match="Invalid branch or tag name"):
            storage.set_ref("model", "me/repo", kind, "two..dots", main)
    with pytest.raises(RevisionNotFound, match="^Tag v9 not found"):
        storage.set_ref("model", "me/repo", "tags", "v9", None)
    with pytest.raises(RevisionNotFound, match="^Branch two..dots not found"):  # a lookup, not a new name
        storage.set_ref("model", "me/repo", "branches", "two..dots", None)


def test_main_cannot_be_deleted_and_any_other_branch_can(storage):
    main = storage.resolve("model", "me/repo", "main")
    for branch in ("dev", "zeta"):  # names sorting before and after "main"
        storage.set_ref("model", "me/repo", "branches", branch, main)
        storage.set_ref("model", "me/repo", "branches", branch, None)
    assert set(storage.refs("model", "me/repo")["branches"]) == {"main"}
    with pytest.raises(Forbidden, match="main branch cannot be deleted"):
        storage.set_ref("model", "me/repo", "branches", "main", None)


def test_commit_operations_keep_the_path_they_checked():
    for operation in (DeleteFile("weights/model.bin"), DeleteFolder("/weights/")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            operation.path = "../outside"
    assert DeleteFolder("/weights/").path == "weights"


def test_files_go_to_lfs_by_suffix_size_above_10_mib_or_binary_content():
    mib = 1024 * 1024
    assert looks_like_lfs("model.safetensors", 10, b"{}")  # by suffix, however small
    assert not looks_like_lfs("notes.txt", 10 * mib, b"text")  # exactly 10 MiB of text stays in git
    assert looks_like_lfs("notes.txt", 10 * mib + 1, b"text")
    assert looks_like_lfs("notes.txt", 10, b"ab\0cd")  # binary


def test_records_are_frozen(storage):
    record = storage.meta("model", "me/repo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.private = True
    blob = storage.put_stream([b"abc"], expected_sha256=hashlib.sha256(b"abc").hexdigest(), expected_size=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        blob.size = 4
