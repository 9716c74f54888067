#!/usr/bin/env python
"""``briskbert finetune-reranker``, for those who run scripts from a clone: ``python scripts/finetune_reranker.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["finetune-reranker", *sys.argv[1:]]))
