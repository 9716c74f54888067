#!/usr/bin/env python
"""``briskbert distill``, for those who run scripts from a clone: ``python scripts/distill.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["distill", *sys.argv[1:]]))
