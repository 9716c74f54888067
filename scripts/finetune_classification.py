#!/usr/bin/env python
"""``briskbert finetune-classification``, for those who run scripts from a clone: ``python scripts/finetune_classification.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["finetune-classification", *sys.argv[1:]]))
