"""The local Hub under hostile or broken input, over real sockets on 127.0.0.1: header injection, bodies
that lie about their length, slow and half-sent requests, malformed JSON and ndjson, commits racing a
repo deletion, ref names that would shadow commits, and the server's memory while it refuses them.

Every loop is bounded and every test takes a few seconds. The figures the tests print (``-s``) are the
tried / handled counts and the memory measurements quoted in the docs."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.parse

import pytest
from hub_fixtures import (
    AUTH,
    COMMIT_HEADER,
    TOKEN,
    api,
    file_line,
    http_request,
    ndjson,
    port_of,
    raw,
    read_response,
    socket_errors_ignored,
    status_kb,
)

from briskbert.hub_server import BackgroundHub, DataDirInUse, ServerLimits

HEAD = "/api/models/testuser/r/revision/main"
HEADER = COMMIT_HEADER


def make_repo(hub, name: str = "r") -> str:
    assert api(hub, "POST", "/api/repos/create", {"name": name, "organization": "testuser"})[0] == 200
    return api(hub, "GET", f"/api/models/testuser/{name}/revision/main")[1]["sha"]


# ---- header injection ----------------------------------------------------------------------------------
INJECTIONS = [
    "/api/nothing%0d%0aX-Injected:%201",
    "/api/nothing%0aX-Injected:%201",
    "/api/nothing%00X-Injected:%201",
    "/api/models/testuser/a%0d%0aX-Injected:%201",
    "/api/models/testuser/r/revision/main%0d%0aX-Injected:%201",
    "/testuser/r/resolve/main/missing%0d%0aX-Injected:%201.txt",
    "/testuser/r/resolve/main/%E2%80%A8%0d%0aX-Injected:%201",
    "/api/models/testuser/r/tree/main/x%0d%0aX-Injected:%201",
    "/api/models/testuser/r/refs%0d%0a%0d%0a<html>",
]


def test_request_text_is_never_reflected_raw_into_headers(hub):
    make_repo(hub)
    handled = 0
    for path in INJECTIONS:
        for method in ("GET", "HEAD"):
            status, headers, _ = raw(port_of(hub), f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            names = [k.lower() for k, _ in headers]
            values = "".join(v for _, v in headers)
            assert 400 <= status < 500 and "x-injected" not in names and "<html>" not in names, (
                path,
                headers,
            )
            assert "\x00" not in values and all(32 <= ord(c) < 127 for c in values), (path, headers)
            handled += 1
    print(f"\nheader injection: {handled}/{2 * len(INJECTIONS)} requests answered 4xx with clean headers")


# ---- framing: lengths and timeouts ---------------------------------------------------------------------
BAD_LENGTHS = [
    "Content-Length: -1\r\n",
    "Content-Length: -100\r\n",
    "Content-Length: abc\r\n",
    "Content-Length: 1e3\r\n",
    "Content-Length: +20\r\n",
    "Content-Length: 0x20\r\n",
    "Content-Length: 20 20\r\n",
    "Content-Length: 99999999999999999999999\r\n",
    "Content-Length: 20\r\nContent-Length: 21\r\n",
    "Content-Length: 20\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: gzip\r\n",
]


def test_invalid_lengths_are_a_400_and_nothing_runs(hub):
    for i, length in enumerate(BAD_LENGTHS):
        body = json.dumps({"name": f"cl{i}", "organization": "testuser"}).encode()
        head = f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\n{AUTH}{length}\r\n"
        status, headers, reply = raw(port_of(hub), head.encode() + body)
        assert status == 400 and json.loads(reply)["error"], (length, status)
        assert not hub.server.storage.exists("model", f"testuser/cl{i}")
    print(f"\ninvalid lengths: {len(BAD_LENGTHS)}/{len(BAD_LENGTHS)} refused with 400, no repo created")


def test_unauthenticated_and_oversized_bodies_are_refused_from_the_headers(hub):
    started = time.monotonic()
    for path in (
        "/api/repos/create",
        "/api/models/testuser/r/commit/main",
        "/testuser/r.git/info/lfs/objects/batch",
    ):
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000000\r\n\r\n".encode()
        status, headers, _ = raw(port_of(hub), head)  # not one byte of the body is sent
        assert status == 401 and ("Connection", "close") in headers
    status, _, reply = raw(
        port_of(hub), f"POST /api/repos/create HTTP/1.1\r\n{AUTH}Content-Length: 4000000000\r\n\r\n".encode()
    )
    assert status == 413 and "limit" in json.loads(reply)["error"]
    assert time.monotonic() - started < 5  # answered without waiting for 4 GB


@pytest.fixture
def quick_hub(tmp_path):
    limits = ServerLimits(read_timeout_s=0.5, max_connections=8)
    with BackgroundHub(tmp_path / "quick", TOKEN, limits=limits) as hub:
        yield hub


def _connections_closed_within(hub, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while hub.server.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    return hub.server.open_connections == 0


def test_short_bodies_and_idle_connections_time_out(quick_hub):
    port = port_of(quick_hub)
    started = time.monotonic()
    head = f"POST /api/repos/create HTTP/1.1\r\n{AUTH}Content-Length: 100\r\n\r\n".encode()
    status, _, reply = raw(port, head + b'{"name": "sh')  # 12 of the 100 bytes, then silence
    assert status == 408 and "No data" in json.loads(reply)["error"]
    assert time.monotonic() - started < 3 and not quick_hub.server.storage.exists("model", "testuser/sh")
    assert _connections_closed_within(quick_hub, 5)
    # 40 half-sent requests: connections served are capped at max_connections and all closed after the timeout
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
    for sock in socks:
        with socket_errors_ignored():
            sock.sendall(b"POST /api/repos/create HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
    peak, until = 0, time.monotonic() + 0.3  # within the 0.5 s read timeout of the first ones
    while time.monotonic() < until:
        peak = max(peak, quick_hub.server.open_connections)
    assert 0 < peak <= 8, peak
    assert _connections_closed_within(quick_hub, 5), quick_hub.server.open_connections
    assert api(quick_hub, "GET", "/api/whoami-v2")[0] == 200  # and the server still answers
    for sock in socks:
        sock.close()
    print(f"\n40 half-sent requests: {peak} served at once, 0 after the 0.5 s timeout")


# ---- malformed payloads ----------------------------------------------------------------------------------
def _lfs(objects, operation="upload"):
    return {"operation": operation, "objects": objects}


C, D, P = "/api/repos/create", "/api/repos/delete", "/api/models/testuser/r/preupload/main"
M, B, T = (
    "/api/models/testuser/r/commit/main",
    "/api/models/testuser/r/branch/b1",
    "/api/models/testuser/r/tag/main",
)
S, L, Y = "/api/models/testuser/r/settings", "/testuser/r.git/info/lfs/objects/batch", "/api/validate-yaml"
DEEP = b"[" * 200_000 + b"]" * 200_000
MALFORMED = [
    ("POST", C, b"[]"),
    ("POST", C, b'"x"'),
    ("POST", C, b"42"),
    ("POST", C, b"null"),
    ("POST", C, b"{"),
    ("POST", C, b'{"name": 5}'),
    ("POST", C, b'{"organization": "testuser"}'),
    ("POST", C, b'{"name": "x", "organization": ["a"]}'),
    ("POST", C, b'{"name": "x", "type": "nope"}'),
    ("POST", C, b'{"name": "x", "visibility": 3}'),
    ("POST", C, b'{"name": "x", "private": "yes"}'),
    ("POST", C, b'{"name": "../../x"}'),
    ("POST", C, DEEP),
    ("POST", C, b'{"name": "\xff\xfe"}'),
    ("DELETE", D, b"[]"),
    ("DELETE", D, b'{"name": 1}'),
    ("POST", P, b"[]"),
    ("POST", P, b'{"files": {}}'),
    ("POST", P, b'{"files": [1]}'),
    ("POST", P, b'{"files": [{}]}'),
    ("POST", P, b'{"files": [{"path": 5}]}'),
    ("POST", P, b'{"files": [{"path": "a", "sample": "!!!not base64"}]}'),
    ("POST", P, b'{"files": [{"path": "a", "size": -1}]}'),
    ("POST", P, b'{"files": [{"path": "a", "size": "big"}]}'),
    ("POST", L, json.dumps(_lfs([{"oid": 5, "size": 1}])).encode()),
    ("POST", L, json.dumps(_lfs([{"oid": "z" * 64, "size": 1}])).encode()),
    ("POST", L, json.dumps(_lfs([{"oid": "a" * 64, "size": True}])).encode()),
    ("POST", L, json.dumps(_lfs("all")).encode()),
    ("POST", L, json.dumps(_lfs([], "download")).encode()),
    ("POST", B, b"[]"),
    ("POST", B, b'{"startingPoint": 7}'),
    ("POST", T, b'{"tag": 5}'),
    ("POST", T, b"{}"),
    ("POST", T, b'["v1"]'),
    ("PUT", S, b'{"private": "no"}'),
    ("PUT", S, b"[]"),
    ("POST", Y, b'{"content": 5}'),
    ("POST", Y, b"[]"),
    ("POST", M, ndjson(b"[]")),
    ("POST", M, ndjson({"key": "header", "value": []})),
    ("POST", M, ndjson(b'"just a string"')),
    ("POST", M, ndjson({"value": {}})),
    ("POST", M, ndjson({"key": "header"})),
    ("POST", M, ndjson(HEADER, {"key": "nope", "value": {}})),
    (
        "POST",
        M,
        ndjson(HEADER, {"key": "file", "value": {"path": "a", "content": "!!!", "encoding": "base64"}}),
    ),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"path": "a", "content": 5}})),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"content": "eA=="}})),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"path": 5, "content": "eA=="}})),
    ("POST", M, ndjson(HEADER, {"key": "file", "value": {"path": "a", "content": "x", "encoding": "utf-8"}})),
    (
        "POST",
        M,
        ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a", "oid": "nothex", "algo": "sha256"}}),
    ),
    ("POST", M, ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a", "oid": "a" * 64, "size": "x"}})),
    ("POST", M, ndjson(HEADER, {"key": "lfsFile", "value": {"path": "a", "oid": "a" * 64, "size": 3}})),
    ("POST", M, ndjson(HEADER, {"key": "deletedFile", "value": {"path": 3}})),
    ("POST", M, ndjson(HEADER, {"key": "deletedFolder", "value": {}})),
    ("POST", M, ndjson(HEADER, {"key": "deletedFile", "value": {"path": "not-there.txt"}})),
    ("POST", M, ndjson(HEADER, b"{")),
    ("POST", M, ndjson(file_line("a.txt"))),
    ("POST", M, ndjson(HEADER, HEADER)),
    ("POST", M, ndjson({"key": "header", "value": {"summary": "x", "parentCommit": "main"}})),
    ("POST", M, ndjson({"key": "header", "value": {"summary": 5}})),
    ("POST", M, ndjson(HEADER, DEEP)),
    ("POST", M, ndjson(HEADER, b'{"key": "file", "value": {"path": "\xff"}}')),
    ("POST", M, b""),
    ("POST", M, ndjson(HEADER, file_line("../escape.txt"))),
]


def test_malformed_payloads_are_a_4xx_with_a_message_and_change_nothing(hub):
    head = make_repo(hub)
    handled, failures = 0, []
    for method, path, body in MALFORMED:
        content_type = "application/x-ndjson" if path == M else "application/json"
        status, headers, reply = raw(
            port_of(hub), http_request(method, path, body, content_type=content_type)
        )
        message = dict(headers).get("X-Error-Message", "")
        if (
            400 <= status < 500
            and message
            and json.loads(reply).get("error" if status != 400 or path != Y else "errors")
        ):
            handled += 1
        else:
            failures.append((method, path, body[:80], status, reply[:200]))
    print(f"\nmalformed JSON/ndjson payloads: {handled}/{len(MALFORMED)} answered 4xx with a message")
    assert not failures, failures
    assert api(hub, "GET", HEAD)[1]["sha"] == head
    assert sorted(p.name for p in (hub.server.storage.root / "repos" / "models" / "testuser").iterdir()) == [
        "r"
    ]


def _race_once(hub, round_: int, statuses: list[int]) -> None:
    make_repo(hub, "race")
    barrier = threading.Barrier(7)

    def commit(i):
        barrier.wait()
        body = ndjson(HEADER, file_line(f"f{round_}-{i}.txt", os.urandom(64)))
        statuses.append(api(hub, "POST", "/api/models/testuser/race/commit/main", body)[0])

    def delete():
        barrier.wait()
        statuses.append(
            api(hub, "DELETE", "/api/repos/delete", {"name": "race", "organization": "testuser"})[0]
        )

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(6)] + [
        threading.Thread(target=delete)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


def test_commits_racing_a_repo_deletion_get_4xx_never_500(hub):
    statuses: list[int] = []
    for round_ in range(8):
        _race_once(hub, round_, statuses)
    print(
        f"\ncommits racing a deletion: {sum(s < 500 for s in statuses)}/{len(statuses)} answered below 500 "
        f"({statuses.count(200)} succeeded, {statuses.count(404)} RepoNotFound)"
    )
    assert len(statuses) == 56 and all(s < 500 for s in statuses), statuses


# ---- refs ----------------------------------------------------------------------------------------------
BAD_REF_NAMES = [
    "a" * 40,
    "0123456789abcdef0123456789ABCDEF01234567",
    ".",
    "..",
    "a..b",
    "a/",
    "/a",
    "a//b",
    ".hidden",
    "a/.b",
    "x.lock",
    "a b",
    "a~1",
    "a^",
    "a:b",
    "a?",
    "a*",
    "a[",
    "a\\b",
    "@",
    "a@{1}",
    "a.",
    "refs/heads/x",
    "bad\x00name",
    "bad\x7fname",
    "",
]


def test_ref_names_that_could_shadow_commits_or_break_git_rules_are_refused(hub):
    head = make_repo(hub)
    refused = 0
    for name in BAD_REF_NAMES:
        branch = api(hub, "POST", f"/api/models/testuser/r/branch/{urllib.parse.quote(name, safe='')}", {})
        tag = api(hub, "POST", "/api/models/testuser/r/tag/main", {"tag": name})
        refused += branch[0] in (400, 404) and tag[0] == 400
    for name in ("v1.0", "release/2024-01", "dev_1", "feature-x"):
        assert (
            api(hub, "POST", f"/api/models/testuser/r/branch/{urllib.parse.quote(name, safe='')}", {})[0]
            == 200
        )
        assert api(hub, "POST", "/api/models/testuser/r/tag/main", {"tag": f"t-{name}"})[0] == 200
    print(f"\nref names: {refused}/{len(BAD_REF_NAMES)} invalid names refused as branch and as tag")
    assert refused == len(BAD_REF_NAMES)
    refs = hub.server.storage.refs("model", "testuser/r")
    assert not set(refs["branches"]) & set(BAD_REF_NAMES) and not set(refs["tags"]) & set(BAD_REF_NAMES)
    status, _, _ = raw(
        port_of(hub), f"HEAD /testuser/r/resolve/{head}/.gitattributes HTTP/1.1\r\n\r\n".encode()
    )
    assert status == 200


# ---- start-up, pull requests, auth matrix ----------------------------------------------------------------
def test_tmp_is_cleaned_at_start_up_and_a_data_dir_has_one_server(tmp_path):
    data = tmp_path / "data"
    (data / "tmp" / "deleted-abc").mkdir(parents=True)
    (data / "tmp" / "tmpk3j2").write_bytes(b"half an upload")
    with BackgroundHub(data, TOKEN):
        assert list((data / "tmp").iterdir()) == []
        with pytest.raises(DataDirInUse):
            BackgroundHub(data, TOKEN)


def test_pull_requests_are_refused_clearly_and_not_retried(hub):
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    make_repo(hub)
    client = HfApi(endpoint=hub.url, token=TOKEN)
    before = len(hub.server.request_log)
    with pytest.raises(HfHubHTTPError, match="Pull requests and discussions are not supported"):
        client.create_commit(
            "testuser/r", [CommitOperationAdd("a.txt", b"a")], commit_message="pr", create_pr=True
        )
    # The server logs a request after answering it, so wait for the refusal's line (and a retry's, if any).
    deadline = time.monotonic() + 5
    while (
        not any(status == 400 for _, _, status in list(hub.server.request_log)[before:])
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    time.sleep(0.3)
    calls = [status for _, path, status in list(hub.server.request_log)[before:] if "/revision/" not in path]
    assert calls == [400]  # one answer, no retry (make_repo's last request may be logged late: left out)


WRITE_ROUTES = [
    ("POST", "/api/repos/create"),
    ("DELETE", "/api/repos/delete"),
    ("PUT", "/api/models/testuser/r/settings"),
    ("POST", "/api/models/testuser/r/preupload/main"),
    ("POST", "/api/models/testuser/r/commit/main"),
    ("POST", "/api/models/testuser/r/branch/b"),
    ("DELETE", "/api/models/testuser/r/branch/b"),
    ("POST", "/api/models/testuser/r/tag/main"),
    ("DELETE", "/api/models/testuser/r/tag/v1"),
    ("GET", "/api/models/testuser/r/xet-write-token/main"),
    ("POST", "/api/models/testuser/r/discussions"),
    ("POST", "/testuser/r.git/info/lfs/objects/batch"),
    ("POST", f"/lfs-verify/model/testuser/r/{'a' * 64}?size=1&sig=x"),
    ("GET", "/api/whoami-v2"),
]


def test_auth_matrix_every_write_route_needs_the_token(hub):
    head = make_repo(hub)
    credentials = [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: Basic eDp5\r\n",
        f"Authorization: {TOKEN}\r\n",
    ]
    refused = 0
    for method, path in WRITE_ROUTES:
        for header in credentials:
            status, headers, _ = raw(port_of(hub), http_request(method, path, b"{}", headers=header))
            refused += status == 401 and dict(headers)["X-Error-Code"] == "Unauthorized"
    print(
        f"\nauth matrix: {refused}/{len(WRITE_ROUTES) * len(credentials)} unauthenticated writes refused with 401"
    )
    assert refused == len(WRITE_ROUTES) * len(credentials)
    assert api(hub, "GET", HEAD)[1]["sha"] == head


# ---- memory of a real server process ---------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/<pid>/status")
def test_server_memory_stays_bounded_under_hostile_bodies(server_process):
    pid, port = server_process
    raw(port, b"GET /api/whoami-v2 HTTP/1.1\r\n" + AUTH.encode() + b"\r\n")  # warm up
    baseline = status_kb(pid, "VmRSS")
    peak = baseline

    # 1. an unauthenticated 4 GB upload, sent as fast as the server takes it
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /api/repos/create HTTP/1.1\r\nContent-Length: 4000000000\r\n\r\n")
        sent, zeros = 0, bytes(1 << 20)
        with socket_errors_ignored():
            while sent < (64 << 20):
                sock.sendall(zeros)
                sent += len(zeros)
                peak = max(peak, status_kb(pid, "VmRSS"))
        status = read_response(sock)[0] if sent < (64 << 20) else None
    after_4gb = status_kb(pid, "VmRSS")

    # 2. twenty slow connections, each with half a request
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    for sock in slow:
        sock.sendall(
            b"POST /api/repos/create HTTP/1.1\r\n" + AUTH.encode() + b"Content-Length: 1000\r\n\r\n{"
        )
    time.sleep(0.3)
    threads_open = status_kb(pid, "Threads")
    rss_slow = status_kb(pid, "VmRSS")
    ok = raw(port, b"GET /api/whoami-v2 HTTP/1.1\r\n" + AUTH.encode() + b"\r\n")[0]
    time.sleep(1.5)
    threads_after = status_kb(pid, "Threads")
    for sock in slow:
        sock.close()
    print(
        f"\nserver RSS: baseline {baseline / 1024:.1f} MiB; peak while refusing an unauthenticated 4 GB body "
        f"({sent >> 20} MiB sent before it closed) {peak / 1024:.1f} MiB, after {after_4gb / 1024:.1f} MiB; "
        f"with 20 slow connections open {rss_slow / 1024:.1f} MiB ({threads_open} threads, {threads_after} "
        f"after the 1 s timeout)"
    )
    assert status in (401, None) and sent < (64 << 20)  # the server closed the connection early
    assert peak - baseline < 16 * 1024 and rss_slow - baseline < 16 * 1024
    assert ok == 200 and threads_after < threads_open
