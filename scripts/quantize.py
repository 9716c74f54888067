#!/usr/bin/env python
"""``briskbert quantize``, for those who run scripts from a clone: ``python scripts/quantize.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["quantize", *sys.argv[1:]]))
