"""Token classification (NER): a word's tag on its first sub-word (``label_all_tokens``: on every one), scored
on whole gold sentences (words cut off by ``max_seq_length`` count as ``O``); for a CRF head an ``I-X`` that
starts an entity is trained as ``B-X``, so the CRF can produce every gold sequence."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from briskbert.errors import SettingError
from briskbert.training.data.task_data import (
    DataError,
    load_conll,
    require_columns,
    require_rows,
    tags_as_strings,
)
from briskbert.training.engine.task import TaskInputs
from briskbert.training.tasks.finetuning import FinetuningTask, load_splits, pad_to_width
from briskbert.training.tasks.metrics import entity_metrics, get_entities, not_learned

if TYPE_CHECKING:
    from briskbert.training.engine.config import TrainingConfig

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


def build_label_list(
    train_tags: list[list[str]],
    eval_tags: list[list[str]] | None = None,
    sources: tuple[str, str] = ("the training data", "the evaluation data"),
) -> list[str]:
    """Sorted tag set of training and evaluation data (``O`` first); a tag without a training example is warned of."""
    train_counts = Counter(tag for sentence in train_tags for tag in sentence)
    eval_counts = Counter(tag for sentence in eval_tags or [] for tag in sentence)
    if not train_counts:
        raise DataError(f"{sources[0]} has no tags.")
    labels = sorted(train_counts | eval_counts, key=lambda tag: (tag != "O", tag))  # O first
    for tag in labels:
        try:
            get_entities([tag])  # raises on tags that are not O / B- / I- / E- / S-
        except ValueError as error:
            where = sources[0] if tag in train_counts else sources[1]
            raise DataError(
                f"{where}: {error} Fix the tags (or pick the tag column with tag_column)."
            ) from None
    if unseen := sorted(tag for tag in eval_counts if tag not in train_counts):
        described = ", ".join(f"{tag!r} ({eval_counts[tag]}x)" for tag in unseen)
        logger.warning(
            f"{sources[1]} has tags with no training example: {described}; they are in the label set, but the "
            "model can hardly learn to predict them."
        )
    return labels


def tokenize_and_align_labels(
    examples,
    tokenizer,
    label2id: dict,
    token_column: str = "tokens",
    tag_column: str = "tags",
    max_seq_length: int = 256,
    label_all_tokens: bool = False,
):
    """Batched ``datasets.map`` function: tokenised words with one label per sub-word, and each
    sub-word's word index in ``word_ids`` (-1 for special tokens; drop the column before training)."""
    tokenized = tokenizer(
        examples[token_column], is_split_into_words=True, truncation=True, max_length=max_seq_length
    )
    # a word's continuation sub-words: B-X becomes I-X (where that is a label)
    continuation = {
        tag: label2id.get("I-" + tag[2:], label2id[tag]) if tag.startswith("B-") else label2id[tag]
        for tag in label2id
    }
    all_labels, all_word_ids = [], []
    for i, tags in enumerate(examples[tag_column]):
        word_ids = tokenized.word_ids(batch_index=i)
        labels, previous = [], None
        for word in word_ids:
            if word is None:
                labels.append(IGNORE_INDEX)
            elif word != previous:
                labels.append(label2id[tags[word]])
            else:
                labels.append(continuation[tags[word]] if label_all_tokens else IGNORE_INDEX)
            previous = word
        all_labels.append(labels)
        all_word_ids.append([-1 if w is None else w for w in word_ids])
    tokenized["labels"] = all_labels
    tokenized["word_ids"] = all_word_ids  # for evaluation (-1: special token); not a model input
    return tokenized


def word_predictions(
    predicted_ids, word_ids: list[list[int | None]], id2label: dict, num_words: list[int]
) -> tuple[list[list[str]], int]:
    """``(tags per sentence, words without a prediction)``: each word's tag read at its first sub-word; words
    beyond the model's window (or with no token) get ``O``."""
    predictions, truncated = [], 0
    for row, (ids, total) in enumerate(zip(word_ids, num_words)):
        tags = ["O"] * total
        seen = set()
        best = np.asarray(predicted_ids[row])
        for position, word in enumerate(ids):
            if word is None or word < 0 or word in seen:
                continue
            seen.add(word)
            tags[word] = id2label[int(best[position])]
        truncated += total - len(seen)
        predictions.append(tags)
    return predictions, truncated


