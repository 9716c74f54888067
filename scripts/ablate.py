#!/usr/bin/env python
"""``briskbert ablate``, for those who run scripts from a clone: ``python scripts/ablate.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["ablate", *sys.argv[1:]]))
