# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Token classification for models with a CRF head, shipped in model folders as remote code: transformers' own
pipeline takes each token's arg-max (and can produce `O I-PER`); this one decodes each text's words (at their first
sub-word, as in training) with Viterbi, for strategies "none", "simple" and "first"; `score` is the CRF's marginal
probability of the decoded tag. Imports only numpy, torch and transformers."""

import numpy as np
import torch
from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

WORD_STRATEGIES = (AggregationStrategy.NONE, AggregationStrategy.SIMPLE, AggregationStrategy.FIRST)


class BriskBertTokenClassificationPipeline(TokenClassificationPipeline):
    def _sanitize_parameters(self, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        strategy = postprocess.get("aggregation_strategy")
        if strategy is not None and strategy not in WORD_STRATEGIES:
            raise ValueError(
                f"aggregation_strategy={strategy.value!r} picks a tag per word from sub-word scores; this model "
                "decodes whole sentences with a CRF. Use 'none' (one row per word), 'simple' or 'first' (entities)."
            )
        return preprocess, forward, postprocess

    def gather_pre_entities(self, *args, word_ids=None, **kwargs) -> list[dict]:
        tokens = super().gather_pre_entities(*args, word_ids=word_ids, **kwargs)
        for token in tokens:  # an input split into words brings its own words
            token["word_id"] = None if word_ids is None else word_ids[token["index"]]
        return tokens

    def aggregate(self, tokens: list[dict], aggregation_strategy: AggregationStrategy) -> list[dict]:
        """One entry per word of a chunk: its Viterbi tag, the tag's marginal probability and the word's span;
        grouped into entities unless the strategy is "none"."""
        words = []
        for token in tokens:
            if token["word_id"] is not None:
                starts_word = not words or token["word_id"] != words[-1][0]["word_id"]
            else:
                starts_word = not words or not token["is_subword"]
            if starts_word:
                words.append([token])
            else:
                words[-1].append(token)
        if not words:
            return []
        # The log of each word's softmax differs from its logits by a constant, which changes neither the best
        # path nor the marginals; the floor keeps a probability that underflowed finite.
        scores = np.stack([word[0]["scores"] for word in words]).astype(np.float32)
        emissions = torch.from_numpy(np.log(np.maximum(scores, np.finfo(np.float32).tiny)))[None]
        emissions = emissions.to(self.model.device)
        tag_mask = torch.ones(emissions.shape[:2], dtype=torch.bool, device=emissions.device)
        tags = self.model.decode(emissions, tag_mask)[0].tolist()
        probabilities = self.model.tagger.marginals(emissions, tag_mask)[0].cpu()
        entities = [
            {
                "entity": self.model.config.id2label[tag],
                "score": np.float32(probabilities[number, tag]),
                "index": word[0]["index"],
                "word": self.tokenizer.convert_tokens_to_string([token["word"] for token in word]),
                "start": word[0]["start"],
                "end": word[-1]["end"],
            }
            for number, (word, tag) in enumerate(zip(words, tags))
        ]
        return entities if aggregation_strategy == AggregationStrategy.NONE else self.group_entities(entities)
