"""The local Hub server: protocol details over raw HTTP, and the real clients end to end."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_fixtures import (
    COMMIT_HEADER,
    TOKEN,
    api,
    client_env,
    commit,
    file_line,
    head_of,
    http_request,
    make_repo,
    ndjson,
    port_of,
    raw,
    run_client,
)

from briskbert.hub_server import BackgroundHub
from briskbert.hub_server.storage import git_blob_oid


def test_repo_lifecycle_and_error_codes(hub):
    """What the clients read beyond the status (the real client round trip checks the rest)."""
    head = make_repo(hub)
    with_parent = ndjson({"key": "header", "value": {"summary": "add", "parentCommit": head}})
    body = with_parent + ndjson(file_line("a/b.txt", b"hi"))
    status, body = api(hub, "POST", "/api/models/testuser/r/commit/main", body)
    assert status == 200 and body["commitUrl"] == f"{hub.url}/testuser/r/commit/{body['commitOid']}"
    # resolve: HEAD carries commit and etag; a missing file says so and still names the commit
    status, h, _ = raw(hub, http_request("HEAD", "/testuser/r/resolve/main/a/b.txt"))
    etag = f'"{git_blob_oid(b"hi")}"'
    assert (status, h["x-repo-commit"], h["etag"], h["content-length"]) == (200, body["commitOid"], etag, "2")
    status, h, _ = raw(hub, http_request("HEAD", "/testuser/r/resolve/main/missing.txt"))
    assert status == 404 and h["x-error-code"] == "EntryNotFound" and h["x-repo-commit"] == body["commitOid"]
    # a stale parent, or one sorting below or above any commit id, is refused and changes nothing
    for parent in (head, "0" * 40, "f" * 40):
        stale = ndjson({"key": "header", "value": {"summary": "add", "parentCommit": parent}})
        stale = api(hub, "POST", "/api/models/testuser/r/commit/main", stale + ndjson(file_line("c.txt")))
        assert stale[0] == 412 and head_of(hub) == body["commitOid"]
    tree = api(hub, "GET", "/api/models/testuser/r/tree/main?recursive=false")[1]
    assert [(e["type"], e["path"]) for e in tree] == [("file", ".gitattributes"), ("directory", "a")]
    # a deleted folder takes every file under it, and only those (not a sibling whose name starts alike)
    assert commit(hub, "testuser/r", file_line("a/c/d.txt", b"d"), file_line("ab.txt", b"e"))[0] == 200
    drop = {"key": "deletedFolder", "value": {"path": "a/"}}  # as huggingface_hub sends it
    assert commit(hub, "testuser/r", drop)[0] == 200
    tree = api(hub, "GET", "/api/models/testuser/r/tree/main?recursive=true")[1]
    assert [e["path"] for e in tree if e["type"] == "file"] == [".gitattributes", "ab.txt"]
    assert commit(hub, "testuser/r", drop)[0] == 404


def test_lfs_upload_is_presigned_and_checked(lfs_hub):
    make_repo(lfs_hub)
    data = b"\0binary" * 100
    oid = hashlib.sha256(data).hexdigest()
    request = {"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}
    (answer,) = api(lfs_hub, "POST", "/testuser/r.git/info/lfs/objects/batch", request)[1]["objects"]
    href = answer["actions"]["upload"]["href"].removeprefix(lfs_hub.url)

    def put(url: str, content: bytes = data) -> int:  # no auth header, like a pre-signed URL
        return api(lfs_hub, "PUT", url, content, auth=False)[0]

    assert put(href.replace("sig=", "sig=0")) == 403  # tampered signature
    for size in ("%C2%B2", "9" * 5000, "-1"):  # a size must be plain ASCII digits: int() takes '²'
        assert put(re.sub("size=[0-9]+", f"size={size}", href)) == 403, size
    assert put(href, data[:-1] + b"!") == 400  # content does not match the oid
    assert put(href) == 200
    again = api(lfs_hub, "POST", "/testuser/r.git/info/lfs/objects/batch", request)[1]
    assert "actions" not in again["objects"][0]  # already stored: nothing to upload


@pytest.mark.parametrize("kind", ["500", "drop", "stall"])
def test_fault_modes_leave_the_repo_unchanged(hub, kind):
    head = make_repo(hub)
    hub.set_fault({"step": "commit", "kind": kind, "times": 1, "stall_s": 0.5})
    conn = http.client.HTTPConnection("127.0.0.1", port_of(hub), timeout=5)
    t0 = time.time()
    body = ndjson(COMMIT_HEADER, file_line("f.txt"))
    conn.request("POST", "/api/models/testuser/r/commit/main", body, {"Authorization": f"Bearer {TOKEN}"})
    if kind == "500":
        assert conn.getresponse().status == 500
    else:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            conn.getresponse()
        assert (time.time() - t0 >= 0.5) == (kind == "stall")
    conn.close()
    assert head_of(hub) == head  # nothing happened
    status, ok = commit(hub, "testuser/r", file_line("f.txt"))
    assert status == 200 and head_of(hub) == ok["commitOid"]  # fault used up: the retry goes through


def test_cli_starts_the_server_and_never_prints_the_token(server_process, tmp_path):
    proc, port = server_process
    status, me = api(port, "GET", "/api/whoami-v2")
    assert status == 200 and me["name"] == "testuser"
    proc.terminate()
    proc.wait(10)
    assert TOKEN not in (tmp_path / "server.out").read_text()


CLIENT_ROUNDTRIP = """
import json, os
from huggingface_hub import HfApi, snapshot_download
api, repo = HfApi(), "testuser/tiny-bert"
api.create_repo(repo, exist_ok=True)
api.create_repo(repo, exist_ok=True)
first = api.upload_folder(folder_path=os.environ["FOLDER"], repo_id=repo, commit_message="v1")
again = api.upload_folder(folder_path=os.environ["FOLDER"], repo_id=repo)
api.create_tag(repo, tag="v1", revision=first.oid)
api.upload_file(path_or_fileobj=b"notes", path_in_repo="docs/notes.md", repo_id=repo)
api.delete_file("docs/notes.md", repo_id=repo)
snapshot_download(repo, revision="v1")
assert not api.repo_exists("testuser/nope") and not api.revision_exists(repo, "nope")
out = {"first": first.oid, "again": again.oid, "files": api.list_repo_files(repo),
    "tags": [t.name for t in api.list_repo_refs(repo).tags],
    "commits": [c.title for c in api.list_repo_commits(repo)],
    "paths": [p.path for p in api.get_paths_info(repo, ["config.json", "missing"])],
    "lfs": {s.rfilename: bool(s.lfs) for s in api.model_info(repo, files_metadata=True).siblings}}
