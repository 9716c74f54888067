"""Time and measure the memory of pretraining data preparation against transformers' run_mlm recipe.

    briskbert benchmark-data --sizes_mb 100 500 --preprocessing_num_workers 2 --output results.md

Generates a WikiText-2 corpus of each size (repeated; from ../shared/data/wikitext-2 when present, else
the bundled excerpt) in a temporary folder, prepares it with briskbert's corpus store (fresh and cached)
and with run_mlm's datasets.map / group_texts recipe, each in a fresh process, and writes a markdown table
of preparation time and peak resident memory of the whole process tree. Everything generated is deleted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from briskbert.errors import UserError


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the description's example kept as written."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--sizes_mb", type=int, nargs="+", default=[100], help="Corpus sizes in megabytes.")
    parser.add_argument("--preprocessing_num_workers", type=int, default=2, help="Workers of both recipes.")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument(
        "--tokenizer_name",
        default=None,
        help="A tokenizer folder (default: WordPiece 30522 trained on the source).",
    )
    parser.add_argument(
        "--source_dir",
        default=os.environ.get("BRISKBERT_DATA", "../shared/data") + "/wikitext-2",
        help="Folder with WikiText-2's valid.txt and test.txt.",
    )
    parser.add_argument(
        "--work_dir", default=None, help="Where the temporary corpora go (default: the system's)."
    )
    parser.add_argument("--skip_run_mlm", action="store_true", help="Measure briskbert only.")
    parser.add_argument("--output", default=None, help="Also write the markdown table to this file.")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if any(size < 1 for size in args.sizes_mb) or args.preprocessing_num_workers < 1:
        raise UserError("--sizes_mb and --preprocessing_num_workers must be positive.")
    from briskbert.training.experiments.data_benchmark import BenchmarkSettings, markdown_table, run_benchmark

    settings = BenchmarkSettings(
        sizes_mb=tuple(args.sizes_mb),
        num_workers=args.preprocessing_num_workers,
        max_seq_length=args.max_seq_length,
        tokenizer_name=args.tokenizer_name,
        source_dir=args.source_dir,
        work_dir=args.work_dir,
        include_run_mlm=not args.skip_run_mlm,
    )
    table = markdown_table(run_benchmark(settings), settings)
    print(table)
    if args.output:
        Path(args.output).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
