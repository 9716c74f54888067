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

from dataclasses import dataclass, field

from briskbert.commands.arguments import parse
from briskbert.retrieval.index_settings import IndexSettings, PassageSource, check_faiss
from briskbert.retrieval.settings import EmbeddingArguments, check_model_path
from briskbert.training.tasks.settings import check_at_least


@dataclass(frozen=True)
class EncoderArguments:
    model_name_or_path: str = field(metadata={"help": "The dual encoder (a folder or repo id)."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Default: the encoder's own (else 256)."}
    )
    batch_size: int = field(default=64, metadata={"help": "Passages per forward pass."})

    def __post_init__(self):
        check_at_least(self, 1, "batch_size")
        check_model_path(self, "model_name_or_path")


@dataclass(frozen=True)
class OutputArguments:
    _argument_group_name = "output"

    output_dir: str = field(metadata={"help": "The index folder."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace an index (or unfinished build) there."}
    )
    shard_size: int = field(
        default=10_000, metadata={"help": "Passages embedded and saved at a time (bounds memory)."}
    )
    keep_embeddings: bool = field(
        default=False, metadata={"help": "Keep the embedding shards (float32 .npy) after indexing."}
    )

    def __post_init__(self):
        check_at_least(self, 1, "shard_size")


def main(argv=None):
    encoder, embedding, source, settings, output = parse(
        __doc__,
        EncoderArguments,
        EmbeddingArguments,
        PassageSource,
        IndexSettings,
        OutputArguments,
        argv=argv,
    )
    check_faiss()
    from briskbert.retrieval.dense import load_dual_encoder
    from briskbert.retrieval.vector_index import BuildOptions, build_index

    options = BuildOptions(
        output.shard_size, encoder.batch_size, output.keep_embeddings, output.overwrite_output_dir
    )
    import torch

    model, tokenizer, spec = load_dual_encoder(
        encoder.model_name_or_path, embedding.pooling, embedding.normalize, encoder.max_seq_length
    )
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    from briskbert.commands.training_run import locked

    with locked(output.output_dir):  # one build per index folder
        config = build_index(
            source, model, tokenizer, spec, encoder.model_name_or_path, settings, output.output_dir, options
        )
    print(
        f"{config['num_passages']} passages -> {config['index_type']} index in {output.output_dir} "
        f"({config['index_bytes'] / 2**20:.1f} MiB; embedding {config['embedding_s']} s, "
        f"indexing {config['indexing_s']} s)"
    )
    return config


if __name__ == "__main__":
    main()