print(json.dumps(out))
"""


# The real huggingface_hub client over HTTP, both upload paths (transformers reading a model back from the local
# Hub is the publisher's verification, tests/test_publish.py).
@pytest.mark.slow
@pytest.mark.parametrize("xet", [True, False], ids=["xet-regular-uploads", "no-xet-lfs-uploads"])
def test_real_clients_roundtrip(tmp_path, xet):
    folder = tmp_path / "model"  # the files of a model folder, as the client uploads them
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text(json.dumps({"file": name}))
    with BackgroundHub(tmp_path / "data", TOKEN, upload_mode="regular" if xet else "lfs") as h:
        env = client_env(h.url, tmp_path / "home", xet=xet, FOLDER=folder)
        out = run_client(CLIENT_ROUNDTRIP, env, tmp_path).result
        log = list(h.server.request_log)
    assert out["first"] == out["again"]  # nothing changed: no second commit
    model_files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert out["files"] == [".gitattributes", *model_files]
    assert out["tags"] == ["v1"] and out["paths"] == ["config.json"]
    assert out["commits"][-1] == "initial commit" and out["commits"].count("v1") == 1
    assert out["lfs"]["model.safetensors"] and not out["lfs"]["config.json"]
    assert bool([p for _, p, _ in log if p.startswith("/lfs-upload/")]) == (not xet)
    assert not [p for _, p, _ in log if "xet" in p] and all(s < 500 for _, _, s in log)


def test_damaged_repos_and_blobs_are_named_and_the_rest_is_served(tmp_path, caplog):
    """A data folder left damaged is served as well as it can be; what interrupted writes left in tmp/ goes."""
    files = {"config.json": b'{"a": 1}', "weights.bin": b"\0weights" * 50, "notes.txt": b"notes " * 50}
    # head.bin's damage sorts lower
    files |= {"gone.txt": b"deleted from the blob store", "head.bin": b"\0head" * 50}
    data = tmp_path / "data"
    with BackgroundHub(data, TOKEN) as h:
        for name in ("good", "broken-meta", "broken-refs", "broken-tree"):
            make_repo(h, name)
        commit_to(h, "main", *files.items(), repo="testuser/good")
        tree_head = head_of(h, "testuser/broken-tree")
    repos = data / "repos" / "models" / "testuser"
    meta, refs = repos / "broken-meta" / "meta.json", repos / "broken-refs" / "refs.json"
    meta.write_text('{"id": "testuser/broken-meta", "priv')
    refs.write_text('{"branches": ["main"]}')
    (repos / "broken-tree" / "trees" / f"{tree_head}.json").write_text('{"config.json": 3}')
    blobs = {p: blob_file(data, d) for p, d in files.items()}
    for path in ("weights.bin", "head.bin", "notes.txt"):
        blobs[path].write_bytes(files[path].swapcase())  # the same size, other bytes
    blobs["gone.txt"].unlink()
    (data / "tmp" / "deleted-abc").mkdir()  # what interrupted writes leave
    (data / "tmp" / "tmpk3j2").write_bytes(b"half an upload")
    with caplog.at_level("ERROR", logger="hub_server"), BackgroundHub(data, TOKEN) as h:
        # the rest is served
        assert api(h, "GET", "/testuser/good/resolve/main/config.json") == (200, {"a": 1})
        for path, words in [
            ("/api/models/testuser/broken-meta", "broken-meta is damaged (meta.json: not valid JSON"),
            ("/api/models/testuser/broken-refs", "(refs.json: not an object with 'branches' and 'tags'"),
            ("/api/models/testuser/broken-tree", f"(trees/{tree_head}.json: not a file table"),
            ("/testuser/good/resolve/main/weights.bin", "of weights.bin is damaged (its sha256 changed)"),
            ("/testuser/good/resolve/main/head.bin", "of head.bin is damaged (its sha256 changed)"),
            ("/testuser/good/resolve/main/notes.txt", "of notes.txt is damaged (its git blob sha1 changed)"),
            ("/testuser/good/resolve/main/gone.txt", "of gone.txt is damaged (missing)"),
        ]:
            status, headers, _ = raw(h, http_request("GET", path))
            assert (status, headers["x-error-code"]) == (500, "StorageDamaged"), path
            assert words in headers["x-error-message"], path
        # Whether a repo whose meta.json is damaged is private is unknown: strangers get the 404 of a missing one.
        assert api(h, "GET", "/api/models/testuser/broken-meta", auth=False)[0] == 404
        assert list((data / "tmp").iterdir()) == []
    logged = [r.getMessage() for r in caplog.records]
    for damaged_file in (meta, refs, *blobs.values()):
        named = [line for line in logged if str(damaged_file) in line]
        assert len(named) == (0 if damaged_file == blobs["config.json"] else 1), (damaged_file, logged)


def test_a_port_or_data_dir_in_use_is_one_line_naming_the_flag(tmp_path, capsys, monkeypatch):
    from briskbert.cli import main

    monkeypatch.setenv("LOCAL_HUB_TOKEN", TOKEN)
    served = tmp_path / "served"
    with socket.socket() as taken, BackgroundHub(served, TOKEN):
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        port_taken = main(["local-hub", "--port", str(port), "--data_dir", str(tmp_path / "d")])
        codes = [port_taken, main(["local-hub", "--port", "0", "--data_dir", str(served)])]
    out, err = capsys.readouterr()
    assert (codes, out) == ([2, 2], "")
    assert err.splitlines() == [
        f"error: --port {port} is already in use on 127.0.0.1: pick another --port, or --port 0 for a free one",
        f"error: --data_dir {served} is already served by another local Hub; stop it or use another folder",
    ]


def blob_file(data_dir: Path, content: bytes) -> Path:
    sha = hashlib.sha256(content).hexdigest()
    return data_dir / "blobs" / sha[:2] / sha


def commit_to(hub, branch: str, *files: tuple[str, bytes], repo: str = "testuser/r") -> str:
    status, answer = commit(hub, repo, *(file_line(path, content) for path, content in files), branch=branch)
    assert status == 200, answer
    return answer["commitOid"]


def test_a_deleted_branch_takes_what_only_it_reached_even_after_a_crash(tmp_path, monkeypatch):
    """The refs move first; the next collection removes what a crash during the previous one left."""
    data = tmp_path / "data"
    with BackgroundHub(data, TOKEN) as h:
        main = make_repo(h, "r")
        make_repo(h, "other")
        commit_to(h, "main", ("shared.txt", b"shared"), repo="testuser/other")
        for branch in ("staging", "tagged"):
            assert api(h, "POST", f"/api/models/testuser/r/branch/{branch}", {})[0] == 200
        staged = commit_to(h, "staging", ("secret.txt", b"unverified"), ("copy.txt", b"shared"))
        older = commit_to(h, "tagged", ("t0.txt", b"older"))  # reached only as the parent of the tagged one
        tagged = commit_to(h, "tagged", ("t.txt", b"tagged"))
        assert api(h, "POST", "/api/models/testuser/r/tag/tagged", {"tag": "v1"})[0] == 200

        def power_lost(path, missing_ok=False):
            raise OSError("the power went out")

        with monkeypatch.context() as patched, contextlib.suppress(OSError):
            patched.setattr(Path, "unlink", power_lost)  # the refs moved; nothing of the clean happened
            api(h, "DELETE", "/api/models/testuser/r/branch/staging")
    assert blob_file(data, b"unverified").is_file()
    with BackgroundHub(data, TOKEN) as h:
        for path in (f"/api/models/testuser/r/revision/{staged}", f"/testuser/r/resolve/{staged}/secret.txt"):
            assert api(h, "GET", path) == (404, {"error": f"Invalid rev id: {staged}"})
        assert api(h, "DELETE", "/api/models/testuser/r/branch/tagged")[0] == 200
        assert not blob_file(data, b"unverified").exists()
        assert not list(data.glob(f"repos/*/*/*/*/{staged}.json"))
        assert blob_file(data, b"shared").is_file()  # another repo's commit names it
        assert api(h, "GET", f"/testuser/r/resolve/{tagged}/t.txt") == (200, b"tagged")  # a tag reaches it
        assert api(h, "POST", "/api/models/testuser/r/branch/doomed", {})[0] == 200
        doomed = commit_to(h, "doomed", ("d.txt", b"doomed"))
        assert api(h, "GET", f"/testuser/r/resolve/{doomed}/d.txt") == (200, b"doomed")  # its index is kept
        assert api(h, "DELETE", "/api/models/testuser/r/branch/doomed")[0] == 200
        assert api(h, "GET", f"/testuser/r/resolve/{doomed}/d.txt")[0] == 404  # no ref reaches it: not served
        for _ in range(2):  # a second collection of the same heads removes nothing more
            assert api(h, "GET", f"/testuser/r/resolve/{older}/t0.txt") == (200, b"older")
            assert api(h, "POST", "/api/models/testuser/r/branch/same-as-main", {})[0] == 200
            assert api(h, "DELETE", "/api/models/testuser/r/branch/same-as-main")[0] == 200
        assert api(h, "GET", f"/testuser/r/resolve/{main}/.gitattributes")[0] == 200


@pytest.mark.parametrize(
    "job, needed_for",
    [
        ("local-hub", "briskbert local-hub"),
        ("quickstart", "briskbert quickstart (it publishes to the local Hub)"),
    ],
)
def test_the_hub_jobs_without_the_hub_extra_name_it(tmp_path, job, needed_for):
    """Before anything is written: the local Hub, and the quickstart that publishes to it."""
    code = "import sys; sys.modules['uvicorn'] = None; from briskbert.cli import main; sys.exit(main(sys.argv[1:]))"
    folder = "--data_dir" if job == "local-hub" else "--output_dir"
    command = [sys.executable, "-c", code, job, folder, str(tmp_path / "d")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and not (tmp_path / "d").exists()
    install = 'pip install "briskbert[hub]" (from a clone: pip install ".[hub]")'
    missing = f"error: {needed_for} needs uvicorn, which is not installed: install the [hub] extra with"
    assert proc.stderr.strip() == f"{missing} {install}."
