"""The local Hub under hostile input over real sockets (docs/security.md lists the defences; ``-s`` prints the
figures it quotes). Every test stops by itself within seconds."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import os
import random
import select
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hub_fixtures import (
    AUTH,
    COMMIT_HEADER,
    TOKEN,
    api,
    commit,
    file_line,
    head_of,
    http_request,
    make_repo,
    ndjson,
    port_of,
    raw,
    read_response,
    status_kb,
    wait_for,
)

from briskbert.hub_server import Account, BackgroundHub, HubError, ServerLimits, Storage
from briskbert.hub_server.index import RevisionIndex
from briskbert.hub_server.protocol import commit_lines, parse_commit_line
from briskbert.hub_server.storage import AddFile

HEADER = COMMIT_HEADER
HUB_SERVER = str(Path(__file__).resolve().parents[1] / "hub_server")
WRONG_TOKEN = "Authorization: Bearer wrong\r\n"


def test_request_text_is_never_reflected_raw_into_headers(hub):
    make_repo(hub)
    for path in (
        "/api/nothing%0d%0aX-Injected:%201",
        "/api/nothing%00X-Injected:%201",
        "/testuser/r/resolve/main/%E2%80%A8%0d%0aX-Injected:%201",
        "/api/models/testuser/r/refs%0d%0a%0d%0a<html>",
    ):
        for method in ("GET", "HEAD"):
            status, headers, _ = raw(hub, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert 400 <= status < 500 and "x-injected" not in headers and "<html>" not in headers, path
            assert all(32 <= ord(c) < 127 for c in "".join(headers.values())), (path, headers)


# ---- framing, caps and timeouts -------------------------------------------------------------------------
CREATE = "POST /api/repos/create HTTP/1.1\r\nHost: x\r\n" + AUTH
BAD_HEADS = [  # (head, status): h11 refuses the first lengths; both framings at once is the server's own check
    (CREATE + "Content-Length: -1\r\n", 400),
    (CREATE + "Content-Length: 1e3\r\n", 400),
    (CREATE + "Content-Length: 20\r\nContent-Length: 21\r\n", 400),
    (CREATE + "Transfer-Encoding: gzip\r\n", 400),
    (CREATE + "Content-Length: 20\r\nTransfer-Encoding: chunked\r\n", 400),
    (f"POST /api/repos/create?{'a' * 9000} HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Length: 20\r\n", 414),
    (CREATE + "".join(f"X-Filler-{i}: {'b' * 2000}\r\n" for i in range(40)) + "Content-Length: 20\r\n", 431),
]


def test_bad_request_heads_are_refused_and_nothing_runs(hub):
    body = json.dumps({"name": "refused", "organization": "testuser"}).encode()
    assert [raw(hub, head.encode() + b"\r\n" + body)[0] for head, _ in BAD_HEADS] == [s for _, s in BAD_HEADS]
    assert not hub.server.storage.lookup("model", "testuser/refused")
    assert raw(hub, f"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode())[0] == 200


def test_bodies_over_the_callers_cap_are_refused_from_the_headers(hub):
    """Not one byte of the body is sent: the answer comes from the headers alone, and closes the connection."""

    def announce(path: str, length: int, auth: str = ""):
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {length}\r\n\r\n"
        return raw(hub, head.encode(), timeout=3)

    for path in ("/api/repos/create", "/api/models/testuser/r/commit/main"):
        status, headers, _ = announce(path, 4_000_000_000)
        assert status == 401 and headers.get("connection") == "close"
    status, _, reply = announce("/api/repos/create", 4_000_000_000, AUTH)
    assert status == 413 and "limit" in json.loads(reply)["error"]
    status, headers, reply = announce("/api/validate-yaml", 16 << 20)  # a public route: 1 MiB without a token
    assert status == 413 and headers.get("connection") == "close" and "1048576" in json.loads(reply)["error"]
    # A token lifts the cap to the JSON limit: a long README still validates.
    card = {"content": "---\nlicense: mit\n---\n" + "text " * 400_000}
    assert api(hub, "POST", "/api/validate-yaml", card, auth=False)[0] == 413
    assert api(hub, "POST", "/api/validate-yaml", card) == (200, {"errors": [], "warnings": []})


def test_connections_are_capped_and_idle_ones_time_out(quick_hub):
    port = port_of(quick_hub)
    # 40 half-sent requests: connections served are capped at max_connections and all closed after the timeout
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.sendall(b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
    peak, until = 0, time.monotonic() + 0.3  # within the 0.5 s read timeout of the first ones
    while time.monotonic() < until or not peak and time.monotonic() < until + 2:
        peak = max(peak, quick_hub.server.open_connections)
        time.sleep(0.002)  # the server's event loop needs the interpreter too
    assert 0 < peak <= 8, peak
    assert wait_for(lambda: quick_hub.server.open_connections == 0)  # all closed after the timeout
    assert api(quick_hub, "GET", "/api/whoami-v2")[0] == 200  # and the server still answers
    for sock in socks:
        sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def test_trickled_request_heads_are_cut_at_their_deadline(quick_hub):
    """Slowloris: one byte every 0.1 s beats the 0.5 s idle timeout; only the head's deadline closes them."""
    socks = [socket.create_connection(("127.0.0.1", port_of(quick_hub)), timeout=2) for _ in range(8)]
    started, closed_after = time.monotonic(), None
    line = b"GET /api/whoami-v2 HTTP/1.1\r\nX-Slow: " + b"a" * 100
    for i in range(len(line)):
        open_socks = [s for s in socks if not _closed_by_peer(s)]
        if not open_socks or time.monotonic() - started > 3:
            closed_after = None if open_socks else time.monotonic() - started
            break
        for sock in open_socks:
            with contextlib.suppress(OSError):
                sock.send(line[i : i + 1])
        time.sleep(0.1)
    status = api(quick_hub, "GET", "/api/whoami-v2")[0]
    for sock in socks:
        sock.close()
    shown = "never" if closed_after is None else f"after {closed_after:.2f} s"
    print(f"\nslowloris: 8 trickling connections closed {shown} (head deadline 0.5 s)")
    assert closed_after is not None and closed_after < 2.5 and status == 200


