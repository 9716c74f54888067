#!/usr/bin/env python
"""``briskbert local-hub``, for those who run scripts from a clone: ``python scripts/local_hub.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["local-hub", *sys.argv[1:]]))
