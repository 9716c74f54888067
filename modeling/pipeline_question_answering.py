# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Extractive question answering, shipped in model folders as remote code (transformers 5 has none).
`pipeline("question-answering", model=folder, trust_remote_code=True)(question=..., context=...)` returns
`{"answer", "score", "start", "end"}`: the best span (at most `max_answer_len` tokens) over overlapping windows
(`max_seq_len`, `doc_stride`) by the product of its start and end probabilities. Imports numpy, torch, transformers."""

import numpy as np
import torch
from transformers import Pipeline


class BriskBertQuestionAnsweringPipeline(Pipeline):
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __call__(self, question=None, context=None, **kwargs):
        if isinstance(question, dict):
            question, context = question.get("question"), question.get("context")
        if not all(isinstance(text, str) and text.strip() for text in (question, context)):
            raise ValueError(
                "question-answering needs a non-empty `question` string and a non-empty `context` string."
            )
        return super().__call__({"question": question, "context": context}, **kwargs)

    def _sanitize_parameters(
        self, max_seq_len=None, doc_stride=None, max_answer_len=None, top_k=None, **kwargs
    ):
        def given(**options):  # the options the caller set; each step's defaults stand for the others
            return {name: value for name, value in options.items() if value is not None}

        preprocess = given(max_seq_len=max_seq_len, doc_stride=doc_stride)
        return preprocess, {}, given(max_answer_len=max_answer_len, top_k=top_k)

    def preprocess(self, inputs, max_seq_len=384, doc_stride=128):
        encoded = self.tokenizer(
            inputs["question"].lstrip(),
            inputs["context"],
            truncation="only_second",
            max_length=max_seq_len,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
            return_tensors="pt",
        )
        encoded.pop("overflow_to_sample_mapping", None)
        context_offsets = [  # None outside the context: the question, special tokens and padding
            [o if part == 1 else None for o, part in zip(offsets, encoded.sequence_ids(window))]
            for window, offsets in enumerate(encoded.pop("offset_mapping").tolist())
        ]
        return {"model_inputs": dict(encoded), "offsets": context_offsets, "context": inputs["context"]}

    def _forward(self, inputs):
        outputs = self.model(**inputs.pop("model_inputs"))
        return {"start": outputs.start_logits, "end": outputs.end_logits, **inputs}  # and offsets, context

    def postprocess(self, outputs, max_answer_len=15, top_k=1):
        candidates = []
        for window, offsets in enumerate(outputs["offsets"]):
            start = torch.softmax(outputs["start"][window].float(), -1).numpy()
            end = torch.softmax(outputs["end"][window].float(), -1).numpy()
            valid = np.array([o is not None for o in offsets])
            start, end = np.where(valid, start, 0.0), np.where(valid, end, 0.0)
            scores = np.triu(np.outer(start, end)) - np.triu(np.outer(start, end), max_answer_len)
            for flat in np.argsort(scores, axis=None)[::-1][:top_k]:
                s, e = np.unravel_index(flat, scores.shape)
                if scores[s, e] <= 0:
                    break
                candidates.append(
                    {"score": float(scores[s, e]), "start": int(offsets[s][0]), "end": int(offsets[e][1])}
                )
        candidates.sort(key=lambda c: c["score"], reverse=True)
        context, no_answer = outputs["context"], {"score": 0.0, "start": 0, "end": 0, "answer": ""}
        answers = [dict(c, answer=context[c["start"] : c["end"]]) for c in candidates[:top_k]] or [no_answer]
        return answers[0] if top_k == 1 else answers


def register_question_answering_pipeline(config) -> None:
    """Names this pipeline in the model's config (the modeling file imports this file, so saves copy it)."""
    config.name_pipeline(
        "question-answering", BriskBertQuestionAnsweringPipeline, "AutoModelForQuestionAnswering"
    )
