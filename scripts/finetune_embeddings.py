#!/usr/bin/env python
"""``briskbert finetune-embeddings``, for those who run scripts from a clone: ``python scripts/finetune_embeddings.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["finetune-embeddings", *sys.argv[1:]]))
