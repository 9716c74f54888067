"""The ``briskbert`` command: every job is a subcommand, ``--help`` is fast, and the package installs under one
namespace."""

import contextlib
import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from briskbert.cli import COMMANDS, main

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


def test_a_mistyped_flag_is_one_line_naming_the_closest_flag(capsys):
    """Before argparse would ask for the missing --output_dir, the typo is named with its likely fix."""
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune-ner", "--train_fle", "train.txt"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "unknown flag --train_fle; did you mean --train_file?" in err


@pytest.mark.parametrize(
    ("job", "prefix", "flag"),
    [
        ("finetune-classification", "--num_train_epoch", "--num_train_epochs"),
        ("finetune-ner", "--label_all", "--label_all_tokens"),
        ("pretrain", "--max_seq_len=64", "--max_seq_length"),
        ("export-family", "--model_d", "--model_dir"),
        ("publish", "--dry", "--dry_run"),
    ],
)
def test_a_flag_prefix_is_refused_as_a_typo_not_run_as_the_flag(job, prefix, flag, capsys):
    """argparse would run --num_train_epoch 2 as --num_train_epochs 2: a prefix is named like any typo."""
    with pytest.raises(SystemExit) as exit_info:
        main([job, prefix, "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"unknown flag {prefix.split('=')[0]}; did you mean {flag}?" in err


def test_a_value_a_setting_refuses_is_one_line_naming_its_flag(capsys):
    """Settings name the field; the command line prints it as the flag the user typed."""
    argv = [
        "--model_name_or_path",
        "m",
        "--train_file",
        "t.tsv",
        "--output_dir",
        "out",
        "--learning_rate",
        "0",
    ]
    assert main(["finetune-classification", *argv]) == 2
    assert capsys.readouterr().err == "error: --learning_rate must be > 0, got 0.0.\n"


def test_subcommand_help_shows_flags_without_importing_torch(tmp_path):
    """One interpreter asks every command for its --help in turn; torch is still not imported after each."""
    code = (
        "import sys\n"
        "from briskbert.cli import main\n"
        f"for name in {sorted(COMMANDS)!r}:\n"
        "    try:\n"
        "        main([name, '--help'])\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code in (0, None), (name, stop.code)\n"
        "    print('TORCH', name, 'torch' in sys.modules)\n"
    )
    proc = _run("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in sorted(COMMANDS):  # the first that imports torch is named
        assert f"usage: briskbert {name}" in proc.stdout
        assert f"TORCH {name} False" in proc.stdout, (
            f"`briskbert {name} --help` imported torch before parsing its flags"
        )


def _help_text(name: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.suppress(SystemExit):
        main([name, "--help"])
    return stdout.getvalue()


def test_every_flag_the_readme_shows_is_a_flag_of_its_command():
    """The README's command lines against each command's own --help (ablate passes pretrain's flags on)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    shown = {}
    for name, arguments in re.findall(r"briskbert ([a-z][a-z-]+)([^\n`|;&]*)", text):
        if name in COMMANDS:
            shown.setdefault(name, set()).update(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", arguments))
    assert {"pretrain", "finetune-classification", "finetune-qa", "distill", "ablate"} <= set(shown)
    for name, flags in shown.items():
        known = _help_text(name) + (_help_text("pretrain") if name == "ablate" else "")
        missing = sorted(flag for flag in flags if not re.search(rf"{flag}\b", known))
        assert not missing, f"README shows briskbert {name} {missing}, which its --help does not list"


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
        "retrieval",
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
