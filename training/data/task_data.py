# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Loading and validating fine-tuning data: tables (CSV/TSV/JSON lines), CoNLL files, SQuAD JSON, and
``datasets`` datasets. Schemas are checked up front, naming the file and the fix; rows that need not stop a
run (an answer not in its context, an empty text) are skipped, counted and reported."""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from briskbert.errors import SettingError, UserError
from briskbert.inputs import check_text_file, looks_like_local_path, read_json_object

logger = logging.getLogger(__name__)


class DataError(UserError, ValueError):
    """A dataset does not fit the task: missing columns, no rows, labels of mixed types, ..."""


TABLE_EXTENSIONS = (".csv", ".tsv", ".json", ".jsonl")


def load_table(path: str, setting: str = "train_file") -> datasets.Dataset:
    """A CSV, TSV (without quote handling, as GLUE distributes them), JSON lines or JSON-array file as a Dataset."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in TABLE_EXTENSIONS:
        raise SettingError(
            setting, f"{path}: unsupported extension {extension!r}; use one of {', '.join(TABLE_EXTENSIONS)}."
        )
    check_text_file(path, setting)
    with open(path, encoding="utf-8", newline="") as handle:
        if extension in (".csv", ".tsv"):
            options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if extension == ".tsv" else {}
            reader = csv.DictReader(handle, **options)
            rows = list(reader)
            columns = list(reader.fieldnames)  # check_text_file refused a file without a header
            for number, row in enumerate(rows, start=2):
                if None in row or None in row.values():  # extra fields go under None, missing ones are None
                    fields = sum(value is not None for value in row.values())
                    raise SettingError(
                        setting,
                        f"{path}: line {number} has {fields} fields, the header has {len(columns)} ({columns}).",
                    )
        else:
            text = handle.read()
            array = text.lstrip().startswith("[")  # a JSON array of rows; otherwise JSON lines
            lines = enumerate([text] if array else text.splitlines(), start=1)
            rows = []
            for number, line in ((n, line) for n, line in lines if line.strip()):
                where = path if array else f"{path}: line {number}"
                try:
                    rows += json.loads(line) if array else [json.loads(line)]
                except json.JSONDecodeError as error:
                    raise SettingError(setting, f"{where} is not valid JSON ({error}).") from None
            if not all(isinstance(row, dict) for row in rows):
                raise SettingError(
                    setting, f"{path}: every row must be a JSON object, one per line or in an array."
                )
    if not rows:
        raise SettingError(setting, f"{path} has no rows: add data below the header.")
    return datasets.Dataset.from_list(rows)  # the first row's keys are the columns


def load_named_dataset(
    name: str, config_name: str | None = None, setting: str = "dataset_name"
) -> datasets.DatasetDict:
    """A folder written by ``save_to_disk`` or a dataset name for ``datasets.load_dataset``."""
    if any(os.path.exists(os.path.join(name, saved)) for saved in ("dataset_dict.json", "state.json")):
        loaded = datasets.load_from_disk(name)
        if isinstance(loaded, datasets.Dataset):
            loaded = datasets.DatasetDict({"train": loaded})
        return loaded
    if looks_like_local_path(name) and not os.path.isdir(name):
        raise SettingError(setting, f"{name}: the folder does not exist; check the path.")
    try:
        return datasets.load_dataset(name, config_name)
    except (OSError, ValueError, ConnectionError) as error:  # not found, no network, bad config name
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SettingError(
            setting,
            f"{name!r} could not be loaded ({reason}); give a folder written by "
            "save_to_disk or a dataset name that datasets.load_dataset can reach.",
        ) from None


def pick_split(splits: datasets.DatasetDict, split: str, source: str) -> datasets.Dataset:
    if split not in splits:
        raise DataError(f"{source} has no split {split!r}; it has {sorted(splits)}.")
    return splits[split]


