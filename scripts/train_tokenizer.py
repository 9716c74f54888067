#!/usr/bin/env python
"""``briskbert train-tokenizer``, for those who run scripts from a clone: ``python scripts/train_tokenizer.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["train-tokenizer", *sys.argv[1:]]))
