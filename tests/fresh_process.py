"""Run Python code in a fresh interpreter in which this project cannot be imported, the way a user who only has
transformers (and a downloaded folder or Hub repo) runs it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("briskbert", "modeling", "tokenization", "training", "hub_cards", "hub_server")

PRELUDE = textwrap.dedent(
    f"""
    import sys
    import os
    # The checkout itself leaves sys.path; its .venv (which holds transformers) stays.
    _blocked = {{os.path.realpath(p) for p in ({str(ROOT)!r}, {str(ROOT / "tests")!r})}}
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) not in _blocked]
    for _name in {PROJECT_PACKAGES!r}:
        sys.modules[_name] = None  # an installed (or editable) briskbert must not be importable either
    try:
        import briskbert
    except ImportError:
        pass
    else:
        raise AssertionError("the project is importable")
    """
)


def run_without_project(code: str, cwd: Path, env: dict | None = None, timeout: int = 300) -> str:
    """Runs `code` after PRELUDE; returns stdout, failing with stderr's tail on a non-zero exit."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    full_env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    full_env["HF_MODULES_CACHE"] = str(Path(cwd) / "hf_modules")
    full_env.update(env or {})
    command = [sys.executable, "-c", PRELUDE + textwrap.dedent(code)]
    proc = subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout
