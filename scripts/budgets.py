"""Print the project's size budgets: lines per package, the longest files, flags declared by hand, repeats.

    python scripts/budgets.py

Lines are counted as ``ruff format`` leaves them. A repeat is a run of 6+ identical non-blank lines (ignoring
indentation) standing in two places; imports and docstrings count like any other line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Every folder the package is installed from ([tool.setuptools.package-dir]), but the data excerpts.
PACKAGE_DIRS = re.findall(r'^"?briskbert[\w.]*"? = "([^":]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
LIBRARY = tuple(dict.fromkeys(Path(folder).parts[0] for folder in PACKAGE_DIRS if folder != "data"))
WINDOW = 6


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def line_count(paths: list[Path]) -> int:
    return sum(len(path.read_text().splitlines()) for path in paths)


def repeated_blocks(paths: list[Path]) -> int:
    """Pairs of places sharing a run of WINDOW+ identical lines; overlapping windows of one run count once."""
    places = defaultdict(list)
    for path in paths:
        lines = [(number, line.strip()) for number, line in enumerate(path.read_text().splitlines())]
        lines = [(number, text) for number, text in lines if text]
        for start in range(len(lines) - WINDOW + 1):
            places["\n".join(text for _, text in lines[start : start + WINDOW])].append((path, start))
    pairs = set()
    for spots in places.values():
        for i, (path_a, start_a) in enumerate(spots):
            for path_b, start_b in spots[i + 1 :]:
                pairs.add((path_a, path_b, start_b - start_a, start_a))
    # a run of N lines gives N - WINDOW + 1 consecutive windows with the same offset: count the run once
    return sum(1 for a, b, offset, start in pairs if (a, b, offset, start - 1) not in pairs)


def main() -> None:
    library = python_files(*LIBRARY)
    print(f"{'package':<16}{'lines':>8}")
    for folder in LIBRARY:
        print(f"{folder:<16}{line_count(python_files(folder)):>8}")
    print(f"{'library':<16}{line_count(library):>8}")
    print(f"{'scripts':<16}{line_count(python_files('scripts')):>8}")
    print(f"{'tests':<16}{line_count(python_files('tests')):>8}")
    longest = sorted(library, key=lambda path: -len(path.read_text().splitlines()))[:3]
    for path in longest:
        print(f"longest: {path.relative_to(ROOT)} ({len(path.read_text().splitlines())} lines)")
    hand_flags = sum(len(re.findall(r"\.add_argument\(", path.read_text())) for path in library)
    print(f"add_argument calls in the library and commands: {hand_flags}")
    everything = python_files(*LIBRARY, "scripts", "tests")
    print(f"pairs of repeated {WINDOW}-line blocks: {repeated_blocks(everything)}")


if __name__ == "__main__":
    main()
