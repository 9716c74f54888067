"""Extractive question answering: windows of long contexts (overlapping by ``doc_stride`` tokens) as features,
and the n-best post-processing that picks each question's answer over its windows."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import scipy.special

from briskbert.errors import SettingError
from briskbert.files import write_atomic
from briskbert.training.data.task_data import load_squad, require_columns, require_rows
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.engine.task import TaskInputs
from briskbert.training.tasks.finetuning import FinetuningTask, first_n, load_splits, pad_to_width
from briskbert.training.tasks.metrics import squad_metrics


def _truncate_questions(questions, tokenizer, max_query_length: int) -> list[str]:
    """Strip leading blanks (they break offsets) and cut questions to ``max_query_length`` tokens."""
    questions = [q.lstrip() for q in questions]
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    cut = []
    for question, offsets in zip(questions, encoded["offset_mapping"]):
        if len(offsets) > max_query_length:
            question = question[: offsets[max_query_length - 1][1]]
        cut.append(question)
    return cut


def _tokenize_windows(examples, tokenizer, max_seq_length: int, doc_stride: int, max_query_length: int):
    if tokenizer.padding_side != "right":
        raise ValueError("question answering features expect a tokenizer that pads on the right.")
    return tokenizer(
        _truncate_questions(examples["question"], tokenizer, max_query_length),
        examples["context"],
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )


def prepare_train_features(examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64):
    """Batched ``datasets.map`` function: windows with ``start_positions``/``end_positions`` of the first answer;
    a window without all of it (and every window of an unanswerable question) points at ``[CLS]``."""
    tokenized = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, max_query_length)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    starts, ends = [], []
    for i, offsets in enumerate(offset_mapping):
        cls_index = tokenized["input_ids"][i].index(tokenizer.cls_token_id)
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples["answers"][sample_mapping[i]]
        if not answers["answer_start"]:
            starts.append(cls_index)
            ends.append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        context_start = sequence_ids.index(1)
        context_end = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        if offsets[context_start][0] > start_char or offsets[context_end][1] < end_char:
            starts.append(cls_index)  # the answer is not (entirely) inside this window
            ends.append(cls_index)
            continue
        token_start = context_start
        while token_start <= context_end and offsets[token_start][0] <= start_char:
            token_start += 1
        token_end = context_end
        while token_end >= context_start and offsets[token_end][1] >= end_char:
            token_end -= 1
        starts.append(token_start - 1)
        ends.append(token_end + 1)
    tokenized["start_positions"] = starts
    tokenized["end_positions"] = ends
    return tokenized


def keep_some_answerless_windows(features, fraction: float, seed: int):
    """Keep every training window that contains its answer and a seeded random ``fraction`` of the
    windows whose target is ``[CLS]`` (position 0: no answer in the window, or an unanswerable question)."""
    rng = np.random.default_rng(seed)
    keep = [
        index
        for index, start in enumerate(features["start_positions"])
        if start != 0 or rng.random() < fraction
    ]
    return features.select(keep)


def prepare_eval_features(examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64):
    """Batched ``datasets.map`` function: windows with ``example_id`` and context-only ``offset_mapping``
    (``None`` for question and special tokens), for :func:`postprocess_qa_predictions`."""
    tokenized = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, max_query_length)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = []
    for i in range(len(tokenized["input_ids"])):
        sequence_ids = tokenized.sequence_ids(i)
        tokenized["example_id"].append(examples["id"][sample_mapping[i]])
        tokenized["offset_mapping"][i] = [
            offset if sequence_ids[k] == 1 else None
            for k, offset in enumerate(tokenized["offset_mapping"][i])
        ]
    return tokenized


def postprocess_qa_predictions(
    examples,
    features,
    start_logits,
    end_logits,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
):
    """``({id: answer}, {id: n-best candidates, best first})`` from one row of (right-padded) start and end
    logits per feature: each example's answer over all its windows."""
    num_features = len(features["example_id"])
    if num_features != len(start_logits) or num_features != len(end_logits):
        raise ValueError(
            f"got logits for {len(start_logits)}/{len(end_logits)} windows but {num_features} features; "
            "evaluation must return exactly one row per window (gather_for_metrics drops the padding)."
        )
    features_per_example = collections.defaultdict(list)
    for index, example_id in enumerate(features["example_id"]):
        features_per_example[example_id].append(index)
    all_offsets = features["offset_mapping"]

    predictions, all_nbest = {}, {}
    for example in examples:
        context, min_null_score, candidates = example["context"], np.inf, []
        for index in features_per_example[example["id"]]:
            offsets = all_offsets[index]
            starts = np.asarray(start_logits[index], dtype=np.float64)[: len(offsets)]
            ends = np.asarray(end_logits[index], dtype=np.float64)[: len(offsets)]
            min_null_score = min(min_null_score, starts[0] + ends[0])  # [CLS] is the first token
            best_starts = np.argsort(starts)[-1 : -n_best_size - 1 : -1]
            best_ends = np.argsort(ends)[-1 : -n_best_size - 1 : -1]
            for s in best_starts:
                if offsets[s] is None:
                    continue
                for e in best_ends:
                    if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                        continue
                    candidates.append(
                        {
                            "text": context[offsets[s][0] : offsets[e][1]],
                            "score": float(starts[s] + ends[e]),
                            "start_logit": float(starts[s]),
                            "end_logit": float(ends[e]),
                            "answer_start": int(offsets[s][0]),
                        }
                    )
        candidates.sort(key=lambda c: c["score"], reverse=True)
        nbest = candidates[:n_best_size]
        if version_2 and np.isfinite(min_null_score):
            best_score = nbest[0]["score"] if nbest else -np.inf
            null = {"text": "", "score": float(min_null_score), "start_logit": 0.0, "end_logit": 0.0}
            nbest = sorted(nbest + [null], key=lambda c: c["score"], reverse=True)[:n_best_size]
            best_text = next((c["text"] for c in nbest if c["text"]), "")
            answer = "" if min_null_score - best_score > null_score_diff_threshold else best_text
        else:
            answer = nbest[0]["text"] if nbest else ""
        for candidate, probability in zip(nbest, scipy.special.softmax([c["score"] for c in nbest] or [0.0])):
            candidate["probability"] = float(probability)
        predictions[example["id"]] = answer
        all_nbest[example["id"]] = nbest
    return predictions, all_nbest


