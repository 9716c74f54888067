"""The ``briskbert`` command: every job is a subcommand, ``--help`` is fast, and the package installs under one
namespace."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from briskbert.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_help_lists_every_subcommand(tmp_path):
    proc = _run("-m", "briskbert", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    for name, command in COMMANDS.items():
        assert f"  {name}" in proc.stdout and command.summary[:40] in proc.stdout


def test_unknown_subcommand_is_one_line_and_exit_2(tmp_path):
    proc = _run("-m", "briskbert", "pretrian", cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        proc.stderr.count("\n") == 1
        and "unknown command 'pretrian'" in proc.stderr
        and "pretrain" in proc.stderr
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_subcommand_help_shows_flags_without_importing_torch(name, tmp_path):
    code = (
        "import sys\n"
        "from briskbert.cli import main\n"
        "try:\n"
        f"    main([{name!r}, '--help'])\n"
        "except SystemExit as stop:\n"
        "    assert stop.code in (0, None), stop.code\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    proc = _run("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"usage: briskbert {name}" in proc.stdout
    assert "TORCH False" in proc.stdout, f"`briskbert {name} --help` imported torch before parsing its flags"


def test_scripts_are_wrappers_over_the_subcommands():
    for name, command in COMMANDS.items():
        script = ROOT / "scripts" / f"{command.module.replace('convert', 'convert_checkpoint')}.py"
        assert f'main(["{name}", *sys.argv[1:]])' in script.read_text(), script


def test_wheel_installs_only_the_briskbert_namespace(tmp_path):
    """`pip install .` must not put generic top-level packages (training, modeling, ...) in site-packages."""
    proc = _run(
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp_path),
        str(ROOT),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("briskbert-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))
    }
    assert top_level == {"briskbert"}, top_level
    for expected in (
        "briskbert/modeling/modeling_briskbert.py",
        "briskbert/training/engine/loop.py",
        "briskbert/hub_cards/templates/model_card.md",
        "briskbert/data/wikitext2_excerpt.txt",
        "briskbert/commands/pretrain.py",
        "briskbert/hub_server/server.py",
    ):
        assert expected in names
    for folder in (
        "src/briskbert",
        "modeling",
        "tokenization",
        "training",
        "hub_cards",
        "hub_server",
        "data",
    ):
        for source in (ROOT / folder).rglob("*.py"):
            relative = source.relative_to(ROOT / folder).as_posix()
            installed = (
                f"briskbert/{relative}" if folder == "src/briskbert" else f"briskbert/{folder}/{relative}"
            )
            assert installed in names, (
                f"{source.relative_to(ROOT)} is missing from the wheel: list its package"
            )
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "briskbert = briskbert.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.slow  # ~15 s: a real pretraining run through the installed command, away from the checkout
def test_pretrain_runs_from_outside_the_checkout(tmp_path):
    from briskbert.data import DATA_DIR

    proc = _run(
        "-m",
        "briskbert",
        "pretrain",
        "--train_file",
        str(DATA_DIR / "wikitext2_excerpt.txt"),
        "--config_name",
        "bert-tiny",
        "--vocab_size",
        "500",
        "--max_seq_length",
        "64",
        "--per_device_train_batch_size",
        "8",
        "--max_train_steps",
        "3",
        "--output_dir",
        "out",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # With torchao installed (the [dev] extra), transformers imports it, and on a CPU-only machine it logs a
    # "Failed to load" line per CUDA kernel library; the command keeps those out of a job's output.
    assert "Failed to load" not in proc.stderr and "_pytree.py" not in proc.stderr, proc.stderr[:2000]
    assert (tmp_path / "out" / "final" / "config.json").is_file()
    assert json.loads((tmp_path / "out" / "final" / "config.json").read_text())["model_type"] == "briskbert"