def test_trickled_bodies_are_cut_at_their_deadline(quick_hub):
    head = f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Length: 20000\r\n\r\n".encode()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port_of(quick_hub)), timeout=5) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):
            for _ in range(40):  # one byte every 0.1 s: never silent for the 0.5 s idle timeout
                sock.send(b" ")
                time.sleep(0.1)
                if select.select([sock], [], [], 0)[0]:
                    break
        status, _, reply = read_response(sock)
    assert status == 408 and "did not arrive in time" in json.loads(reply)["error"]
    assert time.monotonic() - started < 3  # 0.5 s grace + 20,000 bytes at 64 KiB/s, and some slack


def test_expect_100_continue_only_after_the_headers_pass(hub):
    body = json.dumps({"name": "expect", "organization": "testuser"}).encode()
    head = f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {len(body)}\r\n"
    for auth, first in (("", 401), (WRONG_TOKEN, 401), (AUTH, 100)):
        with socket.create_connection(("127.0.0.1", port_of(hub)), timeout=5) as sock:
            sock.sendall((head + auth + "\r\n").encode())  # headers only: the client waits for a go-ahead
            assert read_response(sock)[0] == first
            if first == 100:
                sock.sendall(body)
                assert read_response(sock)[0] == 200
    assert hub.server.storage.lookup("model", "testuser/expect")


