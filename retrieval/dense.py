# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Dense retrieval: a passage collection with relevance judgements (``qrels``), a dual encoder's embeddings, search
(exact, or in a ``build-index`` folder) and Recall@1/5/10/100, MRR@10 and nDCG@10."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from briskbert.errors import SettingError
from briskbert.modeling.sentence_transformers_files import EmbeddingSpec, read_embedding_spec
from briskbert.retrieval.settings import EmbeddingArguments
from briskbert.training.data.task_data import DataError, load_squad, load_table

RECALL_DEPTHS = (1, 5, 10, 100)
RANK_DEPTH = 10  # MRR@10 and nDCG@10
DEFAULT_SIMILARITY_SCALE = 20.0  # the multiple-negatives ranking loss's default (sentence-transformers' too)


@dataclass
class RetrievalTask:
    corpus_ids: list[str]
    corpus_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, float]]  # {query id: {passage id: relevance}}
    answers: dict[str, list[str]] = field(default_factory=dict)  # SQuAD only: gold answers per query

    def __post_init__(self):
        if not self.corpus_ids or not self.query_ids:
            raise DataError("a retrieval task needs at least one passage and one query.")
        known = set(self.corpus_ids)
        for query_id in self.query_ids:
            relevant = {pid for pid, grade in self.qrels.get(query_id, {}).items() if grade > 0}
            if not known & relevant:
                raise DataError(
                    f"query {query_id!r} has no relevant passage in the corpus (check the qrels)."
                )

    @property
    def corpus(self) -> dict[str, str]:
        return dict(zip(self.corpus_ids, self.corpus_texts))

    @property
    def queries(self) -> dict[str, str]:
        return dict(zip(self.query_ids, self.query_texts))


@dataclass
class Retrieved:
    """Each query's passages, best first, with their scores (same order)."""

    rankings: dict[str, list[str]]
    scores: dict[str, list[float]]


def read_passages(path: str | None, min_words: int = 0) -> list[str]:
    """One passage per line, without blank lines, WikiText headings (`` = Title = ``) and lines under
    ``min_words`` words."""
    if path is None:
        return []
    if not Path(path).is_file():
        raise DataError(f"passage file {path!r} does not exist.")
    lines = (line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines())
    return [
        text
        for text in lines
        if text and not (text.startswith("= ") and text.endswith(" =")) and len(text.split()) >= min_words
    ]


def load_squad_retrieval(
    path: str, articles: tuple[int, int] | None = None, extra_passages: list[str] = ()
) -> RetrievalTask:
    """Every distinct paragraph is a passage ``p<n>`` relevant to its questions; distractors are ``x<n>``."""
    questions, _ = load_squad(path, articles)
    passage_ids: dict[str, str] = {}
    for context in questions["context"]:
        passage_ids.setdefault(context, f"p{len(passage_ids)}")
    return RetrievalTask(
        list(passage_ids.values()) + [f"x{i}" for i in range(len(extra_passages))],
        list(passage_ids) + list(extra_passages),
        list(questions["id"]),
        list(questions["question"]),
        {row["id"]: {passage_ids[row["context"]]: 1.0} for row in questions},
        {row["id"]: list(row["answers"]["text"]) for row in questions},
    )


def _json_lines(path: str, setting: str, *keys: str):
    rows = load_table(path, setting)
    missing = [key for key in keys if key not in rows.column_names]
    if missing:
        raise SettingError(setting, f"{path} lacks {', '.join(missing)}; expected keys {', '.join(keys)}.")
    return rows


