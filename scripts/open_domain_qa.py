#!/usr/bin/env python
"""``briskbert open-domain-qa``, for those who run scripts from a clone: ``python scripts/open_domain_qa.py --help``."""

import sys

from briskbert.cli import main

if __name__ == "__main__":
    sys.exit(main(["open-domain-qa", *sys.argv[1:]]))