# ---- malformed payloads ----------------------------------------------------------------------------------
C, P, M = "/api/repos/create", "/api/models/testuser/r/preupload/main", "/api/models/testuser/r/commit/main"
L = "/testuser/r.git/info/lfs/objects/batch"
DEEP = b"[" * 200_000 + b"]" * 200_000
MALFORMED = [  # one of each way a document, a field or a commit line can be wrong
    ("POST", C, b"[]"),
    ("POST", C, b"{"),
    ("POST", C, DEEP),
    ("POST", C, b'{"name": "\xff\xfe"}'),
    ("POST", C, b'{"name": 5}'),
    ("POST", C, b'{"name": "x", "type": "nope"}'),
    ("POST", C, b'{"name": "x", "visibility": "secret"}'),
    ("POST", P, b'{"files": [{"path": "a", "sample": "!!!not base64"}]}'),
    ("POST", L, json.dumps({"operation": "upload", "objects": [{"oid": "z" * 64, "size": 1}]}).encode()),
    ("POST", L, json.dumps({"operation": "download", "objects": []}).encode()),
    ("POST", M, b""),
    ("POST", M, ndjson({"key": "header", "value": []})),
    ("POST", M, ndjson(HEADER, DEEP)),
    ("POST", M, ndjson(HEADER, {"key": "nope", "value": {}})),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"path": "a", "content": "!!!"}})),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"path": "a", "content": "x", "encoding": "utf-8"}})),
    ("POST", M, ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a", "oid": "nothex"}})),
    ("POST", M, ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a", "oid": "a" * 64, "size": 3}})),
    ("POST", M, ndjson(HEADER, {"key": "deletedFile", "value": {"path": "not-there.txt"}})),
    ("POST", M, ndjson(file_line("a.txt"))),
    ("POST", M, ndjson(HEADER, HEADER)),
    ("POST", M, ndjson({"key": "header", "value": {"summary": "x", "parentCommit": "main"}})),
]


def test_malformed_payloads_are_a_4xx_with_a_message_and_change_nothing(hub):
    head = make_repo(hub)
    failures = []
    for method, path, body in MALFORMED:
        status, headers, reply = raw(hub, http_request(method, path, body))
        if not (400 <= status < 500 and headers.get("x-error-message") and json.loads(reply).get("error")):
            failures.append((method, path, body[:80], status, reply[:200]))
    assert not failures, failures
    assert head_of(hub) == head
    assert [p.name for p in (hub.server.storage.root / "repos" / "models" / "testuser").iterdir()] == ["r"]


def test_commits_racing_a_repo_deletion_get_4xx_never_500(hub):
    def send(barrier: threading.Barrier, path: str | None) -> int:
        barrier.wait()
        if path is None:
            return api(hub, "DELETE", "/api/repos/delete", {"name": "race", "organization": "testuser"})[0]
        body = ndjson(HEADER, file_line(path, os.urandom(64)))
        return api(hub, "POST", "/api/models/testuser/race/commit/main", body)[0]

    statuses: list[int] = []
    for round_ in range(4):
        make_repo(hub, "race")
        paths = [f"f{round_}-{i}.txt" for i in range(6)] + [None]  # six commits and a deletion at once
        with ThreadPoolExecutor(7) as pool:
            statuses += pool.map(send, [threading.Barrier(7)] * 7, paths)
    assert len(statuses) == 28 and all(s < 500 for s in statuses), statuses


# ---- refs, start-up, pull requests, auth -------------------------------------------------------------------
def test_ref_names_follow_git_rules_and_branches_and_tags_share_one_namespace(hub):
    head = make_repo(hub)

    def create(branch: str, tag: str) -> tuple[int, int]:
        path = f"/api/models/testuser/r/branch/{urllib.parse.quote(branch, safe='')}"
        tagged = api(hub, "POST", "/api/models/testuser/r/tag/main", {"tag": tag})[0]
        return api(hub, "POST", path, {})[0], tagged

    # one per git ref-name rule, plus 40-hex names that would shadow commit ids
    names = ("a" * 40, "..", "a/", "x.lock", ".hidden", "a~1", "a b", "a@{1}", "refs/heads/x", "bad\x00name")
    for name in names:
        branch, tag = create(name, name)
        assert branch in (400, 404) and tag == 400, name  # a name ending in '/' is no route: a 404
    for name in ("v1.0", "release/2024-01", "dev_1"):
        assert create(name, f"t-{name}") == (200, 200), name
    assert api(hub, "GET", f"/testuser/r/resolve/{head}/.gitattributes")[0] == 200  # a commit id still reads
    assert commit(hub, "testuser/r", file_line("later.txt"))[0] == 200
    status, body = api(hub, "POST", "/api/models/testuser/r/branch/t-v1.0", {"startingPoint": "main"})
    assert status == 409 and body["error"].startswith("A tag named t-v1.0 already exists; branches and tags")
    status, body = api(hub, "POST", "/api/models/testuser/r/tag/main", {"tag": "dev_1"})
    assert status == 409 and body["error"].startswith("A branch named dev_1 already exists")
    assert api(hub, "GET", "/api/models/testuser/r/revision/t-v1.0")[1]["sha"] == head  # still the tag


def test_pull_requests_are_refused_clearly_and_not_retried(hub):
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    make_repo(hub)
    with pytest.raises(HfHubHTTPError, match="Pull requests and discussions are not supported"):
        HfApi(endpoint=hub.url, token=TOKEN).create_commit(
            "testuser/r", [CommitOperationAdd("a.txt", b"a")], commit_message="pr", create_pr=True
        )
    wait_for(lambda: 400 in [status for *_, status in hub.server.request_log])  # logged just after its answer
    time.sleep(0.3)  # room for a retry's line, if any
    assert [status for *_, status in hub.server.request_log].count(400) == 1


WRITE_ROUTES = [
    ("POST", "/api/repos/create"),
    ("DELETE", "/api/repos/delete"),
    ("POST", "/api/models/testuser/r/preupload/main"),
    ("POST", "/api/models/testuser/r/commit/main"),
    ("POST", "/api/models/testuser/r/branch/b"),
    ("DELETE", "/api/models/testuser/r/tag/v1"),
    ("GET", "/api/models/testuser/r/xet-write-token/main"),
    ("POST", "/api/models/testuser/r/discussions"),
    ("POST", "/testuser/r.git/info/lfs/objects/batch"),
    ("GET", "/api/whoami-v2"),
]


def test_auth_matrix_every_write_route_needs_the_token(hub):
    head = make_repo(hub)
    for method, path in WRITE_ROUTES:
        for header in ("", WRONG_TOKEN, "Authorization: Basic eDp5\r\n", f"Authorization: {TOKEN}\r\n"):
            status, headers, _ = raw(hub, http_request(method, path, b"{}", headers=header))
            assert (status, headers["x-error-code"]) == (401, "Unauthorized"), (method, path, header)
    assert head_of(hub) == head


# ---- README front matter: POST /api/validate-yaml needs no token -------------------------------------------
VALIDATE_YAML = {  # front matter: (status, words of the first error, or None for no error; warnings)
    "unknown values warn": ("license: not-a-license\npipeline_tag: dancing", 200, None, 2),
    "a wrong type": ("license: [1, 2]", 400, "license", 0),
    "nodes": ("x: [" + "{}," * 60_000 + "{}]", 400, "more than 50000 YAML nodes", 0),
    "aliases": ("a: &a [x, x]\nb: &b [*a, *a]\nlicense: [*b, *b]", 400, "aliases", 0),
    "flow nesting": ("x: " + "[" * 5000, 400, "deeper than 64", 0),
    "block nesting": ("x:\n" + "- " * 3000 + "a", 400, "deeper than 64", 0),
}


@pytest.mark.parametrize("kind", list(VALIDATE_YAML))
def test_validate_yaml_answers_json_and_refuses_yaml_bombs_with_a_400(hub, kind):
    meta, status, words, warnings = VALIDATE_YAML[kind]
    card = {"content": f"---\n{meta}\n---\nhi", "repoType": "model"}
    got, body = api(hub, "POST", "/api/validate-yaml", card, auth=False)
    assert (got, len(body["warnings"])) == (status, warnings), str(body)[:300]
    assert words in body["errors"][0]["message"] if words else body["errors"] == []


# ---- ranges and sizes a stranger sends -----------------------------------------------------------------------
DATA = b"0123456789AB"
RANGES = [  # (Range header, status, Content-Range, body)
    ("bytes=\u00b2-", 200, None, DATA),  # int() takes '²', a range does not
    ("bytes=" + "9" * 5000 + "-", 416, "bytes */12", None),  # int() refuses 5,000 digits
    ("bytes=2-5", 206, "bytes 2-5/12", DATA[2:6]),
    ("bytes=10-99", 206, "bytes 10-11/12", DATA[10:]),
    ("bytes=-4", 206, "bytes 8-11/12", DATA[-4:]),
    ("bytes=5-2", 200, None, DATA),
    ("bytes=0-1,4-5", 200, None, DATA),
]


def test_range_requests_are_parsed_strictly(hub):
    make_repo(hub)
    assert commit(hub, "testuser/r", file_line("f.txt", DATA))[0] == 200
    answers = []
    for header, _status, _range, body in RANGES:
        request = f"GET /testuser/r/resolve/main/f.txt HTTP/1.1\r\nHost: x\r\nRange: {header}\r\n\r\n"
        got, headers, reply = raw(hub, request.encode("latin-1"))
        answers.append((got, headers.get("content-range"), reply if body is not None else None))
    assert answers == [(s, c, b) for _, s, c, b in RANGES]


# ---- memory ---------------------------------------------------------------------------------------------
def test_request_log_is_a_ring_of_short_paths(tmp_path):
    with BackgroundHub(tmp_path / "d", TOKEN, limits=ServerLimits(request_log_entries=50)) as hub:
        with socket.create_connection(("127.0.0.1", port_of(hub)), timeout=5) as sock:
            for i in range(60):
                sock.sendall(f"GET /api/models/testuser/{i}{'x' * 6000} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert read_response(sock)[0] == 400
            # A kept-alive connection answers at once: the body does not wait for the client's delayed ACK.
            connections = hub.server._uvicorn.server_state.connections
            (kept,) = [c.transport.get_extra_info("socket") for c in connections]
            assert kept.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert wait_for(lambda: hub.server.request_log[-1][1].startswith("/api/models/testuser/59x"))
        log = list(hub.server.request_log)
    assert len(log) == 50 and {len(path) for _, path, _ in log} == {256}


def test_reads_of_a_large_repo_share_one_index_per_revision(hub):
    """5,000 files: concurrent repo_info, the client's paged listing and downloads share one index build."""
    from huggingface_hub import HfApi

    make_repo(hub, "big")
    paths = [f"d{i % 40}/s{i % 7}/f{i}.txt" for i in range(5000)]
    assert commit(hub, "testuser/big", *(json.dumps(file_line(p, b"same")).encode() for p in paths))[0] == 200
    builds = hub.server.storage.indexes.cache_info().misses
    with ThreadPoolExecutor(6) as pool:
        repo_info = "/api/models/testuser/big?blobs=true"
        infos = list(pool.map(lambda _: api(hub, "GET", repo_info, auth=False), range(6)))
    assert all(s == 200 and len(i["siblings"]) == 5001 for s, i in infos)
    listed = HfApi(endpoint=hub.url, token=False).list_repo_files("testuser/big")
    assert set(listed) == {*paths, ".gitattributes"}
    status, page = api(hub, "GET", "/api/models/testuser/big/tree/main?recursive=true", auth=False)
    assert status == 200 and 1000 <= len(page) <= 1003
    root = api(hub, "GET", "/api/models/testuser/big/tree/main", auth=False)[1]
    assert [e["path"] for e in root] == [".gitattributes"] + sorted(f"d{i}" for i in range(40))
    assert api(hub, "GET", "/testuser/big/resolve/main/d0/s0/f4760.txt", auth=False) == (200, b"same")
    assert hub.server.storage.indexes.cache_info().misses == builds + 1


def test_a_revision_holds_at_most_max_repo_files(tmp_path):
    with BackgroundHub(tmp_path / "d", TOKEN, limits=ServerLimits(max_repo_files=20)) as hub:
        head = make_repo(hub)
        status, body = commit(hub, "testuser/r", *(file_line(f"f{i}.txt") for i in range(25)))
        assert status == 413 and "at most 20" in body["error"]
        assert commit(hub, "testuser/r", *(file_line(f"f{i}.txt") for i in range(19)))[0] == 200
        assert commit(hub, "testuser/r", file_line("one-more.txt"))[0] == 413  # 21 with .gitattributes
        assert api(hub, "GET", "/api/models/testuser/r")[1]["sha"] != head


def _attack_yaml(port: int) -> None:
    bomb = {"content": "---\nx: [" + "{}," * 150_000 + "{}]\n---\n"}  # 450 KB: under the 1 MiB cap
    with ThreadPoolExecutor(8) as pool:
        statuses = pool.map(lambda _: api(port, "POST", "/api/validate-yaml", bomb, auth=False)[0], range(8))
        assert list(statuses) == [400] * 8


def _attack_inline_upload(port: int) -> None:
    content = os.urandom(24 << 20)
    make_repo(port, "up")
    assert commit(port, "testuser/up", file_line("weights.bin", content))[0] == 200
    status, data = api(port, "GET", "/testuser/up/resolve/main/weights.bin")
    assert status == 200 and hashlib.sha256(data).digest() == hashlib.sha256(content).digest()


def _attack_unauthenticated_body(port: int) -> None:
    """A 4 GB body without a token, sent as fast as the server takes it: refused, and the connection closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000000\r\n\r\n")
        sent, zeros = 0, bytes(1 << 20)
        with contextlib.suppress(OSError):
            while sent < (64 << 20):
                sock.sendall(zeros)
                sent += len(zeros)
        assert sent < (64 << 20)  # the server closed the connection long before


def _attack_large_repo(port: int) -> None:
    make_repo(port, "big")
    lines = [json.dumps(file_line(f"d{i % 40}/f{i}.txt", b"same")).encode() for i in range(10_000)]
    assert commit(port, "testuser/big", *lines)[0] == 200
    reads = ["/api/models/testuser/big?blobs=true", "/api/models/testuser/big/tree/main?recursive=true"] * 6
    with ThreadPoolExecutor(6) as pool:
        assert {s for s, _ in pool.map(lambda p: api(port, "GET", p, auth=False), reads)} == {200}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status and clear_refs")
def test_server_memory_stays_within_64_mib_of_idle_under_attack(server_process):
    pid, port = server_process[0].pid, server_process[1]
    for path in ("/api/whoami-v2", "/api/models/testuser/none"):
        api(port, "GET", path)
    make_repo(port, "warm")
    api(port, "POST", "/api/validate-yaml", {"content": "---\nlicense: mit\n---\n"})
    idle = status_kb(pid, "VmRSS")
    attacks = {
        "8 YAML bombs at once": _attack_yaml,
        "a 24 MiB inline upload": _attack_inline_upload,
        "an unauthenticated 4 GB body": _attack_unauthenticated_body,
        "10,000 files, 12 anonymous reads at once": _attack_large_repo,
    }
    growth = {}
    for name, attack in attacks.items():
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # restart the peak (VmHWM) from the current RSS
        attack(port)
        growth[name] = (status_kb(pid, "VmHWM") - idle) / 1024
    after = (status_kb(pid, "VmRSS") - idle) / 1024
    print(f"\nserver memory, idle {idle / 1024:.1f} MiB; peak growth per attack (MiB): ")
    for name, mib in {**growth, "RSS at the end": after}.items():
        print(f"  {name}: {mib:+.1f}")
    assert all(mib < 64 for mib in growth.values()) and after < 64, growth


# ---- names -----------------------------------------------------------------------------------------------
BAD_PATHS = [
    "a/../../b",
    "/abs",
    "a//b",
    "a\\b",
    "\ud800.txt",  # a lone surrogate
    "a/\uff0e\uff0e/x",  # fullwidth '..'
    "a/\u2025/x",  # two dot leader: '..' after NFKC
    "x/.Git/hooks/post-checkout",
    ".git./config",
    ".g\u200cit/config",
    "a" * 256,  # a name over 255 bytes: "File name too long" in the client's cache
    "d/" * 512 + "f.txt",  # a path over 1,024 bytes
    "tab\there",
]
GOOD_PATHS = ["x..y.txt", "dir.git/a", "a.git", ".gitattributes", "caf\u00e9/\u540d\u524d.txt", "a" * 255]
GOOD_PATHS += ["d/" * 400 + "f.txt"]


def test_file_names_follow_the_hubs_rules(hub):
    make_repo(hub)
    accepted = []
    for path in BAD_PATHS:
        line = json.dumps(file_line(path)).encode()  # ensure_ascii: a surrogate travels as \ud800
        status, body = commit(hub, "testuser/r", line)
        if status != 400 or "Invalid file path" not in body.get("error", ""):
            accepted.append((path[:40], status))
    assert not accepted
    assert commit(hub, "testuser/r", *(file_line(p) for p in GOOD_PATHS))[0] == 200
    files = api(hub, "GET", "/api/models/testuser/r")[1]["siblings"]
    assert {f["rfilename"] for f in files} == set(GOOD_PATHS)


def test_repo_ids_end_where_they_seem_to(hub):
    for name in ("nl\n", "a--b", "x.GIT", "\u0440ub"):
        status, body = api(hub, "POST", "/api/repos/create", {"name": name, "organization": "testuser"})
        assert status == 400 and body["error"].startswith("Invalid repo id"), (name, status)
    assert api(hub, "GET", "/api/models/testuser/r%0A")[0] == 400
    for namespace, name in (("../..", "etc"), ("a", "..")):
        assert api(hub, "POST", "/api/repos/create", {"name": name, "organization": namespace})[0] == 400


def test_repo_ids_are_case_insensitive_and_keep_their_case(hub):
    make_repo(hub, "Pub")
    status, body = api(hub, "POST", "/api/repos/create", {"name": "pub", "organization": "TESTUSER"})
    assert status == 409 and body["url"] == f"{hub.url}/testuser/Pub"
    assert commit(hub, "TestUser/PUB", file_line("a.txt", b"via another case"))[0] == 200
    status, info = api(hub, "GET", "/api/models/testuser/pub", auth=False)
    assert (status, info["id"]) == (200, "testuser/Pub") and "a.txt" in str(info["siblings"])
    assert api(hub, "GET", "/TESTUSER/pUb/resolve/main/a.txt", auth=False) == (200, b"via another case")
    assert api(hub, "DELETE", "/api/repos/delete", {"name": "PUB", "organization": "testuser"})[0] == 200
    assert api(hub, "GET", "/api/models/testuser/Pub")[0] == 404


# ---- private repos and namespaces -----------------------------------------------------------------------------
def _calls_made_by_the_server(hub, request: bytes) -> tuple[int, list[str], bytes]:
    """Every call the server's own code makes, in order, while it answers ``request`` (a profile hook)."""
    calls: list[str] = []

    def profile(frame, event, arg):
        if event == "c_call" and frame.f_code.co_filename.startswith(HUB_SERVER):
            calls.append(getattr(arg, "__qualname__", repr(arg)))
        elif event == "call" and frame.f_back and frame.f_back.f_code.co_filename.startswith(HUB_SERVER):
            calls.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_qualname}")

    dispatch = hub.server._dispatch

    def traced(*args):  # in the worker thread that answers the request
        sys.setprofile(profile)
        try:
            return dispatch(*args)
        finally:
            sys.setprofile(None)

    hub.server._dispatch = traced
    try:
        status, headers, body = raw(hub, request)
    finally:
        del hub.server._dispatch
    return status, calls, json.dumps(sorted(headers.items())).encode() + body


def test_a_private_repo_answers_through_the_same_code_path_as_a_missing_one(hub):
    make_repo(hub, "priv", private=True)
    for template in ("GET /api/models/testuser/{}", "HEAD /testuser/{}/resolve/main/x.txt"):
        for auth in ("", WRONG_TOKEN):
            answers = []
            for name in ("priv", "none"):  # the same length: the answers may differ in nothing else
                request = f"{template.format(name)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n"
                answers.append(_calls_made_by_the_server(hub, request.encode()))
            (s1, calls1, answer1), (s2, calls2, answer2) = answers
            assert s1 == s2 == 404 and calls1 == calls2 and len(calls1) > 20
            assert answer1.replace(b"/priv", b"/none") == answer2
    assert api(hub, "GET", "/api/models/testuser/priv")[1]["private"] is True  # with the token: found


def test_each_token_writes_only_in_its_own_namespaces(tmp_path):
    alice, bob = "hf_alice_token_1", "hf_bob_token_2"
    accounts = [Account("alice", alice, orgs=("team",)), Account("bob", bob)]
    with BackgroundHub(tmp_path / "d", None, accounts=accounts) as hub:
        create, delete = "/api/repos/create", "/api/repos/delete"
        assert api(hub, "POST", create, {"name": "a"}, token=alice)[1]["url"].endswith("/alice/a")
        assert api(hub, "POST", create, {"name": "t", "organization": "Team"}, token=alice)[0] == 200
        assert api(hub, "POST", create, {"name": "b", "organization": "bob"}, token=alice)[0] == 403
        assert api(hub, "POST", create, {"name": "b", "private": True}, token=bob)[0] == 200
        assert commit(hub, "bob/b", file_line("x.txt"), token=alice)[0] == 404  # private: not even seen
        assert commit(hub, "team/t", file_line("x.txt"), token=bob)[0] == 403  # public: seen, not writable
        assert api(hub, "DELETE", delete, {"name": "a", "organization": "alice"}, token=bob)[0] == 403
        assert api(hub, "GET", "/api/models/bob/b", token=bob)[0] == 200
        assert api(hub, "POST", create, {"name": "z"}, token="hf_nobody")[0] == 401
        me = api(hub, "GET", "/api/whoami-v2", token=alice)[1]
        assert me["name"] == "alice" and [o["name"] for o in me["orgs"]] == ["team"]


# ---- the streamed commit reader, against json + base64 ------------------------------------------------------
def _file_json(content_b64: str, content_first: bool) -> bytes:
    path = '"path": "big.bin", "encoding": "base64"'
    inner = f'"content": "{content_b64}", {path}' if content_first else f'{path}, "content": "{content_b64}"'
    return ('{"key": "file", "value": {' + inner + "}}").encode()


def _pieces(data: bytes, size: int):
    return (data[i : i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("piece_size", [1, 7, 1 << 20])
def test_long_commit_lines_stream_their_content_exactly(tmp_path, piece_size):
    """A line over ``max_line`` is scanned, not parsed: its content is what json + base64 give, escapes included."""
    storage = Storage(tmp_path)
    content = os.urandom(60_000)
    b64 = base64.b64encode(content).decode()
    escaped = f"\\u{ord(b64[0]):04x}" + b64[1:].replace("/", "\\/")  # JSON may escape any of these
    small = json.dumps(file_line("small.txt", b"tiny")).encode()
    lines = [json.dumps(COMMIT_HEADER).encode(), _file_json(escaped, True), small, _file_json(b64, False)]
    out = list(commit_lines(_pieces(b"\n".join(lines) + b"\n", piece_size), 16 << 10, storage))
    assert [text for text, _ in out[::2]] == lines[::2]  # short lines pass through as they are
    for number, line in ((2, out[1]), (4, out[3])):
        parsed = parse_commit_line(line, number, storage)
        assert isinstance(parsed, AddFile) and parsed.entry.path == "big.bin" and parsed.entry.size == 60_000
        assert storage.blob_path(parsed.entry.sha256).read_bytes() == content
    assert list((tmp_path / "tmp").iterdir()) == []


LONG_LINE_ERRORS = [
    (_file_json("QUFB" * 20_000, True)[:-2] + b', "other": "' + b"QUFB" * 20_000 + b'"}}', 413, "only one"),
    (json.dumps({"key": "header", "value": {"summary": "QUFB" * 20_000}}).encode(), 400, "only a file's"),
    (_file_json("!!!!" * 20_000, True), 400, "not valid base64"),
    (_file_json("QUFB" * 20_000 + "QQ==" + "\n" + "QUFB", True), 400, "after its '=' padding"),
    (_file_json("QUFB" * 20_000 + "QQ", True), 400, "multiple of 4"),
    (_file_json("QUFB" * 20_000, True)[:-30], 400, "ends inside a string"),
    (b'{"key": "file", "value": {"path": "' + b"p" * 20_000 + b'"}}', 413, "without counting"),
]


@pytest.mark.parametrize("line,status,words", LONG_LINE_ERRORS, ids=[w for *_, w in LONG_LINE_ERRORS])
def test_long_commit_lines_outside_the_rules_are_refused_and_leave_nothing(tmp_path, line, status, words):
    storage = Storage(tmp_path)
    with pytest.raises(HubError) as refused:
        # A newline here only marks where the pieces are cut (after the padding, in that case).
        pieces = line.split(b"\n") if b"\n" in line else _pieces(line, 4096)
        for raw_line in commit_lines(iter(pieces), 16 << 10, storage):
            parse_commit_line(raw_line, 1, storage)
    assert refused.value.status == status and words in refused.value.message, refused.value.message
    assert list((tmp_path / "tmp").iterdir()) == []


# ---- the per-revision index ------------------------------------------------------------------------------------
ENTRY = {"sha256": "0" * 64, "size": 1, "git_oid": "0" * 40, "lfs": False}


def _listing_oracle(paths: list[str], folder: str, recursive: bool) -> list[tuple[str, str]]:
    """The listing as the server built it before it had an index: every file, every folder once."""
    out, prefix = [], f"{folder}/" if folder else ""
    for p in sorted(q for q in paths if q.startswith(prefix)):
        parts = p[len(prefix) :].split("/")
        shown = len(parts) if recursive else min(2, len(parts))  # a folder's own level only, unless recursive
        out += [("directory", prefix + "/".join(parts[:i])) for i in range(1, shown)]
        out += [("file", p)] if recursive or len(parts) == 1 else []
    return list(dict.fromkeys(out))


def test_index_pages_add_up_to_the_whole_listing():
    rng = random.Random(0)
    names = ["a", "a.txt", "a-b", "a0", "b", "c.d", "z"]
    paths = {
        "/".join(rng.choice(names) + str(rng.randrange(3)) for _ in range(rng.randrange(1, 5)))
        for _ in range(400)
    }
    paths = {p for p in paths if not any(q.startswith(p + "/") for q in paths)}  # never a file and a folder
    index = RevisionIndex({"id": "c"}, dict.fromkeys(paths, ENTRY))
    folders = ["", *sorted({p.rsplit("/", 1)[0] for p in paths if "/" in p})[:15]]
    for folder, recursive, limit in itertools.product(folders, (True, False), (1, 7, 1000)):
        listed, after = [], None
        while True:
            items, after = index.page(folder, recursive, after, limit)
            listed += [("directory", i) if isinstance(i, str) else ("file", i.path) for i in items]
            if after is None:
                break
        assert listed == _listing_oracle(list(paths), folder, recursive), (folder, limit)
