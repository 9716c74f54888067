"""Optional dependencies: a command calls :func:`require_extra` right after parsing its flags, so a missing
package is one ``error:`` line naming the extra to install, not a traceback from deep inside an import."""

from __future__ import annotations

import importlib.util

from .errors import UserError

#: each ``[project.optional-dependencies]`` extra a command checks for -> the top-level modules it brings
EXTRAS: dict[str, tuple[str, ...]] = {
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "sentence-transformers": ("sentence_transformers",),
    "peft": ("peft",),
    "torchao": ("torchao",),
    "faiss": ("faiss",),
    "flash": ("flash_attn",),
    "tensorboard": ("tensorboard",),
    "trackio": ("trackio",),
    "hub": ("starlette", "uvicorn"),
}

#: the loggers torchao's import fills with warnings on a CPU-only machine: one per CUDA kernel library it cannot
#: load (and torch's, about torchao's enums). transformers imports torchao whenever it is installed.
TORCHAO_IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")


class MissingExtraError(UserError):
    """A command needs packages of an optional extra that are not installed."""


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (``sys.modules[module] = None`` hides it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a module without a spec
        return False


def require_extra(extra: str, needed_for: str) -> None:
    """Raise :class:`MissingExtraError`, naming ``needed_for``, unless every module of ``extra`` is installed."""
    missing = [module for module in EXTRAS[extra] if not is_installed(module)]
    if missing:
        raise MissingExtraError(
            f"{needed_for} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f'installed: install the [{extra}] extra with pip install "briskbert[{extra}]" (from a clone: '
            f'pip install ".[{extra}]").'
        )
