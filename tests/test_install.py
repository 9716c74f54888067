"""A plain install holds every module under the one ``briskbert`` namespace and works from the repository
root, where ``python -m`` puts the current directory first on ``sys.path``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_architecture import module_files

from briskbert.processes import briskbert_argv

ROOT = Path(__file__).resolve().parents[1]


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


def test_the_install_holds_every_module_and_nothing_outside_the_briskbert_namespace(installed):
    """`pip install .` puts no generic top-level package (training, modeling, ...) in site-packages."""
    target = Path(installed["PYTHONPATH"])
    assert {p.name for p in target.iterdir() if not p.name.endswith(".dist-info")} == {"briskbert", "bin"}
    for module, source in module_files().items():
        path = module.replace(".", "/") + ("/__init__.py" if source.name == "__init__.py" else ".py")
        assert (target / path).is_file(), f"{source.relative_to(ROOT)} is not installed: list its package"
    for data_file in ("briskbert/hub_cards/templates/model_card.md", "briskbert/data/wikitext2_excerpt.txt"):
        assert (target / data_file).is_file(), data_file
    (entry_points,) = target.glob("briskbert-*.dist-info/entry_points.txt")
    assert "briskbert = briskbert.cli:main" in entry_points.read_text()


def _run_in_root(argv: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # builds the wheel and installs it, then runs `python -m briskbert` from the clone
def test_the_checkout_root_never_shadows_the_installed_package(installed):
    code = (
        "import briskbert, briskbert.tokenization, briskbert.training.engine.loop; print(briskbert.__file__)"
    )
    proc = _run_in_root([sys.executable, "-c", code], installed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip()).is_relative_to(Path(installed["PYTHONPATH"])), proc.stdout
    # The way an ablation starts its runs: this interpreter, `-m briskbert`, the current directory = the clone.
    proc = _run_in_root(briskbert_argv("train-tokenizer", "--help"), installed)
    assert proc.returncode == 0 and "usage: briskbert train-tokenizer" in proc.stdout, proc.stderr[-2000:]
