#!/usr/bin/env python
"""``briskbert evaluate-retrieval``, for those who run scripts from a clone: ``python scripts/evaluate_retrieval.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate-retrieval", *sys.argv[1:]]))
