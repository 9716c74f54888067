#!/usr/bin/env python
"""``briskbert quickstart``, for those who run scripts from a clone: ``python scripts/quickstart.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["quickstart", *sys.argv[1:]]))
