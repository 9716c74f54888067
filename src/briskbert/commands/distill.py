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

import dataclasses

from briskbert.training.engine.arguments import add_training_arguments
from briskbert.training.tasks.task_arguments import (
    add_classification_arguments,
    add_data_arguments,
    add_distill_arguments,
    classification_task_from_args,
    data_source_from_args,
    distill_setup_from_args,
    new_parser,
)


def parse_args(argv=None):
    parser = new_parser(__doc__)
    add_distill_arguments(parser)
    add_data_arguments(parser, "CSV, TSV or JSON lines file with a header / keys.")
    add_classification_arguments(parser)
    add_training_arguments(parser)
    return parser.parse_args(argv)


def check_model_folders(setup) -> None:
    """Teacher (with its tokenizer unless --tokenizer_name), student and tokenizer folders, up front."""
    from briskbert.inputs import check_model_source, check_tokenizer_source

    check_model_source(setup.teacher_model, "--teacher_model", need_tokenizer=setup.tokenizer_name is None)
    if setup.student_model is not None:
        check_model_source(setup.student_model, "--student_model", need_tokenizer=False)
    if setup.tokenizer_name is not None:
        check_tokenizer_source(setup.tokenizer_name, "--tokenizer_name")


def teacher_labels(teacher_config, task):
    """``(task with the teacher's problem type, the teacher's label names or None)``: the student
    predicts the teacher's classes under the teacher's ids."""
    from briskbert.errors import UserError

    problem_type = teacher_config.problem_type or "single_label_classification"
    if task.problem_type and task.problem_type != problem_type:
        raise UserError(f"--problem_type {task.problem_type} differs from the teacher's {problem_type}.")
    names = None
    if problem_type != "regression":
        names = [teacher_config.id2label[i] for i in range(teacher_config.num_labels)]
    if task.label_names is not None and names is not None and list(task.label_names) != names:
        raise UserError(
            f"--label_names {','.join(task.label_names)} differs from the teacher's labels {','.join(names)}."
        )
    return dataclasses.replace(task, problem_type=problem_type), names


def main(argv=None):
    args = parse_args(argv)
    setup, data_source = distill_setup_from_args(args), data_source_from_args(args)
    task = classification_task_from_args(args)

    # Inputs first: a wrong path costs a second, not the import of torch and two models.
    from briskbert.training.tasks.finetuning import training_config

    config = training_config(args)
    check_model_folders(setup)

    from briskbert.training.engine.facts import base_model_id
    from briskbert.training.engine.loop import run, seed_everything
    from briskbert.training.tasks.classification import (
        classification_card_facts,
        classification_run_inputs,
        load_classification_data,
        tokenize_classification,
    )
    from briskbert.training.tasks.distill import DistillationModel, build_student, load_teacher
    from briskbert.training.tasks.finetuning import load_tokenizer, report_skips, start_accelerator

    teacher = load_teacher(setup.teacher_model)
    task, label_names = teacher_labels(teacher.config, task)
    data = load_classification_data(
        data_source,
        task,
        label_names=label_names,
        names_source=f"the teacher's labels (--teacher_model {setup.teacher_model})",
    )
    accelerator = start_accelerator(config)
    seed_everything(config.seed)
    tokenizer = load_tokenizer(setup.tokenizer_name or setup.teacher_model)
    student = build_student(setup, teacher, tokenizer.pad_token_id)
    model = DistillationModel(student, teacher, setup.temperature, setup.alpha_kd, setup.hidden_loss_weight)
    accelerator.print(
        f"Distilling {teacher.config.num_hidden_layers} -> {student.config.num_hidden_layers} layers "
        f"({sum(p.numel() for p in teacher.parameters()) / 1e6:.1f}M -> "
        f"{sum(p.numel() for p in student.parameters()) / 1e6:.1f}M parameters)"
    )
    train_features, eval_features = tokenize_classification(
        data, task, tokenizer, setup.max_seq_length, accelerator
    )
    skipped = report_skips(accelerator, *data.reports)
    card = {
        **classification_card_facts(data_source, task, data, train_features, eval_features, skipped),
        "base_model": base_model_id(setup.teacher_model),
        "distillation": {
            "teacher": setup.teacher_model,
            "temperature": setup.temperature,
            "alpha_kd": setup.alpha_kd,
            "hidden_loss_weight": setup.hidden_loss_weight,
            "student_init": setup.student_model
            or setup.student_preset
            or f"teacher layers {model.layer_map}",
        },
        "language": "en",
        "license": "apache-2.0",
    }
    return run(
        config,
        accelerator=accelerator,
        model=model,
        tokenizer=tokenizer,
        card_facts=card,
        **classification_run_inputs(data.spec, tokenizer, train_features, eval_features),
    )


if __name__ == "__main__":
    main()
