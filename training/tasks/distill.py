# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Knowledge distillation of a fine-tuned classifier into a smaller student (Hinton et al. 2015; DistilBERT):
alpha_kd * T² * KL(teacher || student at temperature T) + (1 - alpha_kd) * the hard-label loss
+ hidden_loss_weight * MSE of matched hidden states (MSE of outputs for regression). :class:`DistillationModel`
wraps both for the shared loop and saves the student alone."""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from briskbert.errors import SettingError
from briskbert.training.engine.checkpointing import check_finite_weights, weights_file
from briskbert.training.engine.config import TrainingConfig
from briskbert.training.tasks.classification import ClassificationTask
from briskbert.training.tasks.finetuning import check_positions, load_tokenizer
from briskbert.training.tasks.settings import ClassificationSettings, DataSource, DistillSettings, ModelSource


def student_from_teacher(teacher, layers: list[int] | None = None):
    """A copy of ``teacher`` keeping only the encoder layers ``layers`` (default: 0, 2, 4, ... as DistilBERT)."""
    num_layers = teacher.config.num_hidden_layers
    layers = list(range(0, num_layers, 2)) if layers is None else list(layers)
    if not layers or any(not 0 <= i < num_layers for i in layers) or sorted(set(layers)) != layers:
        raise SettingError(
            "student_layers",
            f"{layers} must be increasing, distinct teacher layer indices in 0..{num_layers - 1}.",
        )
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = len(layers)
    student = type(teacher)(config)
    prefix = teacher.base_model_prefix + ".layers."
    state = {}
    for name, tensor in teacher.state_dict().items():
        if name.startswith(prefix):
            index, rest = name[len(prefix) :].split(".", 1)
            if int(index) in layers:
                state[f"{prefix}{layers.index(int(index))}.{rest}"] = tensor.clone()
        else:
            state[name] = tensor.clone()
    student.load_state_dict(state, strict=False)
    student.config.distilled_from_layers = layers
    return student


def soft_target_loss(student_logits, teacher_logits, temperature: float, problem_type: str) -> torch.Tensor:
    """T²-scaled KL divergence of temperature-softened distributions (MSE for regression)."""
    if problem_type == "regression":
        return F.mse_loss(student_logits.float(), teacher_logits.float())
    student_log_probs = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher_probs = F.softmax(teacher_logits.float() / temperature, dim=-1)
    return F.kl_div(student_log_probs, teacher_probs, reduction="batchmean") * temperature**2


class DistillationModel(nn.Module):
    """Student + frozen teacher behind one ``forward`` that returns the distillation loss."""

    def __init__(
        self, student, teacher, temperature: float = 2.0, alpha_kd: float = 0.5, hidden_loss_weight=0.0
    ):
        super().__init__()
        self.student = student
        self._teacher = [teacher.eval().requires_grad_(False)]  # a list keeps it out of parameters/state_dict
        self.temperature, self.alpha_kd, self.hidden_loss_weight = temperature, alpha_kd, hidden_loss_weight
        # each student layer learns from the teacher layer it was copied from, else the one at the same depth
        n_student, n_teacher = student.config.num_hidden_layers, teacher.config.num_hidden_layers
        self.layer_map = getattr(student.config, "distilled_from_layers", None) or [
            round((k + 1) * n_teacher / n_student) - 1 for k in range(n_student)
        ]
        self.projection = None
        if hidden_loss_weight > 0 and student.config.hidden_size != teacher.config.hidden_size:
            self.projection = nn.Linear(student.config.hidden_size, teacher.config.hidden_size)
        self.config = student.config

    @property
    def teacher(self):
        return self._teacher[0]

    def forward(self, **batch):
        if not self.training:
            return self.student(**batch)
        hidden = self.hidden_loss_weight > 0
        outputs = self.student(**batch, output_hidden_states=hidden)
        teacher = self.teacher
        if next(teacher.parameters()).device != outputs.logits.device:
            teacher.to(outputs.logits.device)
        with torch.no_grad():
            inputs = {key: value for key, value in batch.items() if key != "labels"}
            teacher_outputs = teacher(**inputs, output_hidden_states=hidden)
        problem_type = self.config.problem_type or "single_label_classification"
        loss = self.alpha_kd * soft_target_loss(
            outputs.logits, teacher_outputs.logits, self.temperature, problem_type
        )
        if self.alpha_kd < 1.0:
            loss = loss + (1.0 - self.alpha_kd) * outputs.loss
        if hidden:
            loss = loss + self.hidden_loss_weight * self._hidden_loss(
                outputs.hidden_states, teacher_outputs.hidden_states, batch.get("attention_mask")
            )
        outputs.loss = loss
        return outputs

    def _hidden_loss(self, student_states, teacher_states, attention_mask):
        pairs = [(0, 0)] + [(k + 1, t + 1) for k, t in enumerate(self.layer_map)]
        losses = []
        for s, t in pairs:
            student_state = student_states[s]
            if self.projection is not None:
                student_state = self.projection(student_state)
            error = (student_state.float() - teacher_states[t].float()).pow(2).mean(-1)
            if attention_mask is not None:
                error = error[attention_mask.bool()]
            losses.append(error.mean())
        return torch.stack(losses).mean()

    # The training loop treats this wrapper as the model: delegate what it asks of a model.
    def gradient_checkpointing_enable(self, **kwargs):
        self.student.gradient_checkpointing_enable(**kwargs)

    def save_pretrained(self, save_directory, state_dict=None, **kwargs):
        """Save the student alone (the projection and the teacher are training-only)."""
        if state_dict is not None:
            state_dict = {k[len("student.") :]: v for k, v in state_dict.items() if k.startswith("student.")}
        return self.student.save_pretrained(save_directory, state_dict=state_dict, **kwargs)


def load_teacher(path: str):
    """The fine-tuned classifier to distil; anything else is a user error naming ``teacher_model``."""
    from transformers import AutoConfig

    from briskbert.modeling import BriskBertForSequenceClassification

    config = AutoConfig.from_pretrained(path)
    architectures = ", ".join(config.architectures or []) or "model without architectures"
    if config.model_type != "briskbert" or not architectures.endswith("ForSequenceClassification"):
        raise SettingError(
            "teacher_model",
            f"{path} is a {config.model_type} {architectures}, not a sequence classifier: distillation needs a "
            "briskbert one (convert a BERT model with `briskbert convert`, then run finetune-classification).",
        )
    teacher = BriskBertForSequenceClassification.from_pretrained(path)
    check_finite_weights(teacher, weights_file(path), "teacher_model")
    return teacher


def build_student(setup: DistillSettings, teacher, pad_token_id: int | None):
    """The student: a briskbert folder, a fresh preset, or the teacher with some of its layers."""
    from briskbert.modeling import BriskBertConfig, BriskBertForSequenceClassification

    config = teacher.config
    labels = {key: getattr(config, key) for key in ("num_labels", "id2label", "label2id", "problem_type")}
    if setup.student_model:
        student = BriskBertForSequenceClassification.from_pretrained(setup.student_model, **labels)
        check_finite_weights(student, weights_file(setup.student_model), "student_model")
        if student.config.vocab_size != config.vocab_size:
            raise SettingError(
                "student_model",
                f"has a vocabulary of {student.config.vocab_size} tokens, the teacher's has "
                f"{config.vocab_size}; both must read the same token ids.",
            )
        return student
    if setup.student_preset:
        try:
            preset = BriskBertConfig.from_preset(
                setup.student_preset, vocab_size=config.vocab_size, pad_token_id=pad_token_id, **labels
            )
        except ValueError as error:  # an unknown preset name
            raise SettingError("student_preset", str(error)) from None
        return BriskBertForSequenceClassification(preset)
    return student_from_teacher(teacher, setup.student_layers)


class DistillationTask(ClassificationTask):
    """``briskbert distill``: a student classifier trained on the teacher's outputs and the hard labels."""

    def __init__(self, setup: DistillSettings, data: DataSource, settings: ClassificationSettings):
        from briskbert.inputs import check_model_source, check_tokenizer_source

        check_model_source(setup.teacher_model, "teacher_model", need_tokenizer=setup.tokenizer_name is None)
        if setup.student_model is not None:
            check_model_source(setup.student_model, "student_model", need_tokenizer=False)
        if setup.tokenizer_name is not None:
            check_tokenizer_source(setup.tokenizer_name, "tokenizer_name")
        self.setup, self.data_source = setup, data
        self.source = ModelSource(setup.teacher_model, max_seq_length=setup.max_seq_length)
        self.teacher = load_teacher(setup.teacher_model)
        teacher = self.teacher.config
        problem_type = teacher.problem_type or "single_label_classification"
        if settings.problem_type and settings.problem_type != problem_type:
            raise SettingError(
                "problem_type", f"{settings.problem_type} differs from the teacher's {problem_type}."
            )
        names = None
        if problem_type != "regression":
            names = [teacher.id2label[i] for i in range(teacher.num_labels)]
            if settings.label_names is not None and list(settings.label_names) != names:
                raise SettingError(
                    "label_names",
                    f"{','.join(settings.label_names)} differs from the teacher's labels {','.join(names)}.",
                )
        self.settings = dataclasses.replace(settings, problem_type=problem_type)
        self.load_data(names, names_source=f"the teacher's labels (teacher_model {setup.teacher_model})")

    def make_model(self, accelerator, config: TrainingConfig):
        setup, teacher = self.setup, self.teacher
        tokenizer = load_tokenizer(setup.tokenizer_name or setup.teacher_model)
        student = build_student(setup, teacher, tokenizer.pad_token_id)
        check_positions(student.config, setup.max_seq_length)
        self.model = DistillationModel(
            student, teacher, setup.temperature, setup.alpha_kd, setup.hidden_loss_weight
        )
        accelerator.print(
            f"Distilling {teacher.config.num_hidden_layers} -> {student.config.num_hidden_layers} layers "
            f"({sum(p.numel() for p in teacher.parameters()) / 1e6:.1f}M -> "
            f"{sum(p.numel() for p in student.parameters()) / 1e6:.1f}M parameters)"
        )
        return self.model, tokenizer

    def details(self) -> dict:
        setup = self.setup
        distillation = {
            "teacher": setup.teacher_model,
            "temperature": setup.temperature,
            "alpha_kd": setup.alpha_kd,
            "hidden_loss_weight": setup.hidden_loss_weight,
            "student_init": setup.student_model
            or setup.student_preset
            or f"teacher layers {self.model.layer_map}",
        }
        return {**super().details(), "distillation": distillation}
