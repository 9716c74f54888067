"""Choosing the backend: every candidate timed on the same length-sorted batches of the sample text, interleaved
round after round on this machine, and the fastest whose outputs stay within the thresholds kept. The fp32 model
is always a candidate and always within them, so the choice is never slower than fp32 as measured."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

TIMING_TEXTS, TIMING_BATCH, TIMING_ROUNDS = 96, 16, 3


@dataclass(frozen=True)
class SpeedRow:
    """One candidate as measured: its speed on the sample text and how far its outputs are from fp32."""

    backend: str
    tokens_per_second: float  # real (non-padding) tokens of the timing batches per second, median round
    speedup: float  # against the fp32 model on the same batches, median rounds
    speedup_range: tuple[float, float]  # the lowest and highest speed-up of a single round
    rounds: int  # the timing rounds the figures are over
    agreement: float  # the lowest mean agreement over the outputs (argmax share or cosine)
    passed: bool  # within --min_agreement / --min_cosine (and --max_accuracy_drop)
    accuracy: float | None = None  # on validation_file, when given
    note: str = ""  # why it was not kept

    def describe(self) -> str:
        accuracy = "" if self.accuracy is None else f", accuracy {self.accuracy:.4f}"
        kept = "" if self.passed else f"  (not kept: {self.note})"
        return (
            f"{self.backend:<10} {self.tokens_per_second:10,.0f} tokens/s  {self.speedup:5.2f}x fp32 "
            f"({spread(self.speedup_range, self.rounds)})  agreement {self.agreement:.4f}{accuracy}{kept}"
        )


def spread(speedup_range, rounds: int) -> str:
    """``1.30-2.41x over 3 rounds``: how far single rounds' speed-ups were apart."""
    low, high = speedup_range
    return f"{low:.2f}-{high:.2f}x over {rounds} rounds"


def time_candidates(
    runs: dict[str, Callable[[dict], object]], batches: list[dict], rounds: int = TIMING_ROUNDS
) -> dict[str, list[float]]:
    """The seconds each candidate takes for all `batches` in each round: a warm-up pass each, then `rounds`
    rounds with every candidate in turn (the order reversed every other round, so drifting load hits all
    alike)."""
    for run in runs.values():
        run(batches[0])
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_index in range(rounds):
        names = list(runs) if round_index % 2 == 0 else list(runs)[::-1]
        for name in names:
            start = time.perf_counter()
            for batch in batches:
                runs[name](batch)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def speed_table(
    seconds: dict[str, list[float]],
    real_tokens: int,
    quality: dict[str, tuple[float, bool, float | None, str]],
) -> list[SpeedRow]:
    """The rows, fastest first, from each backend's seconds per round (the median round's speed, and the spread
    of the speed-up over fp32 in the same round); `quality` maps each backend to (agreement, passed, accuracy,
    note)."""
    rows = []
    for name, rounds in seconds.items():
        speedups = [fp32 / value for fp32, value in zip(seconds["fp32"], rounds)]  # round by round
        median = statistics.median(rounds)
        speedup = statistics.median(seconds["fp32"]) / median
        rows.append(
            SpeedRow(
                name,
                real_tokens / median,
                speedup,
                (min(speedups), max(speedups)),
                len(rounds),
                *quality[name],
            )
        )
    return sorted(rows, key=lambda row: -row.tokens_per_second)


def choose(rows: list[SpeedRow]) -> SpeedRow:
    """The fastest candidate within the thresholds."""
    return max((row for row in rows if row.passed), key=lambda row: row.tokens_per_second)
