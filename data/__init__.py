"""Small attributed excerpts of public datasets (see README.md here), installed as ``briskbert.data`` so the
quickstart and examples run from any directory."""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
