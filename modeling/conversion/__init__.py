"""Exact import of BERT-family checkpoints into BriskBert folders, and the way back (`export_family`). Not remote
code: saved folders never need it."""

from .families import FAMILIES, UnsupportedCheckpointError
from .folder import CheckpointMismatchError, convert_checkpoint

__all__ = ["FAMILIES", "CheckpointMismatchError", "UnsupportedCheckpointError", "convert_checkpoint"]
