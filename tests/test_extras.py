"""A command that needs an optional extra says in one line which to install (exit 2) before anything heavy;
packages are hidden with ``sys.modules[name] = None``."""

import subprocess
import sys
from pathlib import Path

import pytest

from briskbert.cli import main as cli
from briskbert.data import DATA_DIR
from briskbert.extras import EXTRAS, MissingExtraError, require_extra

ROOT = Path(__file__).resolve().parents[1]


def test_export_onnx_without_the_onnx_extra(tmp_path):
    """One of the extra's three packages hidden (that each is looked up: test_require_extra_...)."""
    argv = ["export-onnx", "--model_dir", str(tmp_path / "model"), "--output_dir", str(tmp_path / "onnx")]
    code = (
        "import sys\n"
        "sys.modules['onnxruntime'] = None\n"
        "from briskbert.cli import main\n"
        f"code = main({argv!r})\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    error = proc.stderr.strip()
    assert proc.returncode == 2 and error.startswith("error: ") and "\n" not in error, proc.stderr[-3000:]
    assert "briskbert export-onnx needs onnxruntime" in error and 'pip install "briskbert[onnx]"' in error
    assert proc.stdout.strip() == "torch imported: False"  # the check came before torch and the exporter
    assert not (tmp_path / "onnx").exists()


def test_report_to_a_tracker_without_its_extra(tmp_path, monkeypatch, capsys):
    for name in ("tensorboard", "tensorboardX"):
        monkeypatch.setitem(sys.modules, name, None)
    wikitext = str(DATA_DIR / "wikitext2_excerpt.txt")
    argv = ["pretrain", "--train_file", wikitext, "--config_name", "bert-tiny", "--report_to", "tensorboard"]
    assert cli([*argv, "--output_dir", str(tmp_path / "run")]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert error.startswith("error: --report_to tensorboard needs tensorboard") and "[tensorboard]" in error
    assert not (tmp_path / "run").exists()


def test_require_extra_looks_packages_up_without_importing_them(monkeypatch):
    looked_up = []

    def find_spec(name, package=None):
        looked_up.append(name)
        return None if name == "peft" else object()

    monkeypatch.setattr("importlib.util.find_spec", find_spec)
    with pytest.raises(
        MissingExtraError, match=r"LoRA needs peft, which is not installed: install the \[peft\]"
    ):
        require_extra("peft", "LoRA")
    require_extra("onnx", "briskbert export-onnx")  # everything found: no error
    assert looked_up == ["peft", "onnx", "onnxscript", "onnxruntime"]


def test_every_extra_is_declared_in_pyproject_and_listed_in_the_readme():
    """The extras messages name install the modules they are named for; the README lists every extra."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml with tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, modules in EXTRAS.items():  # each module's distribution (faiss: faiss-cpu) is in the extra
        assert all(module.replace("_", "-") in " ".join(declared[name]) for module in modules), name
    listed = (ROOT / "README.md").read_text().split("Extras: ")[1].split("\n\n")[0]
    assert [name for name in declared if f"`[{name}]`" not in listed] == []
    assert "`[torchao]` (`briskbert quantize --backend torch`)" in listed
