# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Embed a passage collection with a dual encoder into a faiss vector index (needs the ``[faiss]`` extra).

    briskbert build-index --model_name_or_path runs/embeddings/final --passages_file corpus.jsonl \
        --index_type hnsw --output_dir runs/index

Passages: ``--passages_file`` (one per line, its id the line number, or JSON lines ``id``/``text``), or the
SQuAD-format collection ``evaluate-retrieval`` reads (same ids). They are embedded ``--shard_size`` at a time
into ``OUTPUT_DIR/embeddings``; an interrupted build run again with the same arguments continues after its last
shard. Index types: ``flat`` (exact), ``hnsw`` (graph) and ``ivfpq`` (compressed). ``evaluate-retrieval --index``
and ``open-domain-qa --index`` refuse an index built with another encoder or over other passages.
"""

from __future__ import annotations

from briskbert.commands.arguments import parse
from briskbert.retrieval.settings import (
    EmbeddingArguments,
    EncoderArguments,
    IndexOutput,
    IndexSettings,
    PassageSource,
    check_faiss,
)


def main(argv=None):
    encoder, embedding, source, settings, output = parse(
        __doc__, EncoderArguments, EmbeddingArguments, PassageSource, IndexSettings, IndexOutput, argv=argv
    )
    check_faiss()
    import torch

    from briskbert.commands.training_run import locked
    from briskbert.retrieval.dense import load_dual_encoder
    from briskbert.retrieval.vector_index import build_index

    model, tokenizer, spec = load_dual_encoder(encoder.model_name_or_path, embedding, encoder.max_seq_length)
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    with locked(output.output_dir):  # one build per index folder
        name = encoder.model_name_or_path
        config = build_index(source, model, tokenizer, spec, name, settings, output, encoder.batch_size)
    print(
        f"{config['num_passages']} passages -> {config['index_type']} index in {output.output_dir} "
        f"({config['index_bytes'] / 2**20:.1f} MiB; embedding {config['embedding_s']} s, "
        f"indexing {config['indexing_s']} s)"
    )
    return config
