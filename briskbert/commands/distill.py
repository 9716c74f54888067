# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Distil a fine-tuned briskbert classifier (the teacher) into a smaller student.

    briskbert distill --teacher_model runs/sst2/final \
        --train_file data/sst2_train_excerpt.tsv --validation_file data/sst2_validation_excerpt.tsv \
        --output_dir runs/sst2-distilled --temperature 2 --alpha_kd 0.5 --hidden_loss_weight 0.0

The student is, by default, the teacher with every other encoder layer (``--student_layers`` picks
others, e.g. ``0,3,5``); ``--student_model`` starts from another briskbert folder and ``--student_preset``
from a fresh config (with the teacher's vocabulary). Loss: ``alpha_kd`` x T²-scaled KL divergence to the
teacher's temperature-softened outputs + (1 - ``alpha_kd``) x the hard-label loss
+ ``hidden_loss_weight`` x hidden-state MSE (see ``training.distill``). Data flags and metrics are those
of ``finetune_classification.py``; labels keep the teacher's ids.
"""

from __future__ import annotations

import argparse

from transformers import DataCollatorWithPadding

from briskbert.training.classification import (
    add_classification_arguments,
    classification_card_facts,
    load_classification_data,
    make_evaluate_fn,
    tokenize_classification,
)
from briskbert.training.distill import DistillationModel, student_from_teacher
from briskbert.training.finetuning import add_data_arguments, load_tokenizer, report_skips
from briskbert.training.loop import add_training_arguments, create_accelerator, run, seed_everything


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = parser.add_argument_group("teacher and student")
    g.add_argument(
        "--teacher_model", type=str, required=True, help="A fine-tuned briskbert classifier folder."
    )
    g.add_argument(
        "--student_model", type=str, default=None, help="Start the student from this briskbert folder."
    )
    g.add_argument(
        "--student_preset", type=str, default=None, help="Or a fresh student from a config preset."
    )
    g.add_argument(
        "--student_layers",
        type=str,
        default=None,
        help="Teacher layers to copy into the student, e.g. 0,2,4 (default: every other layer).",
    )
    g.add_argument("--temperature", type=float, default=2.0)
    g.add_argument(
        "--alpha_kd", type=float, default=0.5, help="Weight of the soft (teacher) loss; the rest is hard."
    )
    g.add_argument(
        "--hidden_loss_weight", type=float, default=0.0, help="Weight of the hidden-state MSE loss."
    )
    g.add_argument("--max_seq_length", type=int, default=128)
    g.add_argument("--tokenizer_name", type=str, default=None)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    add_classification_arguments(parser)
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.student_model, args.student_preset, args.student_layers)) > 1:
        parser.error("give at most one of --student_model, --student_preset, --student_layers.")
    if args.dataset_name is None and args.train_file is None:
        parser.error("give --train_file (and usually --validation_file) or --dataset_name.")
    return args


def build_student(args, teacher, tokenizer):
    from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification

    if args.student_model:
        student = BriskBertForSequenceClassification.from_pretrained(
            args.student_model,
            num_labels=teacher.config.num_labels,
            id2label=teacher.config.id2label,
            label2id=teacher.config.label2id,
            problem_type=teacher.config.problem_type,
        )
    elif args.student_preset:
        config = BriskBertConfig.from_preset(
            args.student_preset,
            vocab_size=teacher.config.vocab_size,
            num_labels=teacher.config.num_labels,
            id2label=teacher.config.id2label,
            label2id=teacher.config.label2id,
            problem_type=teacher.config.problem_type,
            pad_token_id=tokenizer.pad_token_id,
        )
        student = BriskBertForSequenceClassification(config)
    else:
        layers = None
        if args.student_layers:
            try:
                layers = [int(i) for i in args.student_layers.split(",")]
            except ValueError:
                raise ValueError(
                    f"--student_layers {args.student_layers!r}: give indices such as 0,2,4."
                ) from None
        student = student_from_teacher(teacher, layers)
    if student.config.vocab_size != teacher.config.vocab_size:
        raise ValueError(
            f"student vocabulary ({student.config.vocab_size}) differs from the teacher's "
            f"({teacher.config.vocab_size}); both must read the same token ids."
        )
    return student


def main(argv=None):
    args = parse_args(argv)
    accelerator = create_accelerator(args)
    seed_everything(args.seed)
    from briskbert.modeling import BriskBertForSequenceClassification

    teacher = BriskBertForSequenceClassification.from_pretrained(args.teacher_model)
    problem_type = teacher.config.problem_type or "single_label_classification"
    if args.problem_type and args.problem_type != problem_type:
        raise ValueError(f"--problem_type {args.problem_type} differs from the teacher's {problem_type}.")
    args.problem_type = problem_type
    label_list = (
        None
        if problem_type == "regression"
        else [teacher.config.id2label[i] for i in range(teacher.config.num_labels)]
    )
    data = load_classification_data(args, label_list=label_list)
    tokenizer = load_tokenizer(args, args.teacher_model)
    student = build_student(args, teacher, tokenizer)
    model = DistillationModel(student, teacher, args.temperature, args.alpha_kd, args.hidden_loss_weight)
    accelerator.print(
        f"Distilling {teacher.config.num_hidden_layers} -> {student.config.num_hidden_layers} layers "
        f"({sum(p.numel() for p in teacher.parameters()) / 1e6:.1f}M -> "
        f"{sum(p.numel() for p in student.parameters()) / 1e6:.1f}M parameters)"
    )
    train_features, eval_features = tokenize_classification(data, tokenizer, args, accelerator)

    card = {
        **classification_card_facts(
            args, data, train_features, eval_features, report_skips(accelerator, *data.reports)
        ),
        "base_model": args.teacher_model,
        "distillation": {
            "teacher": args.teacher_model,
            "temperature": args.temperature,
            "alpha_kd": args.alpha_kd,
            "hidden_loss_weight": args.hidden_loss_weight,
            "student_init": args.student_model or args.student_preset or f"teacher layers {model.layer_map}",
        },
        "language": "en",
        "license": "apache-2.0",
    }
    return run(
        args,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_features,
        data_collator=DataCollatorWithPadding(tokenizer),
        eval_dataset=eval_features,
        evaluate_fn=make_evaluate_fn(data.spec) if eval_features is not None else None,
        card_facts=card,
    )


if __name__ == "__main__":
    main()