def load_collection(source) -> RetrievalTask:
    """The collection a ``CollectionSource`` (or ``PassageSource``) names: SQuAD, or JSON lines corpus, queries and
    qrels (relevance 1 unless given; queries without a judgement left out)."""
    if source.squad_file is not None:
        extra = read_passages(source.extra_corpus_file, source.extra_corpus_min_words)
        return load_squad_retrieval(source.squad_file, source.articles, extra)
    corpus = _json_lines(source.corpus_file, "corpus_file", "id", "text")
    qrels: dict[str, dict[str, float]] = {}
    for row in _json_lines(source.qrels_file, "qrels_file", "query_id", "passage_id"):
        relevance = 1.0 if row.get("relevance") is None else float(row["relevance"])
        qrels.setdefault(str(row["query_id"]), {})[str(row["passage_id"])] = relevance
    queries = [
        row
        for row in _json_lines(source.queries_file, "queries_file", "id", "text")
        if str(row["id"]) in qrels
    ]
    return RetrievalTask(
        [str(passage_id) for passage_id in corpus["id"]],
        list(corpus["text"]),
        [str(row["id"]) for row in queries],
        [row["text"] for row in queries],
        qrels,
    )


def embed_batch(encoder, input_ids, attention_mask, spec: EmbeddingSpec) -> torch.Tensor:
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return spec.pool(hidden, attention_mask)


