"""Helpers for the tests that talk to the local Hub over real HTTP; clients read ``HF_ENDPOINT`` at import
time, so client code runs in subprocesses pointed at the server, each with a fresh ``HF_HOME``."""

from __future__ import annotations

import base64
import contextlib
import errno
import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from briskbert.hub_server import BackgroundHub, ServerLimits

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_localtesttoken_9c1f2e7a5b3d"
USER = "testuser"
AUTH = f"Authorization: Bearer {TOKEN}\r\n"


# ---- raw HTTP: nothing between the test and the server's bytes ---------------------------------------------
def read_response(sock: socket.socket, head_request: bool = False) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body) of one answer."""
    with sock.makefile("rb") as reader:
        status, headers = int(reader.readline().split()[1]), {}
        while line := reader.readline().strip():
            name, value = line.decode("latin-1").split(":", 1)
            headers[name.strip().lower()] = value.strip()
        return status, headers, reader.read(0 if head_request else int(headers.get("content-length", 0)))


def raw(hub_or_port, request: bytes, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port_of(hub_or_port)), timeout=timeout) as sock:
        sock.sendall(request)
        return read_response(sock, head_request=request.startswith(b"HEAD "))


def http_request(
    method: str, path: str, body: bytes = b"", headers: str = AUTH, content_type="application/json"
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Type: {content_type}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


def port_of(hub_or_port) -> int:
    return hub_or_port if isinstance(hub_or_port, int) else int(hub_or_port.url.rsplit(":", 1)[1])


def api(hub_or_port, method: str, path: str, body=None, auth: bool = True, token: str = TOKEN):
    """(status, parsed JSON or bytes) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(hub_or_port), timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if auth else {}
    payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    status, data = response.status, response.read()
    conn.close()
    return status, (json.loads(data) if data.startswith((b"{", b"[")) else data)


def ndjson(*lines) -> bytes:
    return b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)


def file_line(path, content=b"x") -> dict:
    value = {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}
    return {"key": "file", "value": value}


COMMIT_HEADER = {"key": "header", "value": {"summary": "x"}}


class FullDisk:
    """Every ``fsync`` fails with ENOSPC while ``full`` is set (the last moment a write can fail)."""

    def __init__(self, monkeypatch):
        self.full, real = False, os.fsync

        def fsync(fd):
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


# ---- a server in its own process, for memory measurements ----------------------------------------------------
def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in kB (VmRSS, VmHWM, Threads: a count)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout: float = 5) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def wait_until_listening(port: int) -> None:
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)


@pytest.fixture
def server_process(tmp_path):
    """``scripts/local_hub.py`` in a subprocess (TOKEN, 1 s read timeout): (process, port)."""
    port = free_port()
    command = [sys.executable, str(ROOT / "scripts" / "local_hub.py"), "--port", str(port), "--token", TOKEN]
    command += ["--data_dir", str(tmp_path / "d"), "--read_timeout_s", "1"]
    with open(tmp_path / "server.out", "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_listening(port)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(10)


def client_env(url: str, home: Path, *, xet: bool = True, **extra) -> dict:
    hidden = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(hidden)}
    env.update(
        HF_ENDPOINT=url, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1"
    )
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", TOKENIZERS_PARALLELISM="false")
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore::DeprecationWarning", HF_TOKEN=TOKEN)
    if not xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_client(code: str, env: dict, cwd: Path):
    """Run ``code`` in a fresh interpreter; the last stdout line that parses as JSON is returned as ``.result``."""
    command = [sys.executable, "-c", textwrap.dedent(code)]
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(
            f"client failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    proc.result = None
    for line in reversed(proc.stdout.splitlines()):
        try:
            proc.result = json.loads(line)
            break
        except ValueError:
            continue
    return proc


@pytest.fixture
def hub(tmp_path):
    """A server in regular upload mode (works with Xet-enabled clients)."""
    with BackgroundHub(tmp_path / "hub-data", TOKEN, user=USER) as h:
        yield h


@pytest.fixture
def lfs_hub(tmp_path):
    """A server in LFS upload mode (clients run with HF_HUB_DISABLE_XET=1)."""
    with BackgroundHub(tmp_path / "hub-data-lfs", TOKEN, user=USER, upload_mode="lfs") as h:
        yield h


@pytest.fixture
def quick_hub(tmp_path):
    """A server that closes idle connections after 0.5 s and serves at most 8 at once."""
    limits = ServerLimits(read_timeout_s=0.5, max_connections=8)
    with BackgroundHub(tmp_path / "quick", TOKEN, limits=limits) as h:
        yield h


def make_repo(hub, name: str = "r", **extra) -> str:
    """Create ``testuser/name`` over HTTP; its first commit id."""
    status, body = api(hub, "POST", "/api/repos/create", {"name": name, "organization": USER, **extra})
    assert status == 200, body
    return head_of(hub, f"{USER}/{name}")


def head_of(hub, repo: str = f"{USER}/r", revision: str = "main") -> str:
    return api(hub, "GET", f"/api/models/{repo}/revision/{revision}")[1]["sha"]


def commit(hub, repo: str, *lines, token: str = TOKEN, branch: str = "main"):
    """(status, answer) of a commit of ndjson ``lines`` to a branch of ``repo``."""
    return api(hub, "POST", f"/api/models/{repo}/commit/{branch}", ndjson(COMMIT_HEADER, *lines), token=token)


def make_briskbert(folder: Path, *, extra_files: bool = True, seed: int = 0) -> Path:
    """A tiny saved BriskBert classifier folder (model + tokenizer + facts), plus the clutter a training run leaves."""
    import torch

    from briskbert import modeling
    from briskbert.tokenization import train_wordpiece_tokenizer

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    files = [str(ROOT / "data" / "wikitext2_excerpt.txt")]
    tok = train_wordpiece_tokenizer(
        files, vocab_size=300, min_frequency=1, show_progress=False, model_max_length=64
    )
    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    labels = dict(id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
    config = modeling.BriskBertConfig.from_preset(
        "bert-tiny", vocab_size=len(tok), max_position_embeddings=64, **sizes, **labels
    )
    modeling.BriskBertForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    facts = dict(schema_version=2, task="text-classification", datasets=["sst2_train_excerpt.tsv"])
    facts.update(eval_dataset="sst2", metrics={"eval_accuracy": 0.75, "eval_loss": 0.5}, train_steps=10)
    facts.update(license="apache-2.0", language="en")
    (folder / "training_facts.json").write_text(json.dumps(facts))
    if extra_files:
        (folder / "optimizer.pt").write_bytes(b"\0" * 64)
        (folder / "checkpoint-10").mkdir(exist_ok=True)
        (folder / "checkpoint-10" / "model.safetensors").write_bytes(b"\0" * 16)
        (folder / "logs").mkdir(exist_ok=True)
        (folder / "logs" / "train.log").write_text(f"step 1 loss 0.7 token={TOKEN}\n")
        (folder / ".env").write_text(f"HF_TOKEN={TOKEN}\n")
    return folder
