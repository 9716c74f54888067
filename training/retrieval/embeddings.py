# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""``briskbert finetune-embeddings``: a dual encoder on (query, positive[, negative]) pairs with the
multiple-negatives ranking loss, or on scored pairs (:mod:`.similarity`). ``mini_batch_size`` turns on cached
gradients (GradCache, Gao et al. 2021): memory grows with the mini-batch while the negatives come from the whole
batch."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import get_device_states, set_device_states
from transformers.utils import ModelOutput

from briskbert.errors import SettingError
from briskbert.modeling.sentence_transformers_files import (
    EmbeddingSpec,
    write_sentence_transformers_files,
)
from briskbert.retrieval.dense import (
    embed_batch,
    embedding_spec,
    encode_texts,
    exact_search,
    retrieval_metrics,
)
from briskbert.retrieval.settings import (
    SCORED_PAIR_COLUMNS,
    SCORED_PAIR_LOSSES,
    EmbeddingData,
    EmbeddingSettings,
)
from briskbert.training.data.task_data import DataError, load_squad, load_table
from briskbert.training.engine.distributed import gather_with_grad, gather_with_offset
from briskbert.training.engine.facts import JobFacts
from briskbert.training.engine.task import Task, TaskInputs
from briskbert.training.retrieval.similarity import (
    ScoredPair,
    ScoredPairCollator,
    cosent_loss,
    cosine_mse_loss,
    evaluate_scored_pairs,
    load_scored_pairs,
    score_range,
)
from briskbert.training.tasks.finetuning import card_source_facts, check_model_inputs, load_starting_model
from briskbert.training.tasks.settings import ModelSource

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig


@dataclass
class Pair:
    query: str
    positive: str
    negative: str | None = None


def is_squad_file(path: str) -> bool:
    if not path.endswith(".json") or not Path(path).is_file():
        return False
    with open(path, encoding="utf-8") as handle:
        return handle.read(1) == "{"


def load_training_examples(
    path: str, articles=None, name: str = "train_file"
) -> list[Pair] | list[ScoredPair]:
    """(query|anchor, positive[, negative]) pairs from JSON lines, TSV or CSV, or each question of a SQuAD file
    with its paragraph; scored pairs when the table has ``sentence1``/``sentence2``/``score`` columns."""
    if is_squad_file(path):
        return [Pair(row["question"], row["context"]) for row in load_squad(path, articles)[0]]
    if articles is not None:
        raise DataError(f"article ranges apply to SQuAD files; {path} is a table.")
    rows = load_table(path, name)
    if set(SCORED_PAIR_COLUMNS) <= set(rows.column_names):
        return load_scored_pairs(path, name, rows)
    pairs = []
    for number, row in enumerate(rows, start=2 if path.endswith((".tsv", ".csv")) else 1):
        query, negative = row.get("query") or row.get("anchor"), row.get("negative")
        if not isinstance(query, str) or not isinstance(row.get("positive"), str):
            raise DataError(
                f"{path} line {number}: expected string fields 'query' (or 'anchor') and 'positive' (and "
                "'negative'), or 'sentence1', 'sentence2' and 'score' for scored pairs."
            )
        negative = negative if isinstance(negative, str) and negative else None
        pairs.append(Pair(query, row["positive"], negative))
    with_negative = sum(pair.negative is not None for pair in pairs)
    if 0 < with_negative < len(pairs):
        raise DataError(
            f"{path}: {with_negative} of {len(pairs)} pairs have a 'negative'; give one for every pair or none "
            "(or mine them with mine_hard_negatives)."
        )
    return pairs


def load_pairs(path: str, articles=None, name: str = "train_file") -> list[Pair]:
    examples = load_training_examples(path, articles, name)
    if examples and isinstance(examples[0], ScoredPair):
        raise DataError(f"{path} holds scored pairs; give (query, positive) pairs or a SQuAD file.")
    return examples


