#!/usr/bin/env python
"""``briskbert benchmark``, for those who run scripts from a clone: ``python scripts/benchmark.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["benchmark", *sys.argv[1:]]))
