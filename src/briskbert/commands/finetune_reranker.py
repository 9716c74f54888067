# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a cross-encoder re-ranker on (query, passage) pairs and choose how to fuse it with retrieval.

    briskbert finetune-reranker --model_name_or_path runs/qa/final \
        --train_file xquad-en.json --train_articles 0:20 --negatives_from runs/embed/final \
        --num_negatives 3 --num_train_epochs 2 \
        --validation_file xquad-en.json --validation_articles 20:24 \
        --validation_extra_corpus_file wikitext-2/test.txt --validation_extra_corpus_min_words 40 \
        --output_dir runs/reranker

Each query is read with its positive passage and ``--num_negatives`` negatives through
``BriskBertForSequenceClassification`` with one relevance logit. Data: JSON lines with ``query``,
``positive`` and optional ``negative``, or a SQuAD-format ``.json`` file whose other paragraphs supply
the negatives. Negatives: the pair's own, then passages drawn each epoch from the
``--negative_pool_size`` that the dual encoder ``--negatives_from`` ranks highest among the training
passages and ``--negatives_corpus_file`` (the mistakes the re-ranker has to fix), else random passages.
``--loss listwise`` is cross-entropy over each group (the positive must win); ``pointwise`` is binary
cross-entropy per pair. Any model the other jobs take can be the start, e.g. a reader from
``finetune-qa``, which already reads questions against passages.

The fusion weights are always chosen: on ``--validation_file`` (held-out queries: SQuAD articles or JSON lines
pairs, plus optional distractors ``--validation_extra_corpus_file``), else on ``--validation_split_percentage``
of the training documents held out whole (SQuAD articles; for pairs, the groups that share a passage), searched
among all the training passages. The validation groups are scored during training, and at the end the weights
that fuse the re-ranker's logit and the passage's BM25 score with the retriever's (``--fusion_retriever``, by
default ``--negatives_from``, else the starting model) similarity are chosen on the validation queries' top
``--rerank_top_k`` and saved as ``final/fusion.json`` with what was held out; the card states both.
``evaluate-retrieval`` and ``open-domain-qa`` apply them by default (a folder without ``fusion.json`` keeps
retrieval's order). A weight of 0 means that signal did not help on validation; both 0, the fused ranking is
retrieval's own.
The saved ``final/`` folder (``pipeline_tag: text-ranking``) loads with
``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` (``trust_remote_code=True``).
"""

from __future__ import annotations

from dataclasses import replace

from briskbert.commands.arguments import parse
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.retrieval.settings import RerankerData, RerankerValidation
from briskbert.training.tasks.settings import ModelSource


def main(argv=None):
    # 2e-4: the new one-logit head learns within tens of CPU steps (3e-5 left the loss at ln 4, docs/results.md).
    source, data, validation, config = parse(
        __doc__, ModelSource, RerankerData, RerankerValidation, TrainingConfig, argv=argv,
        learning_rate=2e-4, num_train_epochs=1.0, per_device_train_batch_size=8, warmup_ratio=0.1,
        max_seq_length=256,
    )  # fmt: skip
    if validation.fusion_retriever is None:
        retriever = data.negatives_from or source.model_name_or_path
        validation = replace(validation, fusion_retriever=retriever)

    from briskbert.training.retrieval.reranker_task import RerankerTask

    task = RerankerTask(source, data, validation)

    from briskbert.commands.training_run import train

    return train(task, config)


if __name__ == "__main__":
    main()
