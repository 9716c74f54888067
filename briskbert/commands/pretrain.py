"""``briskbert pretrain``: masked language modelling (+ next sentence prediction) on text files."""

from briskbert.training.pretraining import main

__all__ = ["main"]