def require_columns(dataset: datasets.Dataset, columns: dict[str, str | None], source: str) -> None:
    """Raise when a column named by a setting is missing. ``columns`` maps settings to column names."""
    missing = {key: name for key, name in columns.items() if name not in (None, *dataset.column_names)}
    if missing:
        described = ", ".join(f"{key}={name!r}" for key, name in missing.items())
        hint = separator_hint(dataset.column_names) or "Pass the right names with the settings shown."
        raise DataError(
            f"{source}: column(s) not found: {described}. Available columns: {dataset.column_names}. {hint}"
        )


def separator_hint(columns: list[str]) -> str:
    """What a table read with the wrong separator looks like (one column, ``'sentence,label'``), said; or ''."""
    only = columns[0] if len(columns) == 1 else ""
    if "," in only:
        return "The file looks comma-separated: use a .csv name or tab separators."
    if "\t" in only:
        return "The file looks tab-separated: use a .tsv name or comma separators."
    return ""


def require_rows(dataset, source: str) -> None:
    if dataset is None or len(dataset) == 0:
        raise DataError(f"{source} is empty: there is nothing to train or evaluate on.")


@dataclass
class SkipReport:
    """Counts of rows skipped or repaired while loading, with a few examples of each reason."""

    source: str
    total: int = 0
    counts: dict = field(default_factory=dict)
    examples: dict = field(default_factory=dict)

    def add(self, reason: str, example: str = "") -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if example and len(self.examples.setdefault(reason, [])) < 3:
            self.examples[reason].append(example)

    def as_dict(self) -> dict:
        return {"source": self.source, "total": self.total, **{f"num_{k}": v for k, v in self.counts.items()}}

    def log(self) -> None:
        for reason, count in self.counts.items():
            shown = "; ".join(self.examples.get(reason, []))
            example = f" (e.g. {shown})" if shown else ""
            logger.warning(
                "%s: %d of %d %s%s", self.source, count, self.total, reason.replace("_", " "), example
            )


CONLL_FORMAT = "one token per line with its tag last (e.g. 'EU B-ORG'), a blank line between sentences"


def load_conll(path: str, setting: str = "train_file") -> datasets.Dataset:
    """A CoNLL-style file (token first, tag last, a blank line between sentences, ``-DOCSTART-`` ignored) as a
    Dataset of ``tokens`` and ``tags``; a file of another shape (JSON, a table) is refused saying so."""
    check_text_file(path, setting)
    sentences, sentence, columns = [], [], None  # columns: (how many fields, the line that set it)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields, shown = line.split(), line.strip()[:60]
            if not fields or fields[0] == "-DOCSTART-":
                sentences += [sentence] if sentence else []
                sentence = []
                continue
            if columns is None and _is_json(line):
                raise _not_conll(path, setting, f"line {number} is JSON ({shown!r})")
            if len(fields) < 2:
                raise _not_conll(path, setting, f"line {number} ({shown!r}) has one field, no tag")
            columns = columns or (len(fields), number)
            if len(fields) != columns[0]:
                raise _not_conll(
                    path,
                    setting,
                    f"line {number} ({shown!r}) has {len(fields)} whitespace-separated fields and "
                    f"line {columns[1]} has {columns[0]} (a text per line, not a token)",
                )
            sentence.append((fields[0], fields[-1]))
    sentences += [sentence] if sentence else []
    if not sentences:
        raise SettingError(setting, f"{path} has no sentences (only blank or -DOCSTART- lines).")
    tokens = [[token for token, _ in sentence] for sentence in sentences]
    tags = [[tag for _, tag in sentence] for sentence in sentences]
    return datasets.Dataset.from_dict({"tokens": tokens, "tags": tags})


def _is_json(line: str) -> bool:
    """Whether a line opens JSON: a lone ``{``/``[`` (indented JSON) or a whole object or array (JSON lines)."""
    line = line.strip()
    if line in ("{", "["):
        return True
    try:
        return line[0] in "{[" and isinstance(json.loads(line), (dict, list))
    except ValueError:
        return False


def _not_conll(path: str, setting: str, found: str) -> SettingError:
    return SettingError(setting, f"{path} is not a CoNLL file: {found}; expected {CONLL_FORMAT}.")


