#!/usr/bin/env python
"""``briskbert evaluate-similarity``, for those who run scripts from a clone: ``python scripts/evaluate_similarity.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate-similarity", *sys.argv[1:]]))
