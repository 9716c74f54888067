#!/usr/bin/env python
"""``briskbert publish``, for those who run scripts from a clone: ``python scripts/publish.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["publish", *sys.argv[1:]]))
