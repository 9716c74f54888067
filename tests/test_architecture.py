"""The layers, from the AST import graph of the ``briskbert`` namespace (function-level imports included,
``if TYPE_CHECKING:`` ones not): no cycles, and each layer imports only itself and the layers below."""

import ast
import graphlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Repository folder -> the package it installs as, from pyproject.toml's [tool.setuptools.package-dir] lines
# such as `"briskbert.modeling" = "modeling"` (Python 3.10 has no tomllib).
PACKAGE_DIRS = {
    folder: package
    for package, folder in re.findall(
        r'^"?(briskbert[\w.]*)"? = "([^":]+)"$', (ROOT / "pyproject.toml").read_text(), re.M
    )
}
COMMAND_LAYER = ("briskbert.cli", "briskbert.__main__", "briskbert.commands")
FOUNDATION = tuple(f"briskbert.{name}" for name in ("errors", "inputs", "processes", "extras", "files"))
# Bottom to top: a module may import its own layer and the layers listed before it, never one after.
LAYERS = (
    FOUNDATION,
    ("briskbert.data", "briskbert.modeling", "briskbert.tokenization"),
    ("briskbert.training.engine",),
    ("briskbert.training.data",),
    ("briskbert.training.tasks",),
    ("briskbert.retrieval",),  # serving: embedding texts, exact search, the index, fusion, open-domain QA
    ("briskbert.training.retrieval",),  # training embeddings and re-rankers (mines negatives with search)
    ("briskbert.training.experiments",),
    ("briskbert.hub_cards",),  # model cards (read from the training facts) and the publisher
    ("briskbert.quantization",),
    ("briskbert.hub_server",),
    COMMAND_LAYER,
)


def module_files() -> dict[str, Path]:
    """Every module of the namespace -> its file."""
    modules = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere (``from a import b`` as ``a.b`` if a module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a package: its deepest module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node, except what sits under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                pending.extend(child.orelse)
            else:
                pending.append(child)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def _within(name: str, prefixes) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def layer_of(name: str) -> int | None:
    matches = [(len(p), i) for i, layer in enumerate(LAYERS) for p in layer if _within(name, (p,))]
    return max(matches)[1] if matches else None


def test_the_graph_sees_function_level_and_relative_imports(graph):
    assert "briskbert.training.engine.evaluation" in graph["briskbert.training.tasks.ner"]  # in a function
    assert "briskbert.hub_cards.rules" in graph["briskbert.hub_cards.card"]  # from .rules import ...
    assert "briskbert.errors" in graph["briskbert.inputs"]


def test_no_import_cycles(graph):
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"modules that import each other: {' -> '.join(error.args[1])}")


def test_only_the_command_layer_imports_the_command_layer(graph):
    offenders = {
        f"{name} imports {target}"
        for name, targets in graph.items()
        if not _within(name, COMMAND_LAYER)
        for target in targets
        if _within(target, COMMAND_LAYER)
    }
    assert not offenders


def test_every_module_imports_only_its_layer_and_those_below(graph):
    unplaced = [name for name in graph if layer_of(name) is None and name != "briskbert"]
    assert unplaced == ["briskbert.training"], unplaced  # the namespace packages sit outside the layers
    upward = {
        f"{name} ({layer_of(name)}) imports {target} ({layer_of(target)})"
        for name, targets in graph.items()
        if layer_of(name) is not None
        for target in targets
        if layer_of(target) is not None and layer_of(target) > layer_of(name)
    }
    assert not upward
