# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Spearman and Pearson correlation of a sentence-embedding model's cosine similarities with gold scores.

    briskbert evaluate-similarity --model_name_or_path runs/sts/final --file stsb/dev.tsv --output_dir runs/sts-eval

``--file``: TSV, CSV or JSON lines with ``sentence1``, ``sentence2`` and ``score`` (any range, e.g. STS-B's
0 to 5). Both sentences of each pair are embedded by ``--model_name_or_path`` (any encoder ``AutoModel``
loads; pooling and normalisation from its sentence-transformers files unless given), and the cosine
similarity of each pair is compared with its score: Spearman's rank correlation (ties share their average
rank) and Pearson's linear correlation, the numbers sentence-transformers' ``EmbeddingSimilarityEvaluator``
reports as ``spearman_cosine`` and ``pearson_cosine``. ``finetune-embeddings`` validates with the same
metric on scored pairs. Prints them and, with ``--output_dir``, writes ``similarity_metrics.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from briskbert.commands.training_flags import new_parser
from briskbert.errors import UserError
from briskbert.training.retrieval.retrieval_arguments import add_embedding_arguments
from briskbert.training.retrieval.similarity_arguments import check_scored_pair_file

METRICS_FILE = "similarity_metrics.json"


def parse_args(argv=None):
    parser = new_parser(__doc__)
    parser.add_argument(
        "--model_name_or_path", required=True, help="A sentence-embedding model (a folder or repo id)."
    )
    parser.add_argument("--file", required=True, help="Scored pairs: sentence1, sentence2, score.")
    parser.add_argument(
        "--max_seq_length", type=int, default=None, help="Default: the model's own (else 256)."
    )
    parser.add_argument("--batch_size", type=int, default=64, help="Sentences per forward pass.")
    add_embedding_arguments(parser)
    parser.add_argument(
        "--output_dir", default=None, help=f"Where {METRICS_FILE} goes (default: printed only)."
    )
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch_size must be >= 1, got {args.batch_size}.")
    if args.max_seq_length is not None and args.max_seq_length < 2:
        parser.error(f"--max_seq_length must be >= 2, got {args.max_seq_length}.")
    return args


def main(argv=None):
    args = parse_args(argv)
    check_scored_pair_file(args.file, "--file")
    if not Path(args.model_name_or_path).exists() and args.model_name_or_path.startswith((".", "/")):
        raise UserError(f"--model_name_or_path {args.model_name_or_path} does not exist.")
    from briskbert.training.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.similarity import evaluate_similarity, load_scored_pairs

    pairs = load_scored_pairs(args.file, "--file")
    normalize = False if args.no_normalize else None
    encoder, tokenizer, spec = load_dual_encoder(
        args.model_name_or_path, args.pooling, normalize, args.max_seq_length
    )
    metrics = evaluate_similarity(encoder, tokenizer, pairs, spec, args.batch_size)
    report = {**metrics, "model": args.model_name_or_path, "file": args.file, "pooling": spec.pooling}
    print(
        f"{metrics['num_pairs']} pairs  Spearman {100 * metrics['spearman']:.2f}  "
        f"Pearson {100 * metrics['pearson']:.2f}  (cosine similarity against the gold scores, x100)"
    )
    if args.output_dir:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.output_dir) / METRICS_FILE).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