def tags_as_strings(dataset: datasets.Dataset, tag_column: str) -> list[list[str]]:
    """The tag column as strings, whether it holds strings or ``ClassLabel`` ids."""
    names = getattr(getattr(dataset.features[tag_column], "feature", None), "names", None)
    sequences = dataset[tag_column]
    if names is not None:
        return [[names[t] for t in sequence] for sequence in sequences]
    for index, sequence in enumerate(sequences):
        if not isinstance(sequence, (list, tuple)) or not all(isinstance(tag, str) for tag in sequence):
            raise DataError(
                f"tag column {tag_column!r} row {index} is {sequence!r:.80}; expected a list of tag strings such "
                "as 'B-PER' (or a ClassLabel feature that names the ids)."
            )
    return [list(sequence) for sequence in sequences]


def load_squad(
    path: str, max_articles: tuple[int, int] | None = None, setting: str = "train_file"
) -> tuple[datasets.Dataset, SkipReport]:
    """A SQuAD v1.1 / v2.0 file (articles ``max_articles=(start, stop)``) as a flat Dataset of questions, and a
    report: an ``answer_start`` that misses its text moves to the nearest occurrence, an answer not in its
    context is dropped, and a question left without answers (not ``is_impossible``) is skipped."""
    check_text_file(path, setting)
    fix = "expected SQuAD JSON, an object with a 'data' list of articles"
    payload = read_json_object(Path(path), setting, fix)
    if not isinstance(payload.get("data"), list):
        raise SettingError(setting, f"{path}: {fix}.")
    articles = payload["data"][slice(*max_articles) if max_articles else slice(None)]
    report = SkipReport(source=path)
    columns = {name: [] for name in ("id", "title", "context", "question", "answers", "is_impossible")}
    for number, article in enumerate(articles):
        try:
            questions = [(p["context"], qa) for p in article.get("paragraphs", []) for qa in p.get("qas", [])]
            laid_out = all(
                isinstance(context, str) and {"id", "question"} <= set(qa) for context, qa in questions
            )
        except (AttributeError, KeyError, TypeError):
            laid_out = False
        if not laid_out:
            raise SettingError(
                setting,
                f"{path}: article {number} is not laid out as SQuAD: every article needs a 'paragraphs' list, "
                "every paragraph a 'context' string, every question an 'id' and a 'question'.",
            )
        for context, qa in questions:
            report.total += 1
            texts, starts = [], []
            for answer in qa.get("answers", []):
                text, start = answer.get("text", ""), answer.get("answer_start", -1)
                if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int):
                    raise SettingError(
                        setting,
                        f"{path}: question id {qa['id']}: an answer needs a 'text' string and an "
                        f"integer 'answer_start' (character offset), got {answer!r:.80}.",
                    )
                if context[start : start + len(text)] != text or start < 0:
                    occurrences = [i for i in range(len(context)) if text and context.startswith(text, i)]
                    found = min(occurrences, key=lambda i: abs(i - start), default=-1)  # the first of a tie
                    if found < 0:
                        report.add("answers_not_in_context", f"id {qa['id']}: {text[:40]!r}")
                        continue
                    report.add("answers_realigned", f"id {qa['id']}: {start} -> {found}")
                    start = found
                texts.append(text)
                starts.append(start)
            impossible = bool(qa.get("is_impossible", False))
            if not texts and not impossible:
                report.add("questions_skipped_no_answer_in_context", f"id {qa['id']}")
                continue
            row = (str(qa["id"]), article.get("title", ""), context, qa["question"])
            for name, value in zip(columns, (*row, {"text": texts, "answer_start": starts}, impossible)):
                columns[name].append(value)
    if not columns["id"]:
        absent = report.examples.get("answers_not_in_context")
        if absent:
            raise SettingError(
                setting,
                f"{path}: none of its {report.total} questions has an answer found in its context "
                f"(answers not in their context, e.g. {absent[0]}); check the answers' 'text' and 'answer_start'.",
            )
        raise SettingError(
            setting,
            f"{path} has no questions" + (f" in articles {max_articles}" if max_articles else "") + ".",
        )
    return datasets.Dataset.from_dict(columns), report
