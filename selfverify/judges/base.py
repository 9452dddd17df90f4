"""The one verifier interface: a verdict per (problem, solution steps)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from selfverify.tasks.base import StepCheck, TaskProblem


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


SCORES = (0.0, 0.5, 1.0)  # the judges' score scale: wrong, a minor flaw, right


def format_score(score: float) -> str:
    """A score on the {0, 0.5, 1} scale as the judge formats write it."""
    return "0.5" if score == 0.5 else str(int(score))


class JudgeFormat(Protocol):
    """A judge's text format: how the verifier and the meta-verifier are prompted, how their outputs
    parse, and the ground-truth references their training imitates. ``compact_judge.CompactFormat``
    (the embedded world) and ``prose_judge.ProseFormat`` (natural language) implement it."""

    name: str
    version: int  # bumped when outputs of an older judge would be misread
    verify_tag: str  # what separates a self-verifying generator's solution from its own analysis

    def verifier_prompt(self, problem_text: str, steps: Sequence[str]) -> str: ...

    def meta_prompt(self, problem_text: str, steps: Sequence[str], analysis: str) -> str: ...

    def refine_prompt(self, problem_text: str, steps: Sequence[str], analyses: Sequence[str]) -> str:
        """The generator's prompt to revise a solution given analyses of it (test-time search); its
        answer is a solution in the task's ordinary format."""
        ...

    def parse_analysis(self, text: str, n_steps: int) -> Verdict: ...

    def parse_meta(self, text: str) -> tuple[float, bool]:
        """(meta score, parsed)."""
        ...

    def reference_analysis(self, problem: TaskProblem, steps: Sequence[str]) -> str: ...

    def unfaithful_analysis(self, problem: TaskProblem, steps: Sequence[str], rng: random.Random) -> str: ...

    def meta_reference(self, problem: TaskProblem, steps: Sequence[str], analysis: str) -> tuple[str, float]:
        """The faithful meta-verification of ``analysis`` and its meta label."""
        ...

    def meta_label(self, problem: TaskProblem, verdict: Verdict, check: StepCheck) -> float: ...

    def split_self_evaluation(self, response: str) -> tuple[str, str | None]:
        """(solution, its own analysis or None)."""
        ...
