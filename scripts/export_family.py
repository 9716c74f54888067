#!/usr/bin/env python
"""``briskbert export-family``, for those who run scripts from a clone: ``python scripts/export_family.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["export-family", *sys.argv[1:]]))
