#!/usr/bin/env python
"""``briskbert export-onnx``, for those who run scripts from a clone: ``python scripts/export_onnx.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["export-onnx", *sys.argv[1:]]))
