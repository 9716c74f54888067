"""How briskbert starts itself in a subprocess (the quickstart's steps, an ablation's runs)."""

from __future__ import annotations

import sys


def briskbert_argv(*args: str) -> list[str]:
    """``python -m briskbert ARGS`` with this interpreter, importing nothing from the current directory.

    ``python -m`` puts the current directory first on ``sys.path``; ``-P`` (Python 3.11+) leaves it out, so a
    folder or file named like a project module where the user stands can never replace the installed package.
    """
    safe_path = ("-P",) if sys.version_info >= (3, 11) else ()
    return [sys.executable, *safe_path, "-m", "briskbert", *args]
