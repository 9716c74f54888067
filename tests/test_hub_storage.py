"""The Hub storage layer called directly, for what the HTTP tests do not reach, and a full disk through the real
client."""

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from briskbert.hub_server import storage as storage_module
from briskbert.hub_server.errors import Forbidden, RevisionNotFound, StorageDamaged
from briskbert.hub_server.index import RevisionIndex, git_blob_oid, looks_like_lfs
from briskbert.hub_server.storage import AddFile, FileEntry, Storage


@pytest.fixture
def storage(tmp_path):
    store = Storage(tmp_path / "hub")
    store.create_repo("model", "me/repo", private=False, author="me")
    return store


def test_main_cannot_be_deleted_and_deleting_an_unknown_ref_says_which(storage):
    with pytest.raises(Forbidden, match="main branch cannot be deleted"):
        storage.set_ref("model", "me/repo", "branches", "main", None)
    with pytest.raises(RevisionNotFound, match="^Tag v9 not found"):
        storage.set_ref("model", "me/repo", "tags", "v9", None)
    with pytest.raises(RevisionNotFound, match="^Branch two..dots not found"):  # a lookup, not a new name
        storage.set_ref("model", "me/repo", "branches", "two..dots", None)


def test_a_blob_is_a_regular_file_of_its_size_and_checked_against_its_commits_ids(storage):
    sha = storage.put_bytes(b"abc")
    assert storage.has_blob(sha, 3) and not storage.has_blob(sha, 4)
    folder = hashlib.sha256(b"a folder").hexdigest()
    storage.blob_path(folder).mkdir(parents=True)
    assert not storage.has_blob(folder)
    entry = FileEntry("a.txt", sha, 3, git_blob_oid(b"abc"), False)
    assert storage.verified_blob(entry) == storage.blob_path(sha)
    # damaged: shorter, or as long with another git blob sha1 (one that sorts after the stored id)
    other = next(c for c in (b"ab%c" % n for n in range(256)) if git_blob_oid(c) > entry.git_oid)
    for content, why in ((b"ab", "2 bytes instead of 3"), (other, "its git blob sha1 changed")):
        os.chmod(storage.blob_path(sha), 0o644)
        storage.blob_path(sha).write_bytes(content)
        with pytest.raises(StorageDamaged, match=f"damaged \\({why}\\)"):
            storage.verified_blob(entry)


def test_blobs_sent_or_offered_for_a_commit_to_come_outlive_a_collection(storage):
    """A collection keeps a blob a client was told is stored, for the commit it is about to send."""
    main = storage.resolve("model", "me/repo", "main")
    entries = [
        FileEntry(f"{n}.txt", hashlib.sha256(n.encode()).hexdigest(), len(n), git_blob_oid(n.encode()), False)
        for n in ("sent", "offered")
    ]
    storage.put_bytes(b"sent")
    storage.set_ref("model", "me/repo", "branches", "old", main)
    storage.commit("model", "me/repo", "old", [AddFile(entries[0])], "t", "", "me")
    storage.put_bytes(b"offered")
    storage.commit("model", "me/repo", "old", [AddFile(entries[1])], "t", "", "me")
    assert storage.reuse_blob(entries[1].sha256, entries[1].size)  # stored: the client will not send it again
    storage.set_ref("model", "me/repo", "branches", "old", None)  # collects: "sent" was named, then dropped
    assert [storage.has_blob(e.sha256) for e in entries] == [False, True]
    storage.commit("model", "me/repo", "main", [AddFile(entries[1])], "t", "", "me")
    head = storage.resolve("model", "me/repo", "main")
    assert storage.files("model", "me/repo", head)["offered.txt"] == entries[1]


def test_failed_write_never_exposes_a_half_written_commit(storage, monkeypatch):
    head, real = storage.resolve("model", "me/repo", "main"), os.replace

    def crash_on_refs(source, target, **kwargs):
        if os.path.basename(target) == "refs.json":
            raise OSError("disk died before the ref moved")
        real(source, target, **kwargs)

    monkeypatch.setattr(os, "replace", crash_on_refs)
    entry = FileEntry("f.txt", storage.put_bytes(b"new"), 3, git_blob_oid(b"new"), False)
    with pytest.raises(OSError):
        storage.commit("model", "me/repo", "main", [AddFile(entry)], "t", "", "me")
    assert storage.resolve("model", "me/repo", "main") == head
    assert "f.txt" not in storage.files("model", "me/repo", head)
    assert len(list((storage.root / "repos").glob("*/*/*/commits/*.json"))) == 1  # the initial commit only


def test_revision_indexes_are_built_one_at_a_time_and_the_latest_kept(storage, monkeypatch):
    """Requests for many large revisions at once must not hold many file tables in memory at once."""
    running, most = [], []
    heads = [storage.resolve("model", "me/repo", "main")]
    for i in range(5):
        storage.set_ref("model", "me/repo", "branches", f"b{i}", heads[0])
        heads.append(storage.commit("model", "me/repo", f"b{i}", [], "t", "", "me"))

    def build(*args):
        running.append(1)
        most.append(len(running))
        time.sleep(0.01)
        running.pop()
        return RevisionIndex(*args)

    monkeypatch.setattr(storage_module, "RevisionIndex", build)
    storage = Storage(storage.root, index_cache_revisions=2)  # nothing cached yet
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda cid: storage.index("model", "me/repo", cid), heads))
    assert max(most) == 1 and storage.indexes.cache_info()[1:] == (6, 2, 2)  # misses, size, kept
    for _ in range(2):
        storage.index("model", "me/repo", heads[0])
    assert storage.indexes.cache_info().misses <= 7


def test_files_go_to_lfs_by_suffix_size_above_10_mib_or_binary_content():
    mib = 1024 * 1024
    assert looks_like_lfs("model.safetensors", 10, b"{}")  # by suffix, however small
    assert not looks_like_lfs("notes.txt", 10 * mib, b"text")  # exactly 10 MiB of text stays in git
    assert looks_like_lfs("notes.txt", 10 * mib + 1, b"text")
    assert looks_like_lfs("notes.txt", 10, b"ab\0cd")  # binary


# ---- a full disk ---------------------------------------------------------------------------------------------
def stored_files(root) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != ".server.lock"
    )


def test_a_full_disk_is_a_507_with_its_message_and_leaves_storage_as_it_was(hub, monkeypatch, caplog):
    """Each write through the real client is a 507 with its message, logged; nothing of it stays on disk."""
    from hub_fixtures import TOKEN, FullDisk
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api, root = HfApi(endpoint=hub.url, token=TOKEN), hub.server.storage.root
    api.create_repo("testuser/kept")
    first = api.upload_file(path_or_fileobj=b"first", path_in_repo="a.txt", repo_id="testuser/kept").oid
    before = stored_files(root)
    disk = FullDisk(monkeypatch)
    disk.full = True
    second = dict(path_or_fileobj=b"second", path_in_repo="b.txt", repo_id="testuser/kept")
    writes = {
        "create_repo": lambda: api.create_repo("testuser/new"),
        "upload_file": lambda: api.upload_file(**second),
        "create_branch": lambda: api.create_branch("testuser/kept", branch="dev"),
        "create_tag": lambda: api.create_tag("testuser/kept", tag="v1"),
    }
    for name, write in writes.items():
        with caplog.at_level("ERROR", logger="hub_server"), pytest.raises(HfHubHTTPError) as error:
            write()
        assert error.value.response.status_code == 507, name
        message = error.value.server_message
        assert "storage is full" in message and "nothing of this request was stored" in message, name
        assert error.value.response.headers["X-Error-Code"] == "InsufficientStorage"
    assert len([r for r in caplog.records if "storage is full" in r.getMessage()]) == len(writes)
    assert [status for _, _, status in hub.server.request_log].count(507) == len(writes)  # none retried
    disk.full = False
    assert stored_files(root) == before  # no partial file, no unreferenced commit, no repo folder
    assert not api.repo_exists("testuser/new")
    assert api.repo_info("testuser/kept").sha == first
    assert api.hf_hub_download("testuser/kept", "a.txt", revision=first, cache_dir=root.parent / "cache")
    api.upload_file(**second)  # room again
    assert api.list_repo_files("testuser/kept") == [".gitattributes", "a.txt", "b.txt"]