def batches_by_length(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices in batches of similar length, longest first: little padding."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


@torch.no_grad()
def encode_texts(
    encoder, tokenizer, texts: list[str], spec: EmbeddingSpec, batch_size=64, description="encoding"
):
    """Embeddings of ``texts`` (rows in input order, on the CPU, fp32)."""
    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    order, pieces = [], []
    for chunk in tqdm(batches_by_length(list(map(len, texts)), batch_size), desc=description, leave=False):
        batch = tokenizer(
            [texts[index] for index in chunk],
            truncation=True,
            max_length=spec.max_seq_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        pieces.append(embed_batch(encoder, batch["input_ids"], batch["attention_mask"], spec).float().cpu())
        order += chunk
    encoder.train(was_training)
    return torch.cat(pieces)[torch.argsort(torch.tensor(order))]


def exact_search(
    queries: torch.Tensor, passages: torch.Tensor, top_k: int, block_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores, indices)`` of the ``top_k`` highest dot products per query, best first (blocks bound memory)."""
    top = [
        torch.topk(queries[start : start + block_size] @ passages.T, min(top_k, passages.shape[0]), dim=1)
        for start in range(0, queries.shape[0], block_size)
    ]
    return torch.cat([block.values for block in top]), torch.cat([block.indices for block in top])


def retrieve(
    corpus: dict[str, str], queries: dict[str, str], retriever: Retriever, top_k: int = 100
) -> Retrieved:
    """The ``top_k`` passages of ``corpus`` for each query, by exact search or in ``retriever.index``."""
    query_vectors = retriever.encode(queries.values(), "encoding queries")
    if retriever.index is not None:  # a vector_index.LoadedIndex
        found, scores = retriever.index.search(query_vectors, top_k)
    else:
        scores, rows = exact_search(
            query_vectors, retriever.encode(corpus.values(), "encoding passages"), top_k
        )
        passage_ids = list(corpus)
        found = [[passage_ids[row] for row in hits] for hits in rows.tolist()]
    scores = [row[: len(hits)] for row, hits in zip(scores.tolist(), found)]
    return Retrieved(dict(zip(queries, found)), dict(zip(queries, scores)))


def retrieval_metrics(rankings: dict[str, list[str]], qrels: dict[str, dict[str, float]]) -> dict[str, float]:
    """Recall@1/5/10/100, MRR@10 and nDCG@10 (graded relevance, log2 discount) of ``{query id: passage ids, best
    first}``, averaged over queries; relevant means a relevance above 0."""
    # sentence-transformers' evaluator (an optional extra) only knows binary relevance.
    totals = dict.fromkeys(
        [f"recall@{k}" for k in RECALL_DEPTHS] + [f"mrr@{RANK_DEPTH}", f"ndcg@{RANK_DEPTH}"], 0.0
    )
    for query_id, ranking in rankings.items():
        graded = {passage: grade for passage, grade in qrels[query_id].items() if grade > 0}
        for k in RECALL_DEPTHS:
            totals[f"recall@{k}"] += sum(passage in graded for passage in ranking[:k]) / len(graded)
        head = list(enumerate(ranking[:RANK_DEPTH], 1))
        first = next((rank for rank, passage in head if passage in graded), None)
        totals[f"mrr@{RANK_DEPTH}"] += 1.0 / first if first else 0.0
        dcg = sum(graded.get(passage, 0.0) / math.log2(rank + 1) for rank, passage in head)
        ideal = enumerate(sorted(graded.values(), reverse=True)[:RANK_DEPTH], 1)
        totals[f"ndcg@{RANK_DEPTH}"] += dcg / sum(grade / math.log2(rank + 1) for rank, grade in ideal)
    return {name: value / max(len(rankings), 1) for name, value in totals.items()}


def ranking_shortfall(baseline: dict[str, float], ranked: dict[str, float]) -> list[str]:
    """The headline metrics on which ``ranked`` scores below ``baseline``, as ``"Recall@1 0.829 -> 0.805"``."""
    return [
        f"{name} {baseline[key]:.3f} -> {ranked[key]:.3f}"
        for key, name in ((f"recall@{RECALL_DEPTHS[0]}", "Recall@1"), (f"mrr@{RANK_DEPTH}", "MRR@10"))
        if ranked[key] < baseline[key] - 1e-12
    ]


def rankings_from_indices(task: RetrievalTask, indices: torch.Tensor) -> dict[str, list[str]]:
    return {
        query_id: [task.corpus_ids[index] for index in row]
        for query_id, row in zip(task.query_ids, indices.tolist())
    }


@dataclass
class Retriever:
    """A dual encoder ready to search; ``scale`` (its training's 1/temperature) turns similarities into logits."""

    encoder: object
    tokenizer: object
    spec: EmbeddingSpec
    batch_size: int = 64
    scale: float = DEFAULT_SIMILARITY_SCALE
    index: object = None  # a loaded faiss index over the corpus (build-index) to search instead

    def encode(self, texts, description: str) -> torch.Tensor:
        return encode_texts(
            self.encoder, self.tokenizer, list(texts), self.spec, self.batch_size, description
        )


def embedding_spec(
    name_or_path: str | None, embedding: EmbeddingArguments, max_seq_length=None
) -> EmbeddingSpec:
    """Pooled as ``embedding`` says, else as the model's sentence-transformers files say, else by the mean;
    normalised as they say unless ``embedding.no_normalize``."""
    declared = (read_embedding_spec(name_or_path) if name_or_path else None) or EmbeddingSpec()
    normalize = declared.normalize and not embedding.no_normalize
    return EmbeddingSpec(
        embedding.pooling or declared.pooling, normalize, max_seq_length or declared.max_seq_length
    )


def load_dual_encoder(name_or_path: str, embedding=EmbeddingArguments(), max_seq_length=None):
    """``(encoder, tokenizer, spec)``, the spec as :func:`embedding_spec` decides."""
    encoder = AutoModel.from_pretrained(name_or_path, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
    return encoder, tokenizer, embedding_spec(name_or_path, embedding, max_seq_length)


def load_retriever(
    name_or_path: str, embedding=EmbeddingArguments(), max_seq_length=None, batch_size=64
) -> Retriever:
    """:func:`load_dual_encoder` in eval mode, with the scale its ``training_facts.json`` records, else 20."""
    from briskbert.training.engine.facts import read_training_facts

    encoder, tokenizer, spec = load_dual_encoder(name_or_path, embedding, max_seq_length)
    loss = read_training_facts(name_or_path).job.details.get("loss")
    scale = loss.get("scale") if isinstance(loss, dict) else None
    scale = float(scale) if isinstance(scale, (int, float)) and scale > 0 else DEFAULT_SIMILARITY_SCALE
    return Retriever(encoder.eval(), tokenizer, spec, batch_size, scale)