def _starts_inside(tag: str, previous: str) -> bool:
    return tag.startswith("I-") and previous not in ("B-" + tag[2:], tag)


def bio_violations(tags: list[str]) -> int:
    """How many ``I-X`` tags follow neither ``B-X`` nor ``I-X``: transitions IOB2 forbids (``O I-PER``)."""
    return sum(_starts_inside(tag, previous) for tag, previous in zip(tags, ["O", *tags]))


def invalid_bio_share(sentences: list[list[str]], labels: list[str]) -> float:
    """The share of ``sentences`` with at least one IOB2 violation, counting only types with a ``B-`` tag in
    ``labels`` (IO-tagged types start entities with ``I-``)."""
    begun = {label[2:] for label in labels if label.startswith("B-")}
    invalid = sum(
        bio_violations([tag if tag[2:] in begun else "O" for tag in sentence]) > 0 for sentence in sentences
    )
    return invalid / len(sentences) if sentences else 0.0


def crf_training_tags(
    sentences: list[list[str]], labels: list[str], source: str
) -> tuple[list[list[str]], int]:
    """``(tags, sentences changed)``: each ``I-X`` that starts an entity becomes ``B-X`` (when that is a label);
    a sentence the scheme still forbids (a broken BIOES sequence) is a DataError."""
    from briskbert.modeling.crf import allowed_transitions

    constraints = allowed_transitions(labels)
    label2id = {label: i for i, label in enumerate(labels)}
    repaired, changed = [], 0
    for number, sentence in enumerate(sentences, start=1):
        fixed = [
            "B-" + tag[2:] if _starts_inside(tag, previous) and "B-" + tag[2:] in label2id else tag
            for tag, previous in zip(sentence, ["O", *sentence])
        ]
        if not constraints.allows([label2id[tag] for tag in fixed]):
            raise DataError(
                f"{source}: sentence {number} ({' '.join(sentence)}) breaks the tag scheme, so the CRF cannot "
                "produce it; fix its tags or train without crf."
            )
        changed += fixed != sentence
        repaired.append(fixed)
    return repaired, changed


@dataclass
class NerEvaluator:
    """Scores predicted label ids of an evaluation set against its whole gold sentences."""

    gold_tags: list[list[str]]
    word_ids: list[list[int | None]]
    id2label: dict
    verdict: str | None = None  # the last call's not_learned line

    def __call__(self, predicted_ids) -> dict:
        from briskbert.training.engine.evaluation import majority_class, not_above_baseline

        predictions, truncated = word_predictions(
            predicted_ids, self.word_ids, self.id2label, [len(t) for t in self.gold_tags]
        )
        result = entity_metrics(predictions, self.gold_tags)
        guessed = [tag for sentence in predictions for tag in sentence]
        gold = [tag for sentence in self.gold_tags for tag in sentence]
        majority, result["majority_accuracy"] = majority_class(gold)
        self.verdict = not_learned(guessed, gold, "word") or not_above_baseline(
            "eval_accuracy", result["accuracy"], result["majority_accuracy"], f"tagging every word {majority}"
        )
        result["num_words_not_predicted"] = truncated
        result["invalid_bio_share"] = invalid_bio_share(predictions, list(self.id2label.values()))
        for entity_type, scores in result.pop("per_type").items():
            result[f"{entity_type}_f1"] = scores["f1"]
        return result

    def evaluate(self, model, dataloader, accelerator) -> dict:
        """The ids the model decodes (Viterbi with a CRF, arg-max without), gathered and scored."""
        from briskbert.training.engine.evaluation import evaluation_loop

        width = max(map(len, self.word_ids))  # no batch is longer than its longest sentence

        def gather(batch, outputs):
            return {"predictions": pad_to_width(outputs.tags, width, IGNORE_INDEX)}

        gathered = evaluation_loop(model, dataloader, accelerator, gather)
        return self(gathered["predictions"].long().numpy())


def ner_features(
    dataset, tags, tokenizer, label2id: dict, token_column: str, max_seq_length: int, label_all_tokens: bool
):
    """Tokenised sentences with aligned ``labels`` and ``word_ids`` (for evaluation)."""
    dataset = dataset.add_column("__tags", tags)  # string tags, whatever the source's tag column held
    arguments = (tokenizer, label2id, token_column, "__tags", max_seq_length, label_all_tokens)
    return dataset.map(
        lambda batch: tokenize_and_align_labels(batch, *arguments),
        batched=True,
        remove_columns=dataset.column_names,
    )


