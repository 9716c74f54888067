# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Linear-chain CRF over per-token emission scores, with tag-scheme constraints. A path scores
`start[y_1] + sum_t emissions[t, y_t] + sum_t transitions[y_(t-1), y_t] + end[y_n]` over the positions a mask selects
(the first sub-word of each word); transitions the tag names forbid (BIO's `O -> I-PER`, BIOES's `B-X -> O`) are
never decoded. Remote code: imports only torch."""

from dataclasses import dataclass

import torch
from torch import nn

IGNORE_INDEX = -100
# A forbidden transition's score in the forward algorithm: exp(-1e4) is exactly 0 in float32, so such paths add
# nothing to the partition, while a finite value keeps logsumexp's gradient free of NaN where every path into a tag
# is forbidden. Viterbi uses -inf, so a forbidden transition can never win.
FORBIDDEN_SCORE = -1e4


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``, ``"O"`` -> ``("O", "")``; a tag without a scheme prefix (``"PER"``,
    ``"LABEL_0"``) is an inside tag of its own type (the IO scheme)."""
    if tag == "O":
        return "O", ""
    prefix, separator, entity_type = tag.partition("-")
    if separator and prefix in ("B", "I", "E", "S") and entity_type:
        return prefix, entity_type
    return "I", tag


@dataclass(frozen=True)
class TransitionConstraints:
    """Which tags may start a sentence, follow each tag (``transitions[previous][next]``) and end a sentence."""

    start: list[bool]
    transitions: list[list[bool]]
    end: list[bool]

    def allows(self, tags: list[int]) -> bool:
        steps = all(self.transitions[previous][following] for previous, following in zip(tags, tags[1:]))
        return not tags or (self.start[tags[0]] and steps and self.end[tags[-1]])


def allowed_transitions(labels: list[str]) -> TransitionConstraints:
    """BIO: `I-X` follows only `B-X` or `I-X`; a type without `B-X` (IO tagging, `LABEL_0`) starts entities with
    `I-X`. BIOES (any `E-`/`S-` tag): `B-X`/`I-X` go on to `I-X` or `E-X`, and only `O`, `E-X` and `S-X` may end a
    sentence or precede a new entity."""
    parts = [split_tag(label) for label in labels]
    begun_types = {entity_type for prefix, entity_type in parts if prefix == "B"}
    bioes = any(prefix in ("E", "S") for prefix, _ in parts)

    def opens(prefix: str, entity_type: str) -> bool:  # may this tag start an entity (or be outside one)?
        return prefix in ("O", "B", "S") or (prefix == "I" and entity_type not in begun_types)

    def inside(prefix: str) -> bool:  # does an entity still go on after this tag (BIOES)?
        return bioes and prefix in ("B", "I")

    def may_follow(previous: tuple[str, str], following: tuple[str, str]) -> bool:
        (prev_prefix, prev_type), (prefix, entity_type) = previous, following
        continues = prev_prefix in ("B", "I") and prefix in ("I", "E") and prev_type == entity_type
        if inside(prev_prefix):
            return continues
        return continues or (opens(prefix, entity_type) and prefix != "E")

    start = [opens(prefix, entity_type) and prefix != "E" for prefix, entity_type in parts]
    transitions = [[may_follow(previous, following) for following in parts] for previous in parts]
    end = [not inside(prefix) for prefix, _ in parts]
    return TransitionConstraints(start, transitions, end)


