"""The mutation configs (docs/testing.md) still point at the code: a refactor that moves a function must move its
``cr-filter-lines`` range, or cosmic-ray silently mutates whatever now sits on those lines."""

import ast
import re
import shlex
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads TOML with tomllib")
ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p for p in (ROOT / "mutation").glob("*.toml") if p.name != "filters.toml")
NAMED_RANGE = re.compile(r'^\s*"(\d+)-(\d+)",\s*#\s*([\w.]+)\s*$', re.MULTILINE)


def function_lines(source: str) -> dict[str, tuple[int, int]]:
    """Each function's and method's first line (its first decorator) and last line, by ``Class.name``."""
    lines = {}

    def visit(body, prefix=""):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines[prefix + node.name] = (first, node.end_lineno)

    visit(ast.parse(source).body)
    return lines


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_names_existing_files_and_each_range_is_its_functions_lines(config):
    text = config.read_text()
    settings = tomllib.loads(text)["cosmic-ray"]
    module = ROOT / settings["module-path"]
    assert module.is_file(), f"{config.name}: module-path {settings['module-path']} does not exist"
    for arg in shlex.split(settings["test-command"]):
        assert not arg.startswith("tests/") or (ROOT / arg.split("::")[0]).exists(), (
            f"{config.name}: {arg} does not exist"
        )

    lines = settings.get("filters", {}).get("line-filter", {}).get("lines", {})
    named = NAMED_RANGE.findall(text)
    assert len(named) == len(lines.get(settings["module-path"], [])) == sum(map(len, lines.values())), (
        f"{config.name}: each range is of module-path and has a comment naming its function"
    )
    functions = function_lines(module.read_text())
    for start, end, name in named:
        assert name in functions, f"{config.name}: {name} is no longer in {settings['module-path']}"
        assert (int(start), int(end)) == functions[name], (
            f"{config.name}: {name} is on lines {'-'.join(map(str, functions[name]))}, not {start}-{end}"
        )
