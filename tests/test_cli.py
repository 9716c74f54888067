"""The ``briskbert`` command: every job is a subcommand, ``--help`` is fast and names every flag the README shows."""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from briskbert.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    for name, summary in COMMANDS.items():
        assert f"  {name}" in printed and summary[:40] in printed


def test_unknown_subcommand_is_one_line_and_exit_2(capsys):
    assert main(["pretrian"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown command 'pretrian'" in error and "pretrain" in error


@pytest.mark.parametrize(
    ("job", "typed", "flag"),
    [
        ("finetune-ner", "--train_fle", "--train_file"),  # before argparse would ask for --output_dir
        # argparse would run these prefixes as the flag: a prefix is named like any typo
        ("finetune-classification", "--num_train_epoch", "--num_train_epochs"),
        ("finetune-ner", "--label_all", "--label_all_tokens"),
        ("pretrain", "--max_seq_len=64", "--max_seq_length"),
        ("export-family", "--model_d", "--model_dir"),
        ("publish", "--dry", "--dry_run"),
    ],
)
def test_a_mistyped_flag_is_one_line_naming_the_closest_flag(job, typed, flag, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main names the program in argv[0]
    with pytest.raises(SystemExit) as exit_info:
        main([job, typed, "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"unknown flag {typed.split('=')[0]}; did you mean {flag}?" in err


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
    command = [sys.executable, "-c", code]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in sorted(COMMANDS):  # the first that imports torch is named
        assert f"usage: briskbert {name}" in proc.stdout
        imported = f"`briskbert {name} --help` imported torch before parsing its flags"
        assert f"TORCH {name} False" in proc.stdout, imported


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
    for name in COMMANDS:
        script = ROOT / "scripts" / f"{name.replace('-', '_').replace('convert', 'convert_checkpoint')}.py"
        assert f'main(["{name}", *sys.argv[1:]])' in script.read_text(), script
