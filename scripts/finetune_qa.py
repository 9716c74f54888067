#!/usr/bin/env python
"""``briskbert finetune-qa``, for those who run scripts from a clone: ``python scripts/finetune_qa.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["finetune-qa", *sys.argv[1:]]))
