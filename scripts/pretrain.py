#!/usr/bin/env python
"""``briskbert pretrain``, for those who run scripts from a clone: ``python scripts/pretrain.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["pretrain", *sys.argv[1:]]))
