"""Masked-language-model masking as a collator: BERT's 80/10/10 rule, whole-word masking, specials kept.

Every draw is a hash of ``(seed, epoch, example idx, position)`` (counter-based splitmix64), so an example's
mask is its own whatever its batch: redrawn every epoch, identical on resume or across processes.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import torch

_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
_STREAMS = 3  # draws per position: selection, action (mask, random or keep) and random token


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's output function: a bijection of uint64 whose outputs for consecutive inputs look independent."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB
    return x ^ (x >> 31)


def _uniforms(keys: np.ndarray, positions: np.ndarray, stream: int) -> np.ndarray:
    """Draws in [0, 1) that depend on (key, position, stream) alone: output ``3 * position + stream + 1`` of
    the splitmix64 sequence that starts at ``key``."""
    return (_mix(keys + (positions * _STREAMS + (stream + 1)) * _GOLDEN) >> 11) * 2.0**-53


class MaskingCollator:
    """Pads a batch of ``{"input_ids", "idx", ...}`` examples and masks it for MLM. Special ids are never masked
    nor drawn as random replacements; ``whole_word_mask`` selects a token with its following ``##`` pieces."""

    def __init__(
        self,
        tokenizer,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        seed: int = 0,
    ):
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError(
                "The tokenizer needs a mask token and a pad token for masked-language modelling."
            )
        self.mlm_probability, self.whole_word_mask = mlm_probability, whole_word_mask
        self.mask_replace_prob, self.random_replace_prob = mask_replace_prob, random_replace_prob
        self.seed, self.epoch = seed, 0
        self.mask_token_id, self.pad_token_id = tokenizer.mask_token_id, tokenizer.pad_token_id
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

    def _keys(self, examples: list[dict]) -> np.ndarray:
        """Each example's key: (seed, epoch, idx) hashed."""
        indices = [int(e["idx"]) % 2**64 for e in examples]
        base = _mix(_mix(np.asarray([self.seed % 2**64], dtype=np.uint64)) + self.epoch % 2**64)
        return _mix(base + _mix(np.asarray(indices, dtype=np.uint64)))

    def mask(self, ids: np.ndarray, real: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A padded batch (``real`` marks the tokens that are not padding) -> (masked ids, labels). In every
        row with a candidate, at least one token (or whole word) is selected."""
        positions = np.arange(ids.shape[1], dtype=np.uint64)
        draw = _uniforms(keys[:, None], positions, 0)
        candidates = real & ~self.special[ids]
        if self.whole_word_mask:
            # A word starts at every candidate that is not a ## continuation; continuations join the word
            # before them, and a word is drawn at its start.
            starts = candidates & ~self.continuation[ids]
            word_start = np.maximum.accumulate(np.where(starts, np.arange(ids.shape[1]), -1), axis=1)
            drawn = _at_least_one(starts & (draw < self.mlm_probability), starts, draw)
            selected = candidates & (word_start >= 0) & np.take_along_axis(drawn, word_start.clip(0), axis=1)
        else:
            selected = _at_least_one(candidates & (draw < self.mlm_probability), candidates, draw)
        labels = np.where(selected, ids, -100)
        action = _uniforms(keys[:, None], positions, 1)
        to_mask = selected & (action < self.mask_replace_prob)
        to_random = selected & ~to_mask & (action < self.mask_replace_prob + self.random_replace_prob)
        pick = (_uniforms(keys[:, None], positions, 2) * len(self.random_pool)).astype(np.int64)
        ids = np.where(to_random, self.random_pool[pick], ids)
        return np.where(to_mask, self.mask_token_id, ids), labels

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        lengths = np.asarray([len(e["input_ids"]) for e in examples])
        real = np.arange(lengths.max()) < lengths[:, None]

        def padded(key: str, fill: int) -> np.ndarray:
            values = np.full(real.shape, fill, dtype=np.int64)
            values[real] = np.fromiter(chain.from_iterable(e[key] for e in examples), np.int64, real.sum())
            return values

        input_ids, labels = self.mask(padded("input_ids", self.pad_token_id), real, self._keys(examples))
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(real.astype(np.int64)),
            "labels": torch.from_numpy(labels),
        }
        if "token_type_ids" in examples[0]:
            batch["token_type_ids"] = torch.from_numpy(padded("token_type_ids", 0))
        if "next_sentence_label" in examples[0]:
            batch["next_sentence_label"] = torch.tensor([e["next_sentence_label"] for e in examples])
        return batch


def _at_least_one(selected: np.ndarray, candidates: np.ndarray, draw: np.ndarray) -> np.ndarray:
    """``selected``, plus, in each row where it is empty but there are candidates, the candidate with the
    lowest draw (a uniformly random one)."""
    empty = ~selected.any(axis=1) & candidates.any(axis=1)
    lowest = np.where(candidates, draw, 2.0).argmin(axis=1)
    selected[np.flatnonzero(empty), lowest[empty]] = True
    return selected


def count_masked_tokens(batch: dict) -> torch.Tensor:
    """``count_items`` for MLM: the loss is a mean over masked positions."""
    return (batch["labels"] != -100).sum()
