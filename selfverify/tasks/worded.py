"""The embedded world in natural language, for pretrained models: worded problems, one step per line
("5 - 7 = -2"), a final "Answer: -5" line.

A problem is the embedded one (left-to-right arithmetic) asked in words; its prompt goes through the
generator's chat template. Every line of a solution is normalised to the embedded notation (spaces
dropped, "Answer:" read as "A:") and labelled by the embedded checker, so each step's label is exact
and every loop figure is measured against ground truth on a real model too.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import selfverify.tasks.arithmetic as arithmetic
from selfverify.config.schema import TaskSpec
from selfverify.tasks.arithmetic import ANSWER_PREFIX, STEP_RE, Problem
from selfverify.tasks.base import Prompter, StepCheck, raw_prompter

ANSWER_WORD = "Answer:"
_ANSWER_WORD_RE = re.compile(r"^\s*answer\s*:", re.IGNORECASE)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})


@dataclass(frozen=True)
class WordedProblem:
    """An embedded problem with the prompt the generator sees."""

    problem: Problem
    prompt: str = field(compare=False)

    @property
    def text(self) -> str:
        return question(self.problem)

    @property
    def ops(self) -> tuple[tuple[str, int], ...]:
        return self.problem.ops

    @property
    def answer(self) -> int:
        return self.problem.answer


def expression(problem: Problem) -> str:
    return " ".join([str(problem.start), *(f"{op} {b}" for op, b in problem.ops)])


def question(problem: Problem) -> str:
    return (
        f'Compute {expression(problem)} from left to right, one step per line like "5 - 7 = -2", '
        f'then "{ANSWER_WORD} N".'
    )


def worded_line(line: str) -> str:
    """An embedded solution line in words: ``5-7=-2`` -> ``5 - 7 = -2``, ``A:-5`` -> ``Answer: -5``."""
    if line.startswith(ANSWER_PREFIX):
        return f"{ANSWER_WORD} {line[len(ANSWER_PREFIX) :]}"
    if (m := STEP_RE.match(line)) is not None:
        a, op, b, c = m.groups()
        return f"{a} {op} {b} = {c}"
    return line


def embedded_line(line: str) -> str:
    """A worded line in the embedded notation, for the checker (the inverse of :func:`worded_line`)."""
    text = _ANSWER_WORD_RE.sub(ANSWER_PREFIX, line.translate(_MINUS_SIGNS))
    return "".join(text.split())


@dataclass
class WordedArithmeticTask:
    """Natural-language arithmetic: the embedded world's problems and labels, in words."""

    spec: TaskSpec
    prompter: Prompter = raw_prompter
    name: str = "arithmetic_nl"
    exact_step_labels: bool = True

    def _worded(self, problems: list[Problem]) -> list[WordedProblem]:
        return [WordedProblem(p, self.prompter(question(p))) for p in problems]

    def problem_from_text(self, text: str, answer: str | None, id: str) -> WordedProblem:
        """The problem as an expression (``5-7-6``), asked in words."""
        return self._worded([arithmetic.parse_problem(text)])[0]

    def heldout(self, n: int, seed: int) -> list[WordedProblem]:
        return self._worded(arithmetic.heldout_split(self.spec, n, seed))

    def train_problems(self, n: int, *, seed: int, tag: str, exclude: set) -> list[WordedProblem]:
        inner = {p.problem for p in exclude}
        return self._worded(arithmetic.train_problems(self.spec, n, seed=seed, tag=tag, exclude=inner))

    def split_steps(self, solution: str) -> list[str]:
        return arithmetic.split_steps(solution)

    def check(self, problem: WordedProblem, solution: str) -> StepCheck:
        steps = self.split_steps(solution)
        inner = arithmetic.check_solution(problem.problem, "\n".join(embedded_line(s) for s in steps))
        return StepCheck(steps, inner.step_correct, inner.earliest_error, inner.answer, inner.correct)

    def true_score(self, problem: WordedProblem, check: StepCheck) -> float:
        return arithmetic.score_for(problem.problem, check.earliest_error)

    def demonstration(self, problem: WordedProblem, direct: bool) -> str:
        inner = problem.problem
        text = inner.direct_solution() if direct else inner.reference_solution()
        return "\n".join(worded_line(line) for line in text.splitlines())

    def expected_steps(self, problem: WordedProblem, n: int) -> list[str]:
        return (self.demonstration(problem, direct=False).splitlines() + ["."] * n)[:n]

    def synthetic_solution(
        self,
        problem: WordedProblem,
        rng: random.Random,
        correct_fraction: float,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[str, list[str]]:
        kind, lines = arithmetic.synthetic_solution(problem.problem, rng, correct_fraction, weights)
        return kind, [worded_line(line) for line in lines]
