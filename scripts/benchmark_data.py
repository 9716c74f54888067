#!/usr/bin/env python
"""``briskbert benchmark-data``, for those who run scripts from a clone: ``python scripts/benchmark_data.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["benchmark-data", *sys.argv[1:]]))
