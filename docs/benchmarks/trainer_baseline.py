"""transformers' Trainer at the budget of briskbert's small runs: the Trainer rows of docs/results.md
("Small runs against transformers' Trainer").

Fine-tunes a BERT checkpoint with ``AutoModelForTokenClassification`` (CoNLL-2003, the first sub-word of each
word labelled, as ``run_ner.py`` and ``briskbert finetune-ner`` do) or ``AutoModelForSequenceClassification``
(SST-2), with the Trainer's defaults (batch 8, linear schedule, AdamW) and one epoch, seed 42 unless
``--seed``, then scores the validation sentences with the project's metrics (entity F1 as conlleval; accuracy
and macro-F1, and the end-of-run verdict) and prints one JSON line. Run from the project root:

    python docs/benchmarks/trainer_baseline.py ner --model "$MINILM" --data ../shared/data \
        --output_dir runs/tr-ner --learning_rate 1e-4 --warmup_ratio 0.1
"""

import argparse
import csv
import json
from pathlib import Path

from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

from briskbert.training.data.task_data import load_conll
from briskbert.training.tasks.metrics import classification_metrics, entity_metrics, not_learned


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task", choices=("ner", "sst2"))
    parser.add_argument("--model", required=True, help="A BERT checkpoint folder (e.g. all-MiniLM-L6-v2's).")
    parser.add_argument("--data", default="../shared/data", help="Holds conll2003/ and sst2/.")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--warmup_ratio", type=float, default=0.0)
    parser.add_argument(
        "--max_train_samples", type=int, default=None, help="Default: 300 (NER), 400 (SST-2)."
    )
    parser.add_argument("--max_eval_samples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def ner_data(args, tokenizer):
    """Features of the first sentences of conll2003/train.txt and dev.txt, the labels, and the scorer."""
    train = load_conll(str(Path(args.data) / "conll2003/train.txt")).select(
        range(args.max_train_samples or 300)
    )
    dev = load_conll(str(Path(args.data) / "conll2003/dev.txt")).select(range(args.max_eval_samples))
    labels = ["O"] + sorted({tag for tags in [*train["tags"], *dev["tags"]] for tag in tags} - {"O"})
    label2id = {tag: i for i, tag in enumerate(labels)}

    def features(split):
        rows = []
        for words, tags in zip(split["tokens"], split["tags"]):
            encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=256)
            ids, previous = [], None
            for word in encoded.word_ids():  # the first sub-word of each word carries its tag
                ids.append(-100 if word is None or word == previous else label2id[tags[word]])
                previous = word
            rows.append({**encoded, "labels": ids})
        return rows

    def score(prediction):
        guessed, gold = [], []
        for predicted, reference in zip(prediction.predictions.argmax(-1), prediction.label_ids):
            kept = reference != -100
            guessed.append([labels[i] for i in predicted[kept]])
            gold.append([labels[i] for i in reference[kept]])
        metrics = {
            k: v for k, v in entity_metrics(guessed, gold).items() if k in ("precision", "recall", "f1")
        }
        words = [(guess, truth) for pair in zip(guessed, gold) for guess, truth in zip(*pair)]
        return {**metrics, "verdict": not_learned(*zip(*words), unit="word")}

    model = AutoModelForTokenClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id
    )
    return model, features(train), features(dev), DataCollatorForTokenClassification(tokenizer), score


def sst2_data(args, tokenizer):
    """Features of the first rows of sst2/train.tsv and validation.tsv, and the scorer."""

    def features(name, count):
        with open(Path(args.data) / "sst2" / name, newline="") as file:
            rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[:count]
        return [
            {**tokenizer(r["sentence"], truncation=True, max_length=128), "labels": int(r["label"])}
            for r in rows
        ]

    def score(prediction):
        metrics = classification_metrics(
            prediction.predictions, prediction.label_ids, "single_label_classification"
        )
        names = ("negative", "positive")
        verdict = not_learned(
            [names[i] for i in prediction.predictions.argmax(-1)], [names[i] for i in prediction.label_ids]
        )
        return {**metrics, "verdict": verdict}

    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    train, dev = (
        features("train.tsv", args.max_train_samples or 400),
        features("validation.tsv", args.max_eval_samples),
    )
    return model, train, dev, DataCollatorWithPadding(tokenizer), score


def main():
    args = parse_args()
    set_seed(args.seed)  # before the new head is initialised, as briskbert seeds before building the model
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model, train, dev, collator, score = (ner_data if args.task == "ner" else sst2_data)(args, tokenizer)
    training = TrainingArguments(
        args.output_dir,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_ratio,  # transformers 5: a float below 1 is a ratio of the total steps
        per_device_train_batch_size=8,
        num_train_epochs=1,
        seed=args.seed,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=training, train_dataset=train, data_collator=collator)
    trainer.train()
    prediction = trainer.predict(dev)
    budget = {"task": args.task, "learning_rate": args.learning_rate, "warmup_ratio": args.warmup_ratio}
    print(json.dumps({**budget, **score(prediction)}))


if __name__ == "__main__":
    main()
