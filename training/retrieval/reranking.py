# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Cross-encoder re-ranking: a (query, passage) pair through ``BriskBertForSequenceClassification`` with
one relevance logit.

Training groups (:class:`RerankGroup`) hold a query, its positive and ``num_negatives`` negatives: the
pair's own negative when the data has one, then passages a dual encoder ranks highest (``--negatives_from``
a retriever) or random passages of the training data. :class:`GroupCollator` flattens a batch of groups
into B x G pairs (positive first in each group); :class:`CrossEncoderForRanking` computes either the
listwise loss (cross-entropy over each group's logits, the positive being the target) or the pointwise
loss (binary cross-entropy, positive 1 and negatives 0). The saved folder is the plain sequence-classification
model (``num_labels=1``), so ``AutoModelForSequenceClassification`` and sentence-transformers'
``CrossEncoder`` load it with ``trust_remote_code=True``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from briskbert.training.data.task_data import DataError
from briskbert.training.retrieval.dense import encode_texts, exact_search
from briskbert.training.retrieval.embeddings import Pair
from briskbert.training.retrieval.retrieval_arguments import RANKING_LOSSES
from briskbert.training.retrieval.sentence_transformers_files import EmbeddingSpec


@dataclass
class RerankGroup:
    query: str
    positive: str
    negatives: list[str]


# ------------------------------------------------------------------------------------------------ data
def random_negative_groups(pairs: list[Pair], num_negatives: int, seed: int) -> list[RerankGroup]:
    """Each pair's own negative (if any), topped up with random other passages of the training data."""
    passages = list(
        dict.fromkeys([pair.positive for pair in pairs] + [p.negative for p in pairs if p.negative])
    )
    if len(passages) <= num_negatives:
        raise DataError(
            f"{num_negatives} negatives per query need more than {num_negatives} distinct passages; the "
            f"training data has {len(passages)}. Lower --num_negatives."
        )
    rng = random.Random(seed)
    groups = []
    for pair in pairs:
        negatives = [pair.negative] if pair.negative else []
        while len(negatives) < num_negatives:
            candidate = rng.choice(passages)
            if candidate != pair.positive and candidate not in negatives:
                negatives.append(candidate)
        groups.append(RerankGroup(pair.query, pair.positive, negatives))
    return groups


def retrieved_negative_groups(
    pairs: list[Pair], num_negatives: int, encoder, tokenizer, spec: EmbeddingSpec, batch_size: int = 64
) -> list[RerankGroup]:
    """Each pair's own negative (if any), then the passages ``encoder`` ranks highest that are not its positive:
    the mistakes a re-ranker behind that retriever has to correct."""
    passages = list(
        dict.fromkeys([pair.positive for pair in pairs] + [p.negative for p in pairs if p.negative])
    )
    if len(passages) <= num_negatives:
        raise DataError(f"--num_negatives {num_negatives} needs more distinct passages than {len(passages)}.")
    passage_vectors = encode_texts(encoder, tokenizer, passages, spec, batch_size, "negatives: passages")
    query_vectors = encode_texts(
        encoder, tokenizer, [p.query for p in pairs], spec, batch_size, "negatives: queries"
    )
    _, indices = exact_search(query_vectors, passage_vectors, top_k=num_negatives + 2)
    groups = []
    for pair, row in zip(pairs, indices.tolist()):
        negatives = [pair.negative] if pair.negative else []
        for index in row:
            if len(negatives) < num_negatives and passages[index] not in (pair.positive, *negatives):
                negatives.append(passages[index])
        groups.append(RerankGroup(pair.query, pair.positive, negatives))
    return groups


class GroupCollator:
    """``list[RerankGroup]`` -> ``{"labels": (B, G) with 1 for the positive in column 0, "input_ids",
    "token_type_ids", "attention_mask": (B*G, L)}``."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.tokenizer, self.max_seq_length = tokenizer, max_seq_length

    def __call__(self, groups: list[RerankGroup]) -> dict:
        size = 1 + len(groups[0].negatives)
        queries = [group.query for group in groups for _ in range(size)]
        passages = [passage for group in groups for passage in (group.positive, *group.negatives)]
        encoded = self.tokenizer(
            queries,
            passages,
            truncation="longest_first",
            max_length=self.max_seq_length,
            padding=True,
            return_tensors="pt",
        )
        labels = torch.zeros(len(groups), size)
        labels[:, 0] = 1.0
        return {"labels": labels, **encoded}


# ----------------------------------------------------------------------------------------------- model
class CrossEncoderForRanking(nn.Module):
    """``BriskBertForSequenceClassification`` (one logit) with a ranking loss over groups, for the shared loop."""

    def __init__(self, model, loss: str = "listwise"):
        super().__init__()
        if loss not in RANKING_LOSSES:
            raise ValueError(f"ranking loss {loss!r} is not one of {', '.join(RANKING_LOSSES)}.")
        self.model, self.loss = model, loss

    def gradient_checkpointing_enable(self, **kwargs):
        self.model.gradient_checkpointing_enable(**kwargs)

    def save_pretrained(self, folder, state_dict=None, **kwargs):
        if state_dict is not None:  # gathered from a sharded engine: keys carry this wrapper's prefix
            state_dict = {key.removeprefix("model."): value for key, value in state_dict.items()}
        self.model.save_pretrained(folder, state_dict=state_dict, **kwargs)

    def forward(
        self, labels, input_ids, attention_mask, token_type_ids=None, **unused
    ) -> SequenceClassifierOutput:
        logits = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits
        logits = logits.float().view(labels.shape)
        if self.loss == "listwise":
            loss = F.cross_entropy(logits, labels.argmax(dim=1))
        else:
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


# ------------------------------------------------------------------------------------------- inference
@torch.no_grad()
def score_pairs(
    model, tokenizer, queries: list[str], passages: list[str], max_seq_length: int, batch_size: int = 32
):
    """The relevance logit of each (query, passage) pair, as a CPU float tensor."""
    model.eval()
    device = next(model.parameters()).device
    scores = []
    for start in range(0, len(queries), batch_size):
        encoded = tokenizer(
            queries[start : start + batch_size],
            passages[start : start + batch_size],
            truncation="longest_first",
            max_length=max_seq_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        scores.append(model(**encoded).logits[:, 0].float().cpu())
    return torch.cat(scores) if scores else torch.zeros(0)


def rerank(
    model,
    tokenizer,
    query_texts: dict[str, str],
    rankings: dict[str, list[str]],
    passage_texts: dict[str, str],
    top_k: int,
    max_seq_length: int = 256,
    batch_size: int = 32,
) -> dict[str, list[str]]:
    """Re-order the first ``top_k`` passages of each ranking by the cross-encoder's score; the rest keep
    their retrieval order behind them."""
    from tqdm.auto import tqdm

    reranked = {}
    for query_id, ranking in tqdm(rankings.items(), desc="re-ranking", leave=False):
        head = ranking[:top_k]
        scores = score_pairs(
            model,
            tokenizer,
            [query_texts[query_id]] * len(head),
            [passage_texts[p] for p in head],
            max_seq_length,
            batch_size,
        )
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        reranked[query_id] = [head[index] for index in order] + ranking[top_k:]
    return reranked


def load_reranker(name_or_path: str):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(name_or_path, trust_remote_code=True)
    if model.config.num_labels != 1:
        raise DataError(
            f"re-ranker {name_or_path!r} has {model.config.num_labels} labels; a re-ranker gives one relevance logit "
            "(train one with `briskbert finetune-reranker`)."
        )
    return model, AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=True)
