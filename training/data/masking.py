"""Masked-language-model masking as a collator: BERT's 80/10/10 rule, whole-word masking, specials kept.

Each example's mask is drawn from its own random generator, seeded by ``(seed, epoch, example index)``:

* masking is **redrawn every time a sequence is seen** (the loop calls ``set_epoch`` at each epoch);
* it is **reproducible**: a resumed run, or a run on 2 processes, draws exactly the same masks as an
  uninterrupted 1-process run, since the draw does not depend on batch order or a global RNG;
* an evaluation collator with a fixed seed masks the validation set identically at every evaluation.

Examples are dicts with ``input_ids`` (a list of ids with the special tokens already in place), optional
``token_type_ids``, ``next_sentence_label`` and ``idx`` (the example's index; without it the draw is keyed
by the ids' content). Output: padded ``input_ids``, ``attention_mask``, ``labels`` (-100 where not
masked), and ``token_type_ids`` / ``next_sentence_label`` when the examples have them.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


class MaskingCollator:
    """Pads a batch and masks it for MLM.

    Args:
        tokenizer: gives ``mask_token_id``, ``pad_token_id``, the special ids (never masked, never drawn as
            random replacements) and, for whole-word masking, the WordPiece ``##`` continuation tokens.
        mlm_probability: chance that a token (or, with ``whole_word_mask``, a word) is selected.
        mask_replace_prob / random_replace_prob: of the selected tokens, the share replaced by ``[MASK]`` /
            by a random token; the rest stay unchanged (BERT: 0.8 / 0.1, leaving 0.1).
        whole_word_mask: select whole words (a token plus its following ``##`` pieces) together.
        seed: base of every example's draw. Use a fixed, different seed for evaluation.
        pad_to_multiple_of: pad the sequence length up to a multiple of this.
    """

    def __init__(
        self,
        tokenizer,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        seed: int = 0,
        pad_to_multiple_of: int | None = None,
    ):
        if not 0 < mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}.")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise ValueError(
                f"mask_replace_prob ({mask_replace_prob}) and random_replace_prob ({random_replace_prob}) must be "
                ">= 0 and sum to at most 1 (the remainder stays unchanged)."
            )
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError(
                "The tokenizer needs a mask token and a pad token for masked-language modelling."
            )
        self.mlm_probability = mlm_probability
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.whole_word_mask = whole_word_mask
        self.seed = seed
        self.epoch = 0
        self.pad_to_multiple_of = pad_to_multiple_of
        self.mask_token_id = tokenizer.mask_token_id
        self.pad_token_id = tokenizer.pad_token_id
        vocab_size = len(tokenizer)
        self.special = np.zeros(vocab_size, dtype=bool)
        self.special[[i for i in tokenizer.all_special_ids if i is not None and i < vocab_size]] = True
        self.random_pool = np.flatnonzero(~self.special)
        self.continuation = np.zeros(vocab_size, dtype=bool)
        if whole_word_mask:
            tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
            self.continuation = np.array([t is not None and t.startswith("##") for t in tokens], dtype=bool)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    # ------------------------------------------------------------------------------------------ masking
    def _rng(self, example: dict) -> np.random.Generator:
        key = example.get("idx")
        if key is None:
            key = zlib.crc32(np.asarray(example["input_ids"], dtype=np.int64).tobytes())
        return np.random.default_rng([self.seed, self.epoch, int(key)])

    def mask(self, input_ids: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One sequence (no padding) -> (masked ids, labels). At least one token is selected."""
        ids = input_ids.copy()
        candidates = ~self.special[ids]
        if self.whole_word_mask:
            # A word starts at every candidate that is not a ## continuation; continuations join the word
            # before them.
            starts = candidates & ~self.continuation[ids]
            word_of = np.cumsum(starts) - 1
            in_word = candidates & (word_of >= 0)
            chosen_words = rng.random(max(int(starts.sum()), 1)) < self.mlm_probability
            if not chosen_words.any() and starts.any():
                chosen_words[rng.integers(int(starts.sum()))] = True
            selected = in_word & chosen_words[np.clip(word_of, 0, None)]
        else:
            selected = candidates & (rng.random(len(ids)) < self.mlm_probability)
            if not selected.any() and candidates.any():
                selected[rng.choice(np.flatnonzero(candidates))] = True
        labels = np.where(selected, ids, -100)
        action = rng.random(len(ids))
        to_mask = selected & (action < self.mask_replace_prob)
        to_random = (
            selected
            & (action >= self.mask_replace_prob)
            & (action < self.mask_replace_prob + self.random_replace_prob)
        )
        ids[to_mask] = self.mask_token_id
        ids[to_random] = rng.choice(self.random_pool, size=int(to_random.sum()))
        return ids, labels

    # ----------------------------------------------------------------------------------------- collation
    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        length = max(len(e["input_ids"]) for e in examples)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        n = len(examples)
        input_ids = np.full((n, length), self.pad_token_id, dtype=np.int64)
        labels = np.full((n, length), -100, dtype=np.int64)
        attention_mask = np.zeros((n, length), dtype=np.int64)
        has_types = "token_type_ids" in examples[0]
        token_type_ids = np.zeros((n, length), dtype=np.int64)
        for row, example in enumerate(examples):
            ids = np.asarray(example["input_ids"], dtype=np.int64)
            masked, row_labels = self.mask(ids, self._rng(example))
            input_ids[row, : len(ids)] = masked
            labels[row, : len(ids)] = row_labels
            attention_mask[row, : len(ids)] = 1
            if has_types:
                token_type_ids[row, : len(ids)] = example["token_type_ids"]
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "labels": torch.from_numpy(labels),
        }
        if has_types:
            batch["token_type_ids"] = torch.from_numpy(token_type_ids)
        if "next_sentence_label" in examples[0]:
            batch["next_sentence_label"] = torch.tensor([e["next_sentence_label"] for e in examples])
        return batch


def count_masked_tokens(batch: dict) -> torch.Tensor:
    """``count_items`` for MLM: the loss is a mean over masked positions."""
    return (batch["labels"] != -100).sum()
