"""The task seam: what the pipelines know about a world of problems (docs/guides/architecture.md, 'Seams').

A task draws training and held-out problems, says what a demonstration looks like, and labels any
solution text step by step. Problems are hashable (held-out ones are excluded from training by set
membership) and carry two strings: ``prompt``, the text the generator continues (with the generator's
chat template already applied when it has one), and ``text``, the problem statement a judge is shown.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# Turns a user message into the text a model continues: the chat template, or the message itself.
Prompter = Callable[[str], str]


def raw_prompter(text: str) -> str:
    return text


@dataclass(frozen=True)
class StepCheck:
    """Ground truth (or a rule's labels) for one solution text."""

    steps: list[str]
    step_correct: list[bool]
    earliest_error: int  # -1 when every step is correct
    answer: object | None  # the stated final answer, None if absent or malformed
    correct: bool  # the stated answer equals the true answer (the outcome reward)

    @property
    def all_steps_valid(self) -> bool:
        return self.earliest_error == -1


class TaskProblem(Protocol):
    """A problem of any task (frozen dataclasses: hashable)."""

    @property
    def prompt(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def answer(self) -> object:
        """The reference final answer ("" when unknown: a user's problem given without one)."""
        ...


@runtime_checkable
class Task(Protocol):
    """One world of problems behind the pipelines."""

    name: str
    # True when ``check`` labels every step exactly (the loop's judge figures are then ground truth).
    exact_step_labels: bool

    def heldout(self, n: int, seed: int) -> list[TaskProblem]:
        """The fixed held-out problems of ``seed`` (never trained on)."""
        ...

    def train_problems(self, n: int, *, seed: int, tag: str, exclude: set[TaskProblem]) -> list[TaskProblem]:
        """``n`` training problems from an RNG keyed by (seed, tag), none of them in ``exclude``."""
        ...

    def check(self, problem: TaskProblem, solution: str) -> StepCheck:
        """Label every step of ``solution`` and whether its final answer is right."""
        ...

    def true_score(self, problem: TaskProblem, check: StepCheck) -> float:
        """The label on DeepSeekMath-V2's {0, 0.5, 1} scale: 1 no wrong step, 0.5 only the final
        answer (or what follows the working) is wrong, 0 a working step is wrong."""
        ...

    def demonstration(self, problem: TaskProblem, direct: bool) -> str:
        """A reference solution (``direct``: the answer line alone) in the format the task grades."""
        ...

    def expected_steps(self, problem: TaskProblem, n: int) -> list[str] | None:
        """What each of ``n`` steps should read (the reference, padded), or None when unknown."""
        ...

    def synthetic_solution(
        self,
        problem: TaskProblem,
        rng: random.Random,
        correct_fraction: float,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[str, list[str]]:
        """(kind, steps): the reference solution, or it with one injected error of a weighted kind."""
        ...

    def split_steps(self, solution: str) -> list[str]:
        """A solution text as the steps ``check`` labels."""
        ...

    def problem_from_text(self, text: str, answer: str | None, id: str) -> TaskProblem:
        """A user's problem (``python -m selfverify.solve``); ``ValueError`` when the task cannot read
        ``text``. ``answer``: the reference, when the user gives one."""
        ...


def labelled_steps(steps: Sequence[str], correct: Sequence[bool]) -> int:
    """Index of the earliest wrong step, -1 when all are right (0 for a solution with no steps)."""
    return next((i for i, ok in enumerate(correct) if not ok), -1 if steps else 0)
