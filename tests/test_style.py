"""The code keeps one format and functions a reader can hold: ruff, and no function over 100 lines."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_architecture import PACKAGE_DIRS

ROOT = Path(__file__).resolve().parents[1]
# Every folder the package is installed from (read from pyproject.toml, so a new one cannot be missed), and scripts.
LIBRARY = (*sorted({Path(folder).parts[0] for folder in PACKAGE_DIRS}), "scripts")
MAX_FUNCTION_LINES = 100


def _library_files():
    return sorted(path for folder in LIBRARY for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]  # no ruff: pip install -e '.[dev]'


def test_no_function_is_longer_than_a_reader_can_hold():
    too_long = []
    for path in _library_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not too_long, "\n".join(too_long)


# The command layer owns flag names: library code names a settings field (``SettingError("max_seq_length", ...)``),
# ``briskbert.cli`` prints it as ``--max_seq_length``; a command line for a subprocess is built by
# ``briskbert.processes.to_argv``. Scripts are command lines of their own.
COMMAND_LAYER = ("src/briskbert/commands/", "src/briskbert/cli.py", "scripts/")


def flag_strings(source: str) -> list[str]:
    """``line: text`` of each string literal (or f-string part) that spells a flag, docstrings aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        f"{node.lineno}: {node.value[:60]!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and re.search(r"(?<![\w-])--[A-Za-z]", node.value)
    ]


def test_library_code_names_settings_and_leaves_flags_to_the_command_layer():
    source = (
        '"""--docstring"""\nx = f"--alpha must be > 0, got {a}"\ny = "--" + name\nz = "or narrow --include"\n'
    )
    assert sorted(flag_strings(source)) == ["2: '--alpha must be > 0, got '", "4: 'or narrow --include'"]
    spelled = []
    for path in _library_files():
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith(COMMAND_LAYER):
            spelled += [f"{name}:{hit}" for hit in flag_strings(path.read_text(encoding="utf-8"))]
    assert not spelled, "\n".join(spelled)


def test_code_imports_the_namespace_never_the_folders():
    """Installed, the folders live under `briskbert`; an import of a bare folder name only works in a clone."""
    folders = {folder for folder in PACKAGE_DIRS if "/" not in folder}
    offenders = []
    for path in [*_library_files(), *sorted((ROOT / "tests").glob("*.py"))]:
        source = path.read_text(encoding="utf-8")
        assert "sys.path.insert" not in source or path.parent.name == "tests", f"{path}: no sys.path changes"
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] in folders
            ]
    assert not offenders, offenders


def test_the_budget_script_counts_a_repeated_run_once_and_ignores_indentation(tmp_path):
    """Seven shared lines indented differently are one repeated block; six differing in one line are none."""
    import runpy

    repeated_blocks = runpy.run_path(str(ROOT / "scripts" / "budgets.py"))["repeated_blocks"]
    shared = [f"value_{i} = {i}" for i in range(7)]
    (tmp_path / "a.py").write_text("\n".join(["a = 0", *shared]) + "\n")
    (tmp_path / "b.py").write_text("\n".join(f"    {line}" for line in shared) + "\n")
    (tmp_path / "c.py").write_text("\n".join([*shared[:3], "other = 1", *shared[4:]]) + "\n")
    assert repeated_blocks([tmp_path / "a.py", tmp_path / "b.py"]) == 1
    assert repeated_blocks([tmp_path / "a.py", tmp_path / "c.py"]) == 0
