#!/usr/bin/env python
"""``briskbert build-index``, for those who run scripts from a clone: ``python scripts/build_index.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["build-index", *sys.argv[1:]]))
