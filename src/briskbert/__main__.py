"""``python -m briskbert <command> ...``, the same as the ``briskbert`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
