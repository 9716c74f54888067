# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Embed a passage collection with a dual encoder into a faiss vector index (needs the ``[faiss]`` extra).

    briskbert build-index --model_name_or_path runs/embeddings/final --passages_file corpus.jsonl \
        --index_type hnsw --output_dir runs/index
    briskbert evaluate-retrieval --model_name_or_path runs/embeddings/final --index runs/index \
        --corpus_file corpus.jsonl --queries_file queries.jsonl --qrels_file qrels.jsonl

Passages: ``--passages_file`` with one passage per line (its id is the line number) or JSON lines with
``id`` and ``text``; or the SQuAD-format collection ``evaluate-retrieval`` and ``open-domain-qa`` read
(``--squad_file``, ``--articles``, ``--extra_corpus_file``, ``--extra_corpus_min_words``; same ids). They
are streamed and embedded ``--shard_size`` at a time, so memory holds one shard; each finished shard is
saved in ``OUTPUT_DIR/embeddings``, and an interrupted build run again with the same arguments continues
after the last one. Index types: ``flat`` (exact), ``hnsw`` (graph; fast and close to exact) and ``ivfpq``
(compressed; smallest). The folder also records the encoder's name, pooling and a few probe embeddings:
``evaluate-retrieval --index`` and ``open-domain-qa --index`` refuse an index built with another encoder.
"""

from __future__ import annotations

from briskbert.commands.training_flags import new_parser
from briskbert.errors import UserError
from briskbert.training.retrieval.index_arguments import (
    add_index_arguments,
    check_faiss,
    index_settings_from_args,
)
from briskbert.training.retrieval.retrieval_arguments import add_embedding_arguments
from briskbert.training.tasks.settings import parse_article_range


def parse_args(argv=None):
    parser = new_parser(__doc__)
    parser.add_argument("--model_name_or_path", required=True, help="The dual encoder (a folder or repo id).")
    parser.add_argument(
        "--max_seq_length", type=int, default=None, help="Default: the encoder's own (else 256)."
    )
    parser.add_argument("--batch_size", type=int, default=64, help="Passages per forward pass.")
    add_embedding_arguments(parser)
    passages = parser.add_argument_group("passages")
    passages.add_argument(
        "--passages_file", default=None, help="One passage per line (id: line number), or JSON lines id/text."
    )
    passages.add_argument("--squad_file", default=None, help="A SQuAD-format collection: every paragraph.")
    passages.add_argument("--articles", default=None, help="Only articles START:STOP of --squad_file.")
    passages.add_argument(
        "--extra_corpus_file", default=None, help="--squad_file: distractor passages, one per line."
    )
    passages.add_argument(
        "--extra_corpus_min_words",
        type=int,
        default=0,
        help="Keep distractor lines of this many words or more.",
    )
    add_index_arguments(parser)
    output = parser.add_argument_group("output")
    output.add_argument("--output_dir", required=True, help="The index folder.")
    output.add_argument(
        "--overwrite_output_dir", action="store_true", help="Replace an index (or unfinished build) there."
    )
    output.add_argument(
        "--shard_size",
        type=int,
        default=10_000,
        help="Passages embedded and saved at a time (bounds memory).",
    )
    output.add_argument(
        "--keep_embeddings",
        action="store_true",
        help="Keep the embedding shards (float32 .npy) after indexing.",
    )
    args = parser.parse_args(argv)
    for flag in ("batch_size", "shard_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}.")
    return args


def main(argv=None):
    args = parse_args(argv)
    check_faiss()
    settings = index_settings_from_args(args)
    articles = parse_article_range(args.articles, "--articles")
    from briskbert.training.retrieval.dense import load_dual_encoder
    from briskbert.training.retrieval.vector_index import BuildOptions, PassageSource, build_index

    source = PassageSource(
        args.passages_file, args.squad_file, articles, args.extra_corpus_file, args.extra_corpus_min_words
    )
    options = BuildOptions(args.shard_size, args.batch_size, args.keep_embeddings, args.overwrite_output_dir)
    if args.model_name_or_path.startswith((".", "/")) and not __import__("os").path.exists(
        args.model_name_or_path
    ):
        raise UserError(f"--model_name_or_path {args.model_name_or_path} does not exist.")
    import torch

    encoder, tokenizer, spec = load_dual_encoder(
        args.model_name_or_path, args.pooling, False if args.no_normalize else None, args.max_seq_length
    )
    encoder.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    config = build_index(
        source, encoder, tokenizer, spec, args.model_name_or_path, settings, args.output_dir, options
    )
    print(
        f"{config['num_passages']} passages -> {config['index_type']} index in {args.output_dir} "
        f"({config['index_bytes'] / 2**20:.1f} MiB; embedding {config['embedding_s']} s, "
        f"indexing {config['indexing_s']} s)"
    )
    return config


if __name__ == "__main__":
    main()