class NerTask(FinetuningTask):
    """``briskbert finetune-ner``: token classification of CoNLL-style sentences with a softmax or CRF head."""

    pipeline_tag = "token-classification"
    model_class = "BriskBertForTokenClassification"

    def load_data(self) -> None:
        """CoNLL files or a dataset, checked for rows and columns, tags read as strings; the label list."""
        data, settings = self.data_source, self.settings
        train, evaluation = load_splits(data, file_loader=load_conll)
        train_name, eval_name = data.describe("train"), data.describe("validation")
        tag_column = settings.tag_column or (
            "ner_tags" if "tags" not in train.column_names and "ner_tags" in train.column_names else "tags"
        )
        columns = {"token_column": settings.token_column, "tag_column": tag_column}

        def read(table, name: str):
            require_rows(table, name)
            require_columns(table, columns, name)
            return table.select_columns([settings.token_column]), tags_as_strings(table, tag_column)

        self.train, self.train_tags = read(train, train_name)
        self.evaluation, self.eval_tags = (None, None) if evaluation is None else read(evaluation, eval_name)
        self.labels = build_label_list(self.train_tags, self.eval_tags, (train_name, eval_name))
        self.reports = []  # nothing is skipped: a malformed CoNLL file is refused

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        """Both splits tokenised with aligned labels (with a CRF, from :func:`crf_training_tags`)."""
        from transformers import DataCollatorForTokenClassification

        labels, settings = self.labels, self.settings
        accelerator.print(f"Tags ({len(labels)}): {labels}")
        label2id, id2label = {label: i for i, label in enumerate(labels)}, dict(enumerate(labels))
        crf = {"use_crf": True} if settings.crf else {}
        model, tokenizer = self.load_starting_model(
            config, num_labels=len(labels), id2label=id2label, label2id=label2id, **crf
        )
        self.crf = model.config.use_crf  # a CRF model fine-tuned further keeps its CRF
        if self.crf and settings.label_all_tokens:  # the model to fine-tune already has a CRF
            raise SettingError(
                "label_all_tokens",
                "does not fit a model with a CRF head (use_crf), which tags one position per word.",
            )
        features = (tokenizer, label2id, settings.token_column, self.source.max_seq_length)
        train_tags, eval_tags, repaired = self.train_tags, self.eval_tags, 0
        if self.crf:
            train_tags, repaired = crf_training_tags(train_tags, labels, "the training data")
            if eval_tags is not None:
                eval_tags, repaired_eval = crf_training_tags(eval_tags, labels, "the evaluation data")
                repaired += repaired_eval
        with accelerator.main_process_first():
            train = ner_features(self.train, train_tags, *features, settings.label_all_tokens)
            self.train_features = train.remove_columns("word_ids")
            self.eval_features = self.evaluator = None
            if self.evaluation is not None:
                evaluation = ner_features(self.evaluation, eval_tags, *features, False)
                self.evaluator = NerEvaluator(self.eval_tags, evaluation["word_ids"], id2label)
                self.eval_features = evaluation.remove_columns("word_ids")
        if repaired:
            accelerator.print(
                f"CRF: {repaired} sentences start an entity with I-X; trained as B-X (the same entities under "
                "conlleval)."
            )
        return self.task_inputs(accelerator, model, tokenizer, DataCollatorForTokenClassification(tokenizer))

    def count_items(self, batch: dict) -> int:
        """The token-classification loss is a mean over labelled sub-words."""
        return int((batch["labels"] != IGNORE_INDEX).sum())

    def evaluate(self, model, dataloader, accelerator) -> dict | None:
        if self.evaluator is None:
            return None
        result = self.evaluator.evaluate(model, dataloader, accelerator)
        self.verdict = self.evaluator.verdict
        return result

    def details(self) -> dict:
        return {
            "labels": self.labels,
            "num_train_sentences": len(self.train_features),
            "num_eval_sentences": len(self.eval_features) if self.eval_features is not None else 0,
            "label_all_tokens": self.settings.label_all_tokens,
            "crf": self.crf,
        }
