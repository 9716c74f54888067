"""Time and measure the memory of pretraining data preparation against transformers' run_mlm recipe.

    briskbert benchmark-data --sizes_mb 100 500 --preprocessing_num_workers 2 --output results.md

Generates a WikiText-2 corpus of each size (repeated; from ../shared/data/wikitext-2 when present, else
the bundled excerpt) in a temporary folder, prepares it with briskbert's corpus store (fresh and cached)
and with run_mlm's datasets.map / group_texts recipe, each in a fresh process, and writes a markdown table
of preparation time and peak resident memory of the whole process tree. Everything generated is deleted.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.training.experiments.data_benchmark import BenchmarkSettings


@dataclass(frozen=True)
class Output:
    output: str | None = field(default=None, metadata={"help": "Also write the markdown table to this file."})


def main(argv: list[str] | None = None) -> int:
    settings, output = parse(__doc__, BenchmarkSettings, Output, argv=argv)
    from briskbert.training.experiments.data_benchmark import markdown_table, run_benchmark

    table = markdown_table(run_benchmark(settings), settings)
    print(table)
    if output.output:
        Path(output.output).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
