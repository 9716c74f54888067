# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Spearman and Pearson correlation of a sentence-embedding model's cosine similarities with gold scores.

    briskbert evaluate-similarity --model_name_or_path runs/sts/final --file stsb/dev.tsv --output_dir runs/sts-eval

``--file``: TSV, CSV or JSON lines with ``sentence1``, ``sentence2`` and ``score`` (any range). The numbers are
sentence-transformers' ``EmbeddingSimilarityEvaluator``'s ``spearman_cosine`` and ``pearson_cosine``; with
``--output_dir`` they are also written to ``similarity_metrics.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from briskbert.commands.arguments import parse
from briskbert.retrieval.settings import EmbeddingArguments, EncoderArguments
from briskbert.training.tasks.settings import helped

METRICS_FILE = "similarity_metrics.json"


@dataclass(frozen=True)
class SimilarityArguments:
    _argument_group_name = "pairs"

    file: str = field(metadata={"help": "Scored pairs: sentence1, sentence2, score."})
    output_dir: str | None = helped(f"Where {METRICS_FILE} goes (default: printed only).")


def main(argv=None):
    args, pairs_file, embedding = parse(
        __doc__, EncoderArguments, SimilarityArguments, EmbeddingArguments, argv=argv
    )
    from briskbert.commands.evaluate_retrieval import write_outputs
    from briskbert.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.similarity import evaluate_similarity, load_scored_pairs

    pairs = load_scored_pairs(pairs_file.file, "file")
    encoder, tokenizer, spec = load_dual_encoder(args.model_name_or_path, embedding, args.max_seq_length)
    metrics = evaluate_similarity(encoder, tokenizer, pairs, spec, args.batch_size)
    report = {**metrics, "model": args.model_name_or_path, "file": pairs_file.file, "pooling": spec.pooling}
    print(
        f"{metrics['num_pairs']} pairs  Spearman {metrics['spearman']:.4f}  "
        f"Pearson {metrics['pearson']:.4f}  (cosine similarity against the gold scores)"
    )
    write_outputs(pairs_file.output_dir, {METRICS_FILE: report})
    return report