def text_id(text: str) -> int:
    """A number for a text, the same in every process (unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


@dataclass
class PairCollator:
    """Rows: the B queries, the B positives, then the B negatives (if any); ``labels`` (first key: the loop counts
    queries) is each query's positive among the candidates, ``candidate_ids`` their texts' ids."""

    tokenizer: object
    max_query_length: int
    max_passage_length: int

    def __call__(self, pairs: list[Pair]) -> dict:
        candidates = [pair.positive for pair in pairs]
        candidates += [pair.negative for pair in pairs if pair.negative is not None]
        queries = self.tokenizer(
            [pair.query for pair in pairs], truncation=True, max_length=self.max_query_length
        )
        passages = self.tokenizer(candidates, truncation=True, max_length=self.max_passage_length)
        padded = self.tokenizer.pad(
            {"input_ids": queries["input_ids"] + passages["input_ids"]}, padding=True, return_tensors="pt"
        )
        return {
            "labels": torch.arange(len(pairs)),
            "input_ids": padded["input_ids"],
            "attention_mask": padded["attention_mask"],
            # Candidates are known by their text across the processes of a run, which share in-batch negatives.
            "candidate_ids": torch.tensor([text_id(text) for text in candidates]),
        }


def mine_hard_negatives(
    encoder, tokenizer, pairs: list[Pair], spec: EmbeddingSpec, batch_size: int = 64
) -> list[Pair]:
    """Each query paired with the training passage ``encoder`` ranks highest but its own positive."""
    passages = list(dict.fromkeys(pair.positive for pair in pairs))
    queries = [pair.query for pair in pairs]
    passage_vectors = encode_texts(encoder, tokenizer, passages, spec, batch_size, "mining: passages")
    query_vectors = encode_texts(encoder, tokenizer, queries, spec, batch_size, "mining: queries")
    _, indices = exact_search(query_vectors, passage_vectors, top_k=min(2, len(passages)))
    mined = []
    for pair, row in zip(pairs, indices.tolist()):
        negative = next((passages[index] for index in row if passages[index] != pair.positive), None)
        mined.append(Pair(pair.query, pair.positive, negative))
    if any(pair.negative is None for pair in mined):
        raise DataError("hard-negative mining needs at least two distinct passages in the training data.")
    return mined


def multiple_negatives_ranking_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    labels: torch.Tensor,
    candidate_ids: torch.Tensor,
    scale: float,
    symmetric: bool = False,
) -> torch.Tensor:
    """Cross-entropy of ``scale`` x cos(query, candidates of every process) against the positive (``symmetric``:
    also of each positive against the queries)."""
    # Unlike sentence-transformers' loss, a copy of a query's positive elsewhere in the batch (two questions
    # about one paragraph) is masked, not counted as a negative.
    queries, candidates = F.normalize(queries.float(), dim=-1), F.normalize(candidates.float(), dim=-1)
    rows = torch.arange(len(labels), device=labels.device)
    positive_ids = candidate_ids[labels]
    all_candidate_ids, offset = gather_with_offset(candidate_ids)
    targets = labels + offset
    scores = scale * queries @ gather_with_grad(candidates).T
    duplicates = all_candidate_ids.unsqueeze(0) == positive_ids.unsqueeze(1)
    duplicates[rows, targets] = False
    loss = F.cross_entropy(scores.masked_fill(duplicates, float("-inf")), targets)
    if not symmetric:
        return loss
    # Each positive against the batch's queries; queries sharing that positive are not its negatives.
    all_positive_ids, query_offset = gather_with_offset(positive_ids)
    reverse = scale * candidates[labels] @ gather_with_grad(queries).T
    same_positive = all_positive_ids.unsqueeze(0) == positive_ids.unsqueeze(1)
    same_positive[rows, rows + query_offset] = False
    reverse_loss = F.cross_entropy(reverse.masked_fill(same_positive, float("-inf")), rows + query_offset)
    return (loss + reverse_loss) / 2


@dataclass
class DualEncoderOutput(ModelOutput):
    loss: torch.Tensor | None = None
    query_embeddings: torch.Tensor | None = None  # scored pairs: the first sentences
    candidate_embeddings: torch.Tensor | None = None  # scored pairs: the second sentences


class Wrapper(nn.Module):
    """A loss around the transformers model in the attribute ``wrapped``; saves the wrapped model alone."""

    wrapped = "model"

    def gradient_checkpointing_enable(self, **kwargs):
        getattr(self, self.wrapped).gradient_checkpointing_enable(**kwargs)

    def save_pretrained(self, folder, state_dict=None, **kwargs):
        if state_dict is not None:  # gathered from a sharded engine: keys carry this wrapper's prefix
            state_dict = {key.removeprefix(f"{self.wrapped}."): value for key, value in state_dict.items()}
        getattr(self, self.wrapped).save_pretrained(folder, state_dict=state_dict, **kwargs)


class DualEncoder(Wrapper):
    """A sentence encoder and its loss; its folder also holds the sentence-transformers files."""

    wrapped = "encoder"

    def __init__(self, encoder, embedding: EmbeddingSpec, loss: EmbeddingSettings):
        super().__init__()
        self.encoder, self.embedding, self.loss_spec = encoder, embedding, loss
        # The pooler is no part of a sentence embedding: frozen, DDP does not wait for its gradients.
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler.requires_grad_(False)

    def save_pretrained(self, folder, state_dict=None, **kwargs):
        super().save_pretrained(folder, state_dict, **kwargs)
        write_sentence_transformers_files(folder, self.embedding, self.encoder.config.hidden_size)

    def forward(self, input_ids, attention_mask, labels, candidate_ids=None, **unused) -> DualEncoderOutput:
        if self.training and self.loss_spec.mini_batch_size:
            return self._cached_gradient_forward(input_ids, attention_mask, labels, candidate_ids)
        embeddings = embed_batch(self.encoder, input_ids, attention_mask, self.embedding)
        return self._loss(embeddings, labels, candidate_ids)

    def _loss(self, embeddings, labels, candidate_ids) -> DualEncoderOutput:
        spec = self.loss_spec
        first, second = embeddings[: len(labels)], embeddings[len(labels) :]
        if spec.loss == "cosent":
            loss = cosent_loss(first, second, labels, spec.scale)
        elif spec.loss == "cosine_mse":
            loss = cosine_mse_loss(first, second, labels, spec.score_range)
        else:
            loss = multiple_negatives_ranking_loss(
                first, second, labels, candidate_ids, spec.scale, spec.symmetric
            )
        return DualEncoderOutput(loss=loss, query_embeddings=first, candidate_embeddings=second)

    def _cached_gradient_forward(self, input_ids, attention_mask, labels, candidate_ids) -> DualEncoderOutput:
        size = self.loss_spec.mini_batch_size
        chunks = [
            (input_ids[i : i + size], attention_mask[i : i + size]) for i in range(0, len(input_ids), size)
        ]
        # 1. Embeddings of every text without a graph, remembering the RNG state so dropout can be replayed.
        rng_states, pieces = [], []
        with torch.no_grad():
            for chunk_ids, chunk_mask in chunks:
                rng_states.append((torch.get_rng_state(), *get_device_states(chunk_ids)))
                pieces.append(embed_batch(self.encoder, chunk_ids, chunk_mask, self.embedding))
        embeddings = torch.cat(pieces).detach().requires_grad_()
        # 2. The loss and its gradient with respect to the embeddings (cheap: no encoder in this graph).
        with torch.enable_grad():
            output = self._loss(embeddings, labels, candidate_ids)
            (embedding_grad,) = torch.autograd.grad(output.loss, embeddings)
        loss = output.loss.detach().requires_grad_()
        # 3. When the loop back-propagates the loss, the chunks are encoded again and the cached gradient
        # (times the loop's scaling of the loss) goes through the encoder, under this forward's autocast.
        kind = input_ids.device.type if input_ids.device.type in ("cuda", "cpu", "xpu", "mps") else "cpu"
        autocast = {"device_type": kind, "enabled": torch.is_autocast_enabled(kind)}
        autocast["dtype"] = torch.get_autocast_dtype(kind)
        loss.register_hook(functools.partial(self._replay, chunks, rng_states, embedding_grad, autocast))
        return DualEncoderOutput(loss=loss)

    def _replay(
        self, chunks, rng_states, embedding_grad, autocast: dict, loss_grad: torch.Tensor
    ) -> torch.Tensor:
        """The backward half of cached gradients: re-encode each chunk with the dropout of its first pass
        (``rng_states``: the CPU state, devices and their states before it) and push its share of the gradient."""
        parameters = [p for p in self.encoder.parameters() if p.requires_grad]
        offset = 0
        for number, ((chunk_ids, chunk_mask), (cpu_state, devices, states)) in enumerate(
            zip(chunks, rng_states)
        ):
            with torch.random.fork_rng(devices=devices), torch.enable_grad(), torch.autocast(**autocast):
                torch.set_rng_state(cpu_state)
                set_device_states(devices, states)
                piece = embed_batch(self.encoder, chunk_ids, chunk_mask, self.embedding)
            grad = (embedding_grad[offset : offset + len(piece)] * loss_grad).to(piece.dtype)
            offset += len(piece)
            if number < len(chunks) - 1:
                # Earlier chunks add to .grad by hand: a backward into the parameters would tell DDP every
                # gradient is ready (and start its all-reduce) once per chunk, "marked as ready twice".
                chunk_grads = torch.autograd.grad(piece, parameters, grad, allow_unused=True)
                for parameter, chunk_grad in zip(parameters, chunk_grads):
                    if chunk_grad is not None:
                        parameter.grad = chunk_grad if parameter.grad is None else parameter.grad + chunk_grad
            else:
                # One backward into the parameters: DDP (when syncing) all-reduces the sum of every chunk.
                torch.autograd.backward(piece, grad_tensors=grad)
        return loss_grad


def evaluate_pairs(model, dataloader, accelerator) -> dict:
    """Retrieval metrics of the validation queries among their distinct candidates, from every process."""
    unwrapped = accelerator.unwrap_model(model)
    queries, candidates, positives = [], {}, []
    for batch in dataloader:
        inputs, n = (batch["input_ids"], batch["attention_mask"]), len(batch["labels"])
        embeddings = embed_batch(unwrapped.encoder, *inputs, unwrapped.embedding).float().cpu()
        ids = batch["candidate_ids"].tolist()
        # Per query: its embedding, then (text id, embedding) of its positive and of its negative (if any).
        rows = [(embeddings[i], *zip(ids[i::n], embeddings[n + i :: n])) for i in range(n)]
        for query, *own in accelerator.gather_for_metrics(rows, use_gather_object=True):
            queries.append(query)
            for key, vector in own:
                candidates.setdefault(key, vector)
            positives.append(own[0][0])
    keys = list(candidates)
    _, indices = exact_search(torch.stack(queries), torch.stack(list(candidates.values())), top_k=100)
    rankings = {str(q): [keys[i] for i in row] for q, row in enumerate(indices.tolist())}
    return retrieval_metrics(rankings, {str(q): {key: 1.0} for q, key in enumerate(positives)})


class EmbeddingTask(Task):
    def __init__(self, model: ModelSource, data: EmbeddingData, settings: EmbeddingSettings):
        """Reads the examples, whose kind decides the loss (and cosine_mse's score range) in ``self.loss``."""
        self.source, self.data = model, data
        self.location = check_model_inputs(model)
        self.train = load_training_examples(data.train_file, data.train_articles)[: data.max_train_samples]
        self.validation = None
        if data.validation_file:
            self.validation = load_training_examples(
                data.validation_file, data.validation_articles, "validation_file"
            )
        scored = isinstance(self.train[0], ScoredPair)
        if self.validation is not None and isinstance(self.validation[0], ScoredPair) != scored:
            raise SettingError(
                "validation_file",
                f"{data.validation_file} and train_file {data.train_file} hold different kinds of examples; give "
                "scored pairs for both (sentence1/sentence2/score) or pairs for both.",
            )
        loss_name = settings.loss or ("cosent" if scored else "multiple_negatives_ranking")
        if (loss_name in SCORED_PAIR_LOSSES) != scored:
            kind = "scored pairs (sentence1, sentence2, score)" if scored else "(query, positive) pairs"
            raise SettingError(
                "loss",
                f"{loss_name} does not fit train_file {data.train_file}, which holds {kind}; use "
                f"{'cosent or cosine_mse' if scored else 'multiple_negatives_ranking'}.",
            )
        if scored and data.mine_hard_negatives:
            raise SettingError(
                "mine_hard_negatives", "needs (query, positive) pairs; the training file holds scored pairs."
            )
        scores_from = settings.score_range or (score_range(self.train) if scored else (0.0, 1.0))
        self.loss = replace(settings, loss=loss_name, score_range=scores_from)

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from briskbert.modeling import BriskBertModel

        source, location = self.source, self.location
        folder = source.model_name_or_path if location else None  # else a config preset: nothing declared
        self.spec = embedding_spec(folder, self.loss, source.max_seq_length)
        encoder, tokenizer = load_starting_model(BriskBertModel, source, location, config.output_dir)
        train = self.train
        if self.data.mine_hard_negatives:
            encoder.to(accelerator.device)
            train = mine_hard_negatives(
                encoder, tokenizer, train, self.spec, config.per_device_eval_batch_size
            )
        accelerator.print(
            f"Examples: {len(train)} train, {len(self.validation or [])} validation; pooling {self.spec}"
        )
        if self.loss.on_scored_pairs:
            collator = ScoredPairCollator(tokenizer, self.spec.max_seq_length)
        else:
            collator = PairCollator(tokenizer, self.data.max_query_length, self.spec.max_seq_length)
        return TaskInputs(
            model=DualEncoder(encoder, self.spec, self.loss),
            train_dataset=train,
            data_collator=collator,
            tokenizer=tokenizer,
            eval_dataset=self.validation,
        )

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        if not self.validation:
            return None
        evaluate = evaluate_scored_pairs if self.loss.on_scored_pairs else evaluate_pairs
        return evaluate(model, dataloader, accelerator)

    def facts(self) -> JobFacts:
        loss = self.loss
        loss_facts = {"name": loss.loss, "scale": loss.scale}
        if loss.loss == "multiple_negatives_ranking":
            loss_facts["symmetric"] = loss.symmetric
        if loss.loss == "cosine_mse":
            loss_facts["score_range"] = list(loss.score_range)
        details = {"embedding": asdict(self.spec), "loss": loss_facts}
        if self.data.mine_hard_negatives:
            details["hard_negatives"] = "mined with the starting model"
        return JobFacts(
            task="sentence-similarity",
            pipeline_tag="sentence-similarity",
            library_name="sentence-transformers",
            **card_source_facts(self.source),
            datasets=(self.data.train_file,),
            eval_dataset=self.data.validation_file,
            details=details,
        )