class LinearChainCRF(nn.Module):
    """Transition scores (saved with the model) and the algorithms over them, on `(batch, seq, tags)` emissions and
    a `(batch, seq)` mask of the tagged positions, in float32 or wider; `labels` name the tags, whose scheme the
    decoded paths keep (`allowed_transitions`)."""

    def __init__(self, labels: list[str]):
        super().__init__()
        self.num_tags = len(labels)
        self.transitions = nn.Parameter(torch.zeros(self.num_tags, self.num_tags))
        self.start_transitions = nn.Parameter(torch.zeros(self.num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(self.num_tags))
        self.constraints = allowed_transitions(labels)

    def _scores(self, forbidden: float, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """(start, transitions, end) scores in ``dtype``, the forbidden entries set to ``forbidden``."""
        # Derived from the labels, so not a buffer (transformers re-creates non-persistent buffers empty on loading).
        tables = (self.constraints.start, self.constraints.transitions, self.constraints.end)
        scores = (self.start_transitions, self.transitions, self.end_transitions)
        return tuple(
            score.to(dtype).masked_fill(~torch.tensor(allowed, device=score.device), forbidden)
            for score, allowed in zip(scores, tables)
        )

    @staticmethod
    def _gather_tagged(emissions: torch.Tensor, mask: torch.Tensor):
        """Each row's tagged positions, left-aligned: (their emissions `(batch, words, tags)` in float32 or wider,
        the mask of real words, each word's position in the input)."""
        mask = mask.bool()
        lengths = mask.sum(dim=1)
        width = int(lengths.max()) if mask.numel() else 0
        # A stable sort of "not tagged" puts each row's tagged positions first, in order.
        positions = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :width]
        dtype = torch.float64 if emissions.dtype == torch.float64 else torch.float32
        words = emissions.to(dtype).gather(1, positions.unsqueeze(-1).expand(-1, -1, emissions.shape[-1]))
        word_mask = torch.arange(width, device=mask.device) < lengths.unsqueeze(1)
        return words, word_mask, positions

    def _forward_variables(self, words: torch.Tensor, word_mask: torch.Tensor) -> list[torch.Tensor]:
        """alpha[t][b, j]: log of the summed scores of every allowed prefix of row b that ends in tag j at word t
        (a row's last alpha is carried through its padding)."""
        start, transitions, _ = self._scores(FORBIDDEN_SCORE, words.dtype)
        alphas = [start + words[:, 0]]
        for t in range(1, words.shape[1]):
            step = torch.logsumexp(alphas[-1].unsqueeze(2) + transitions, dim=1) + words[:, t]
            alphas.append(torch.where(word_mask[:, t : t + 1], step, alphas[-1]))
        return alphas

    def neg_log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``log Z - score(tags)`` of each row, ``(batch,)``: 0 for a row without tagged positions."""
        words, word_mask, positions = self._gather_tagged(emissions, mask)
        if words.shape[1] == 0:
            return words.new_zeros(words.shape[0])
        start, transitions, end = self._scores(FORBIDDEN_SCORE, words.dtype)
        log_z = torch.logsumexp(self._forward_variables(words, word_mask)[-1] + end, dim=1)
        word_tags = tags.gather(1, positions).masked_fill(~word_mask, 0).long()
        emitted = words.gather(2, word_tags.unsqueeze(-1)).squeeze(-1) * word_mask
        linked = transitions[word_tags[:, :-1], word_tags[:, 1:]] * word_mask[:, 1:]
        last = word_tags.gather(1, (word_mask.sum(1, keepdim=True) - 1).clamp(min=0)).squeeze(1)
        path_score = start[word_tags[:, 0]] + emitted.sum(1) + linked.sum(1) + end[last]
        return (log_z - path_score).masked_fill(~word_mask[:, 0], 0.0)

    def loss(self, emissions: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood per tagged token (where `tags` is not -100), as a softmax loss is."""
        tags = tags.to(emissions.device)
        tagged = tags != IGNORE_INDEX
        return self.neg_log_likelihood(emissions, tags, tagged).sum() / tagged.sum().clamp(min=1)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The best allowed tag sequence of each row (Viterbi): `(batch, seq)` ids at the tagged positions,
        ``IGNORE_INDEX`` elsewhere."""
        words, word_mask, positions = self._gather_tagged(emissions, mask)
        decoded = torch.full(mask.shape, IGNORE_INDEX, dtype=torch.long, device=emissions.device)
        if words.shape[1] == 0:
            return decoded
        start, transitions, end = self._scores(float("-inf"), words.dtype)
        best = start + words[:, 0]
        backpointers = []
        for t in range(1, words.shape[1]):
            candidates, previous = (best.unsqueeze(2) + transitions).max(dim=1)
            best = torch.where(word_mask[:, t : t + 1], candidates + words[:, t], best)
            backpointers.append(previous)
        current = (best + end).argmax(dim=1)
        path = [current]
        for t in range(words.shape[1] - 1, 0, -1):
            # Rows shorter than t+1 words keep their last tag until the backtrace reaches their last word.
            previous = backpointers[t - 1].gather(1, current.unsqueeze(1)).squeeze(1)
            current = torch.where(word_mask[:, t], previous, current)
            path.append(current)
        tags = torch.stack(path[::-1], dim=1).masked_fill(~word_mask, IGNORE_INDEX)
        return decoded.scatter(1, positions, tags)

    @torch.no_grad()
    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``P(tag j at position t | sentence)`` (forward-backward), `(batch, seq, tags)`; zeros at untagged
        positions."""
        words, word_mask, positions = self._gather_tagged(emissions, mask)
        result = torch.zeros(*mask.shape, self.num_tags, dtype=words.dtype, device=emissions.device)
        if words.shape[1] == 0:
            return result
        # In float64: float32 rounding over long rows of large scores reaches 1e-3 in a probability.
        words = words.double()
        _, transitions, end = self._scores(FORBIDDEN_SCORE, words.dtype)
        alphas = self._forward_variables(words, word_mask)
        # beta[t][b, i]: log of the summed scores of every allowed continuation of row b after tag i at word t.
        betas = [end.expand_as(alphas[-1])]
        for t in range(words.shape[1] - 2, -1, -1):
            step = torch.logsumexp(transitions + (words[:, t + 1] + betas[-1]).unsqueeze(1), dim=2)
            betas.append(torch.where(word_mask[:, t + 1 : t + 2], step, end.expand_as(step)))
        # alpha + beta sums to log Z at every word; normalising each word on its own keeps rounding out.
        scores = torch.stack(alphas, dim=1) + torch.stack(betas[::-1], dim=1)
        probabilities = (scores.softmax(dim=-1) * word_mask.unsqueeze(-1)).to(result.dtype)
        return result.scatter(1, positions.unsqueeze(-1).expand_as(probabilities), probabilities)
