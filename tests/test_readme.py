"""The README's command blocks run as written, in order, from a fresh directory that has the repository's
``data/`` excerpts, with step counts and sample sizes shrunk so the walk-through takes minutes. The blocks are
the README's own text: when the README drifts from the code, this fails."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Blocks the suite does not execute, and why: installing (the test already runs in the installed project) and
# the two top-level commands (CI runs the tests; tests/test_quickstart.py runs the quickstart at its smoke size).
NOT_RUN = ("pip install", "bash scripts/test.sh", "bash scripts/quickstart.sh", "git clone")

# Flag values replaced to keep the walk-through small; everything else runs as written.
TINY = {
    "--max_train_steps": "3",
    "--num_train_epochs": "1",
    "--checkpointing_steps": "2",
    "--vocab_size": "600",
    "--max_train_samples": "48",
    "--max_eval_samples": "24",
    "--seeds": "0",
    "--per_device_train_batch_size": "8",
    "--rerank_top_k": "5",
}


def readme_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(lang, body) for lang, body in re.findall(r"```(bash|python)\n(.*?)```", text, re.S)]


def shrink(block: str) -> str:
    for flag, value in TINY.items():
        block = re.sub(rf"({re.escape(flag)})[ =]\S+", rf"\g<1> {value}", block)
    return block


def test_readme_has_runnable_blocks():
    blocks = readme_blocks()
    assert sum(lang == "bash" for lang, _ in blocks) >= 5 and any(lang == "python" for lang, _ in blocks)


@pytest.mark.slow  # a few minutes: every example of the README, in order, at tiny sizes; it keeps the README true
def test_readme_runs_as_written(tmp_path):
    (tmp_path / "data").symlink_to(ROOT / "data")
    # Nothing may reach the internet: the Hub endpoint is a closed local port unless a block starts its own.
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "TOKENIZERS_PARALLELISM": "false"}
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "LOCAL_HUB_TOKEN"):
        env.pop(name, None)
    for lang, block in readme_blocks():
        if any(marker in block for marker in NOT_RUN):
            continue
        command = (
            ["bash", "-euo", "pipefail", "-c", shrink(block)]
            if lang == "bash"
            else [sys.executable, "-c", block]
        )
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"README block failed:\n{block}\n--- stderr ---\n{proc.stderr[-4000:]}"
