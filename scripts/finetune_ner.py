#!/usr/bin/env python
"""``briskbert finetune-ner``, for those who run scripts from a clone: ``python scripts/finetune_ner.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["finetune-ner", *sys.argv[1:]]))