def _checked(dataset, name: str, version_2: bool):
    """Rows and columns checked; unanswerable questions (no answer) need ``version_2``."""
    require_rows(dataset, name)
    require_columns(dataset, {f"({key})": key for key in ("id", "question", "context", "answers")}, name)
    impossible = sum(not answers["text"] for answers in dataset["answers"])
    if impossible and not version_2:  # they would be trained on as noise
        raise SettingError(
            "version_2_with_negative",
            f"is needed: {name} has {impossible} questions without an answer (SQuAD v2.0); set it to "
            "train and evaluate with null answers.",
        )
    return dataset


class QaTask(FinetuningTask):
    """``briskbert finetune-qa``: extractive question answering over windows of long contexts."""

    pipeline_tag = "question-answering"
    model_class = "BriskBertForQuestionAnswering"

    def load_data(self) -> None:
        import datasets

        data, task = self.data_source, self.settings
        self.windows = task.window_kwargs(self.source.max_seq_length)  # checked before anything loads
        self.reports = []

        def squad(path: str, setting: str):
            articles = getattr(task, setting.replace("_file", "_articles"))  # train_file: train_articles
            dataset, report = load_squad(path, articles, setting)
            self.reports.append(report)
            return dataset

        train, evaluation = load_splits(data, file_loader=squad)
        if task.extra_train_file:
            extra = squad(task.extra_train_file, "extra_train_file").cast(train.features)
            train = first_n(datasets.concatenate_datasets([train, extra]), data.max_train_samples)
        version_2 = task.version_2_with_negative
        self.train = _checked(train, data.describe("train"), version_2)
        self.evaluation = (
            None if evaluation is None else _checked(evaluation, data.describe("validation"), version_2)
        )

    def build(self, accelerator, config: TrainingConfig) -> TaskInputs:
        from transformers import DataCollatorWithPadding

        from briskbert.modeling.pipeline_question_answering import register_question_answering_pipeline

        self.output_dir, task = config.output_dir, self.settings
        model, tokenizer = self.load_starting_model(config)
        register_question_answering_pipeline(model.config)  # transformers 5 has none: name ours
        self.tokenize(
            accelerator, prepare_train_features, prepare_eval_features, tokenizer=tokenizer, **self.windows
        )
        if task.keep_answerless_windows < 1.0:
            self.train_features = keep_some_answerless_windows(
                self.train_features, task.keep_answerless_windows, config.seed
            )
        eval_inputs = None
        counts = f"Training: {len(self.train)} questions -> {len(self.train_features)} windows"
        if self.eval_features is not None:
            counts += f"; evaluation: {len(self.evaluation)} questions -> {len(self.eval_features)} windows"
            eval_inputs = self.eval_features.remove_columns(["example_id", "offset_mapping"])
        accelerator.print(counts)
        return self.task_inputs(
            accelerator, model, tokenizer, DataCollatorWithPadding(tokenizer), eval_inputs
        )

    def evaluate(self, model, dataloader, accelerator) -> dict:
        """Windows' logits -> answers (written to ``eval_predictions.json``) -> SQuAD exact match and F1."""
        from briskbert.training.engine.evaluation import evaluation_loop

        task, width = self.settings, self.source.max_seq_length

        def gather(batch, outputs):  # padded to one width: the loop concatenates rows of one shape
            return {
                "start": pad_to_width(outputs.start_logits, width, -1e4),
                "end": pad_to_width(outputs.end_logits, width, -1e4),
            }

        gathered = evaluation_loop(model, dataloader, accelerator, gather)
        predictions, nbest = postprocess_qa_predictions(
            self.evaluation,
            self.eval_features,
            gathered["start"].numpy(),
            gathered["end"].numpy(),
            n_best_size=task.n_best_size,
            max_answer_length=task.max_answer_length,
            version_2=task.version_2_with_negative,
            null_score_diff_threshold=task.null_score_diff_threshold,
        )
        if accelerator.is_main_process:
            for name, content in (("eval_predictions", predictions), ("eval_nbest_predictions", nbest)):
                text = json.dumps(content, indent=2, ensure_ascii=False)
                write_atomic(Path(self.output_dir) / f"{name}.json", text)
        references = {example["id"]: list(example["answers"]["text"]) for example in self.evaluation}
        return squad_metrics(predictions, references, version_2=task.version_2_with_negative)

    def data_facts(self) -> dict:
        extra = self.settings.extra_train_file
        return self.data_source.card_facts(extra_train_files=(extra,) if extra else ())

    def details(self) -> dict:
        task = self.settings
        spans = ("train_articles", "extra_train_articles", "validation_articles")
        articles = {name: (span := getattr(task, name)) and f"{span[0]}:{span[1]}" for name in spans}
        return {
            **articles,
            "num_train_questions": len(self.train),
            "num_train_windows": len(self.train_features),
            "keep_answerless_windows": task.keep_answerless_windows,
            "num_eval_questions": len(self.evaluation) if self.evaluation is not None else 0,
            "max_seq_length": self.source.max_seq_length,
            "doc_stride": task.doc_stride,
            "version_2_with_negative": task.version_2_with_negative,
            "data_skipped": self.skipped,
        }
