# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Retrieve, re-rank and read: answer questions over a passage collection.

    briskbert open-domain-qa --retriever_model_name_or_path runs/embeddings/final \
        --reranker_model_name_or_path runs/reranker/final --reader_model_name_or_path runs/qa/final \
        --squad_file xquad-en.json --articles 24:36 \
        --extra_corpus_file wikitext-2/valid.txt --extra_corpus_min_words 40 --output_dir runs/odqa

    briskbert open-domain-qa ... --question "Who founded the university?"

The retriever (a dual encoder) finds the ``--rerank_top_k`` (or ``--read_top_k``) nearest passages, the
optional re-ranker re-orders them, and the reader (a QA model from ``finetune-qa``) reads the first
``--read_top_k``; the answer is its best span over them. With a SQuAD-format collection and no
``--question``, every question of the file is answered and exact match / F1, the recall of the gold
passage among those read and the time per question are printed and written to ``metrics.json`` (with
``predictions.json``). With ``--question``, one answer is printed with the passages it was read from.
"""

from __future__ import annotations

import json
from pathlib import Path

from briskbert.commands.training_flags import new_parser
from briskbert.training.retrieval.retrieval_arguments import (
    CollectionSource,
    add_collection_arguments,
    add_embedding_arguments,
)


def parse_args(argv=None):
    parser = new_parser(__doc__)
    models = parser.add_argument_group("models")
    models.add_argument("--retriever_model_name_or_path", required=True, help="The dual encoder.")
    models.add_argument(
        "--reader_model_name_or_path", required=True, help="An extractive QA model (finetune-qa)."
    )
    models.add_argument(
        "--reranker_model_name_or_path", default=None, help="A cross-encoder (finetune-reranker)."
    )
    models.add_argument(
        "--rerank_top_k", type=int, default=20, help="Retrieved passages the re-ranker re-orders."
    )
    models.add_argument("--read_top_k", type=int, default=3, help="Passages the reader reads per question.")
    models.add_argument("--reader_max_seq_length", type=int, default=384)
    models.add_argument("--doc_stride", type=int, default=128)
    models.add_argument("--batch_size", type=int, default=32, help="Sequences per forward pass.")
    add_embedding_arguments(parser)
    add_collection_arguments(parser)
    parser.add_argument(
        "--question", default=None, help="Answer this one question and show the passages read."
    )
    parser.add_argument("--output_dir", default=None, help="Where metrics.json and predictions.json go.")
    args = parser.parse_args(argv)
    for flag in ("rerank_top_k", "read_top_k", "batch_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}.")
    return args


def main(argv=None):
    args = parse_args(argv)
    source = CollectionSource.from_args(args)
    from briskbert.training.retrieval.dense import Reranker, load_dual_encoder
    from briskbert.training.retrieval.open_domain_qa import Retriever, load_reader
    from briskbert.training.retrieval.reranking import load_reranker
    from briskbert.training.retrieval.retrieval_arguments import load_collection

    task = load_collection(source)
    encoder, tokenizer, spec = load_dual_encoder(
        args.retriever_model_name_or_path, args.pooling, False if args.no_normalize else None
    )
    retriever = Retriever(encoder.eval(), tokenizer, spec, args.batch_size)
    reader = load_reader(args.reader_model_name_or_path, args.reader_max_seq_length, args.doc_stride)
    reranker = None
    if args.reranker_model_name_or_path:
        model, reranker_tokenizer = load_reranker(args.reranker_model_name_or_path)
        reranker = Reranker(model, reranker_tokenizer, args.rerank_top_k, batch_size=args.batch_size)
    if args.question:
        return _answer_one(args.question, task, retriever, reader, reranker, args.read_top_k)
    return _evaluate(args, task, retriever, reader, reranker)


def _answer_one(question, task, retriever, reader, reranker, read_top_k):
    from briskbert.training.retrieval.open_domain_qa import answer_questions

    texts = dict(zip(task.corpus_ids, task.corpus_texts))
    answer = answer_questions(texts, {"question": question}, retriever, reader, reranker, read_top_k)[
        "question"
    ]
    print(f"answer: {answer.text}   (score {answer.score:.2f}, from passage {answer.passage_id})")
    for rank, passage_id in enumerate(answer.passages_read, 1):
        print(f"  {rank}. [{passage_id}] {texts[passage_id][:200]}")
    return answer


def _evaluate(args, task, retriever, reader, reranker):
    from briskbert.training.retrieval.open_domain_qa import evaluate_open_domain_qa

    metrics, answers = evaluate_open_domain_qa(task, retriever, reader, reranker, args.read_top_k)
    print(json.dumps(metrics, indent=2))
    if args.output_dir:
        folder = Path(args.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
        predictions = {qid: {"answer": a.text, "passage_id": a.passage_id} for qid, a in answers.items()}
        (folder / "predictions.json").write_text(json.dumps(predictions, indent=2, ensure_ascii=False))
    return metrics


if __name__ == "__main__":
    main()
