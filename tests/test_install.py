"""A plain (non-editable) install, used from the repository root as the README's tour does.

``python -m`` and ``python -c`` put the current directory first on ``sys.path``; a checkout whose root held a
``briskbert`` folder with only part of the package would shadow the installed one there, and every
``python -m briskbert ...`` typed in the clone (and every briskbert subprocess, such as an ablation's runs)
would fail with ``No module named 'briskbert.tokenization'``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from briskbert.processes import briskbert_argv

ROOT = Path(__file__).resolve().parents[1]
EXCERPT = ROOT / "data" / "wikitext2_excerpt.txt"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The project built as a wheel and installed into its own folder, which comes first on ``sys.path``."""
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--target", str(target), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "would be ignored" not in proc.stderr, proc.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    # The editable install's finder comes after the path entries, so the built copy wins.
    return {**env, "PYTHONPATH": str(target), "TOKENIZERS_PARALLELISM": "false"}


def _run_in_root(argv: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # ~70 s: builds the wheel, installs it, and trains a tokenizer through `python -m briskbert`
def test_the_checkout_root_never_shadows_the_installed_package(installed, tmp_path):
    code = (
        "import briskbert, briskbert.tokenization, briskbert.training.engine.loop; print(briskbert.__file__)"
    )
    proc = _run_in_root([sys.executable, "-c", code], installed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip()).is_relative_to(Path(installed["PYTHONPATH"])), proc.stdout
    # The way an ablation starts its runs: this interpreter, `-m briskbert`, the current directory = the clone.
    argv = briskbert_argv(
        "train-tokenizer", "--files", str(EXCERPT), "--vocab_size", "300", "--round_to_multiple_of", "1"
    )
    proc = _run_in_root([*argv, "--output_dir", str(tmp_path / "tok")], installed)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    vocab = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 300
