"""How briskbert starts itself in a subprocess (the quickstart's steps, an ablation's runs)."""

from __future__ import annotations

import sys

#: Set by a parent that runs briskbert jobs (the quickstart) to the command that continues the whole flow: an
#: interrupted training job prints it as the way to resume, instead of its own internal command line.
RESUME_COMMAND_VARIABLE = "BRISKBERT_RESUME_COMMAND"


def briskbert_argv(*args: str) -> list[str]:
    """``python -m briskbert ARGS`` with this interpreter, importing nothing from the current directory.

    ``python -m`` puts the current directory first on ``sys.path``; ``-P`` (Python 3.11+) leaves it out, so a
    folder or file named like a project module where the user stands can never replace the installed package.
    """
    safe_path = ("-P",) if sys.version_info >= (3, 11) else ()
    return [sys.executable, *safe_path, "-m", "briskbert", *args]
