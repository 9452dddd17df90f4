"""The one verifier interface: a verdict per (problem, solution steps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class VerifyInput:
    """What a verifier reads: the problem, the solution split into steps, an optional reference answer."""

    problem: str
    steps: Sequence[str]
    answer: str | None = None


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgment of one solution.

    step_scores: per-step probability that the step is correct, each in [0, 1].
    earliest_error: index of the earliest wrong step, -1 when none is wrong.
    score: overall score in {0, 0.5, 1} (DeepSeekMath-V2's scale).
    analysis: free text explaining the judgment (empty for scalar verifiers).
    parsed: False when the verifier's own output could not be parsed (R_format = 0).
    """

    step_scores: list[float]
    earliest_error: int
    score: float
    analysis: str = ""
    parsed: bool = True
    extra: dict = field(default_factory=dict)


class Verifier(Protocol):
    """Anything that turns inputs into verdicts, in batch."""

    name: str

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]: ...


def earliest_error_from_scores(step_scores: Sequence[float], threshold: float = 0.5) -> int:
    """Index of the first step whose correctness score is below ``threshold``; -1 if none."""
    for i, s in enumerate(step_scores):
        if s < threshold:
            return i
    return -1


def threshold_verdict(step_scores: list[float], threshold: float) -> Verdict:
    """The verdict of a scalar step scorer: wrong from the first step below ``threshold``; score 1 or 0.

    A solution with no steps scores 0 (nothing was shown)."""
    if not step_scores:
        return Verdict([], -1, 0.0, "No steps to score.")
    earliest = earliest_error_from_scores(step_scores, threshold)
    if earliest == -1:
        analysis = f"All {len(step_scores)} steps judged correct (lowest step score {min(step_scores):.2f})."
    else:
        analysis = (
            f"Step {earliest + 1} is the first judged wrong "
            f"(score {step_scores[earliest]:.2f} < threshold {threshold:.2f})."
        )
    return Verdict(step_scores, earliest, 1.0 if earliest == -1 else 0.0, analysis)
