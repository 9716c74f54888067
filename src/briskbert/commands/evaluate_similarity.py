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
from dataclasses import dataclass, field
from pathlib import Path

from briskbert.commands.arguments import parse
from briskbert.files import write_atomic
from briskbert.retrieval.settings import EmbeddingArguments, check_model_path
from briskbert.training.retrieval.settings import check_scored_pair_file
from briskbert.training.tasks.settings import check_at_least

METRICS_FILE = "similarity_metrics.json"


@dataclass(frozen=True)
class SimilarityArguments:
    model_name_or_path: str = field(metadata={"help": "A sentence-embedding model (a folder or repo id)."})
    file: str = field(metadata={"help": "Scored pairs: sentence1, sentence2, score."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Default: the model's own (else 256)."}
    )
    batch_size: int = field(default=64, metadata={"help": "Sentences per forward pass."})

    def __post_init__(self):
        check_at_least(self, 1, "batch_size")
        check_at_least(self, 2, "max_seq_length")
        check_scored_pair_file(self.file, "file")
        check_model_path(self, "model_name_or_path")


@dataclass(frozen=True)
class OutputArguments:
    output_dir: str | None = field(
        default=None, metadata={"help": f"Where {METRICS_FILE} goes (default: printed only)."}
    )


def main(argv=None):
    args, embedding, output = parse(
        __doc__, SimilarityArguments, EmbeddingArguments, OutputArguments, argv=argv
    )
    from briskbert.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.similarity import evaluate_similarity, load_scored_pairs

    pairs = load_scored_pairs(args.file, "file")
    encoder, tokenizer, spec = load_dual_encoder(
        args.model_name_or_path, embedding.pooling, embedding.normalize, args.max_seq_length
    )
    metrics = evaluate_similarity(encoder, tokenizer, pairs, spec, args.batch_size)
    report = {**metrics, "model": args.model_name_or_path, "file": args.file, "pooling": spec.pooling}
    print(
        f"{metrics['num_pairs']} pairs  Spearman {metrics['spearman']:.4f}  "
        f"Pearson {metrics['pearson']:.4f}  (cosine similarity against the gold scores)"
    )
    if output.output_dir:
        Path(output.output_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(output.output_dir) / METRICS_FILE, json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
