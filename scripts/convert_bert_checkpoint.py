#!/usr/bin/env python
"""``briskbert convert``, for those who run scripts from a clone: ``python scripts/convert_bert_checkpoint.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
