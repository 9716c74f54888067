# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Token-classification pipeline for models with a CRF head, shipped inside model folders as remote code.

transformers' own pipeline takes each token's arg-max, ignoring the CRF's transitions (and can produce `O I-PER`);
a `use_crf=True` model names this one in `config.custom_pipelines`, which decodes each text's words (tagged at
their first sub-word, as in training) with Viterbi. Strategies "none", "simple" and "first" are served; `score` is
the CRF's marginal probability of the decoded tag. Copied flat: imports only numpy, torch and transformers.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

WORD_STRATEGIES = (AggregationStrategy.NONE, AggregationStrategy.SIMPLE, AggregationStrategy.FIRST)


class BriskBertTokenClassificationPipeline(TokenClassificationPipeline):
    def _sanitize_parameters(self, aggregation_strategy=None, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(
            aggregation_strategy=aggregation_strategy, **kwargs
        )
        strategy = postprocess.get("aggregation_strategy")
        if strategy is not None and strategy not in WORD_STRATEGIES:
            raise ValueError(
                f"aggregation_strategy={strategy.value!r} picks a tag per word from sub-word scores; this model "
                "decodes whole sentences with a CRF. Use 'none' (one row per word), 'simple' or 'first' (entities)."
            )
        return preprocess, forward, postprocess

    def postprocess(self, all_outputs, aggregation_strategy=AggregationStrategy.NONE, ignore_labels=None):
        ignore_labels = ["O"] if ignore_labels is None else ignore_labels
        entities = []
        for model_outputs in all_outputs:
            words = self.decode_words(model_outputs, all_outputs[0], aggregation_strategy)
            if aggregation_strategy != AggregationStrategy.NONE:
                words = self.group_entities(words)
            entities.extend(
                entity
                for entity in words
                if entity.get("entity", entity.get("entity_group")) not in ignore_labels
            )
        if len(all_outputs) > 1:
            entities = self.aggregate_overlapping_entities(entities)
        return entities

    def decode_words(self, model_outputs, first_outputs, aggregation_strategy) -> list[dict]:
        """One entry per word of one chunk: its Viterbi tag, the tag's marginal probability and its span."""
        # The pipeline hands outputs back on the CPU; the CRF's weights live where the model does.
        logits = model_outputs["logits"].float().to(self.model.device)
        tokens = self.gather_pre_entities(
            first_outputs["sentence"],
            model_outputs["input_ids"][0],
            np.zeros((logits.shape[1], 1)),  # scores are not read: the CRF decodes from the logits below
            model_outputs["offset_mapping"][0] if model_outputs["offset_mapping"] is not None else None,
            model_outputs["special_tokens_mask"][0].numpy(),
            aggregation_strategy,
            word_ids=model_outputs.get("word_ids"),
            word_to_chars_map=first_outputs.get("word_to_chars_map"),
        )
        groups = word_groups(tokens, model_outputs.get("word_ids"))
        tag_mask = torch.zeros(logits.shape[:2], dtype=torch.bool, device=logits.device)
        tag_mask[0, [group[0]["index"] for group in groups]] = True
        tags = self.model.decode(logits, tag_mask)[0].cpu()
        probabilities = self.model.tag_probabilities(logits, tag_mask)[0].cpu()
        words = []
        for group in groups:
            index = group[0]["index"]
            tag = int(tags[index])
            words.append(
                {
                    "entity": self.model.config.id2label[tag],
                    "score": np.float32(probabilities[index, tag]),
                    "index": index,
                    "word": self.tokenizer.convert_tokens_to_string([token["word"] for token in group]),
                    "start": group[0]["start"],
                    "end": group[-1]["end"],
                }
            )
        return words


def word_groups(tokens: list[dict], word_ids: list[int | None] | None) -> list[list[dict]]:
    """The non-special tokens grouped into words: by the input's own words when it was pre-split, else a word
    starts at every token that is not a continuation sub-word."""
    groups = []
    for token in tokens:
        if word_ids is not None:
            starts_word = not groups or word_ids[token["index"]] != word_ids[groups[-1][0]["index"]]
        else:
            starts_word = not groups or not token["is_subword"]
        if starts_word:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


PIPELINE_TASK = "token-classification"
MODULE_NAME = os.path.splitext(os.path.basename(__file__))[0]


def register_token_classification_pipeline(config) -> None:
    """Names this pipeline in `config.custom_pipelines`, so every later save writes the entry (and, as the modeling
    file imports this file, copies it)."""
    entry = {
        "impl": f"{MODULE_NAME}.{BriskBertTokenClassificationPipeline.__name__}",
        "pt": ["AutoModelForTokenClassification"],
        "tf": [],
        "type": "text",
    }
    config.custom_pipelines = {**(getattr(config, "custom_pipelines", None) or {}), PIPELINE_TASK: entry}
