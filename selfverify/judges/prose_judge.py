"""A prompted judge format for natural-language solutions, in the style of DeepSeekMath-V2.

**Verifier.** The user message shows the problem and the solution as numbered steps and asks for a
step-by-step analysis that names the first wrong step and gives a score in {0, 0.5, 1}. The analysis
judges each step up to the first wrong one, then gives its verdict in two fixed lines::

    Step 1: 5 - 7 = -2. Correct.
    Step 2: -2 - 6 = -8, not -9. Wrong.
    First wrong step: 2
    Score: 0

A step line re-derives the step where the task knows what it should read ("-2 - 6 = -8, not -9"),
so the mark is a comparison the judge can make; otherwise it is the mark alone ("Step 2: Wrong.").
"First wrong step: none" when every step is right. The score follows the task's scale: 1 no wrong
step, 0.5 a minor flaw (the working right, the final answer wrong or missing), 0 a wrong step.

**Meta-verifier.** The user message shows the problem, the solution and the verifier's *full*
analysis, and asks whether the issues it names are real and its score justified. The answer is the
meta-verifier's own analysis of the solution (it checks the steps itself), then ``Meta score: s``:
1 when the analysis names the real first wrong step (or none when there is none) and gives the true
score, 0.5 when one of the two is right, 0 when neither is or it does not parse.

Parsing is strict (bounded lines, fixed patterns, numbered steps in order, marks agreeing with the
named step); anything else is ``parsed=False`` (R_format = 0).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from selfverify.judges.base import SCORES, Verdict, format_score
from selfverify.tasks.base import Prompter, StepCheck, Task, TaskProblem, raw_prompter

NAME = "prose"
VERSION = 1
MAX_LINE = 300
_STEP_RE = re.compile(rf"^Step (\d{{1,3}}): (.{{0,{MAX_LINE}}}?)(Correct|Wrong)\.$")
_FIRST_RE = re.compile(r"^First wrong step: (none|\d{1,3})$")
_SCORE_RE = re.compile(r"^Score: (0|0\.5|1)$")
_META_RE = re.compile(r"^Meta score: (0|0\.5|1)$")
_LAST_INT_RE = re.compile(r"-?\d{1,12}(?!.*\d)")
VERIFY_TAG = "Self-check:"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_LINE]


def solution_block(problem_text: str, steps: Sequence[str]) -> str:
    numbered = "\n".join(f"Step {i + 1}: {_one_line(s)}" for i, s in enumerate(steps))
    return f"Problem: {_one_line(problem_text)}\n\nSolution:\n{numbered}"


def claimed_result(step: str) -> str:
    """What a step claims, as an analysis quotes it: the text after its last ``=`` or ``:``."""
    for sep in ("=", ":"):
        if sep in step and step.rsplit(sep, 1)[1].strip():
            return _one_line(step.rsplit(sep, 1)[1])
    return _one_line(step)


def step_line(i: int, given: str, expected: str | None, wrong: bool) -> str:
    """One analysis line: the step re-derived (when ``expected`` is known), then the mark."""
    if not wrong:
        body = f"{_one_line(expected)}. " if expected is not None else ""
        return f"Step {i + 1}: {body}Correct."
    if expected is None:
        return f"Step {i + 1}: Wrong."
    if expected == ".":
        return f"Step {i + 1}: this line should not be there. Wrong."
    return f"Step {i + 1}: {_one_line(expected)}, not {claimed_result(given)}. Wrong."


def analysis_text(
    steps: Sequence[str], expected: Sequence[str] | None, earliest_error: int, score: float
) -> str:
    """An analysis of ``steps`` naming ``earliest_error`` (-1: none) with ``score``; ``expected``: what
    each step should read (a step judged right is quoted as given when it is None)."""
    n = len(steps)
    last = earliest_error if earliest_error >= 0 else n - 1
    lines = [
        step_line(i, steps[i], expected[i] if expected is not None else None, i == earliest_error)
        for i in range(min(last + 1, n))
    ]
    first = "none" if earliest_error < 0 else str(earliest_error + 1)
    return "\n".join([*lines, f"First wrong step: {first}", f"Score: {format_score(score)}"])


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines() if line.strip()]


def parse_analysis(text: str, n_steps: int) -> Verdict:
    """An analysis -> Verdict (steps before the first wrong one score 1, the rest 0); unparsable text
    (or marks that contradict the named step) -> ``parsed=False``."""
    failed = Verdict([0.0] * n_steps, 0, 0.0, text, parsed=False)
    lines = _lines(text)
    if len(lines) < 2 or len(lines) > n_steps + 2:
        return failed
    first, score = _FIRST_RE.match(lines[-2]), _SCORE_RE.match(lines[-1])
    if first is None or score is None:
        return failed
    marks = []
    for k, line in enumerate(lines[:-2]):
        m = _STEP_RE.match(line)
        if m is None or int(m.group(1)) != k + 1:
            return failed
        marks.append(m.group(3))
    wrong = marks.index("Wrong") if "Wrong" in marks else -1
    named = -1 if first.group(1) == "none" else int(first.group(1)) - 1
    complete = len(marks) == wrong + 1 if wrong >= 0 else len(marks) in (0, n_steps)
    if named != wrong or not complete or named >= n_steps:
        return failed
    scores = [1.0 if wrong == -1 or i < wrong else 0.0 for i in range(n_steps)]
    return Verdict(scores, wrong if n_steps else 0, float(score.group(1)), text)


def parse_meta(text: str) -> tuple[float, bool]:
    """Meta-verifier output (its own analysis, then ``Meta score: s``) -> (score, parsed)."""
    lines = _lines(text)
    m = _META_RE.match(lines[-1]) if lines else None
    own = lines[:-1]
    if m is None or len(own) < 2 or not _FIRST_RE.match(own[-2]) or not _SCORE_RE.match(own[-1]):
        return 0.0, False
    if not all(_STEP_RE.match(line) for line in own[:-2]):
        return 0.0, False
    return float(m.group(1)), True


def _slip(line: str, rng: random.Random) -> str:
    """``line`` with its last number off by a little (a verifier's arithmetic slip)."""
    m = _LAST_INT_RE.search(line)
    if m is None:
        return "."
    wrong = int(m.group()) + rng.choice((-3, -2, -1, 1, 2, 3))
    return line[: m.start()] + str(wrong) + line[m.end() :]


@dataclass
class ProseFormat:
    """The prompted format over a task (for reference analyses) and the judge's chat template."""

    task: Task | None = None  # needed only for the ground-truth analyses training uses
    prompter: Prompter = raw_prompter
    name: str = NAME
    version: int = VERSION
    verify_tag: str = VERIFY_TAG

    def verifier_prompt(self, problem_text: str, steps: Sequence[str]) -> str:
        return self.prompter(
            "Check this solution step by step.\n\n"
            f"{solution_block(problem_text, steps)}\n\n"
            "Judge each step up to the first wrong one, ending each with Correct. or Wrong. Then write "
            '"First wrong step: k" (none if every step is right) and "Score: s" (1 all right, 0.5 only '
            "the final answer wrong or missing, 0 a wrong step)."
        )

    def meta_prompt(self, problem_text: str, steps: Sequence[str], analysis: str) -> str:
        shown = "\n".join(_one_line(line) for line in _lines(analysis)[: len(steps) + 2]) or "(empty)"
        return self.prompter(
            "Here is a solution and an analysis of it. Are the issues the analysis names real, and is "
            "its score justified?\n\n"
            f"{solution_block(problem_text, steps)}\n\nAnalysis:\n{shown}\n\n"
            'Check the solution yourself in the same form, then write "Meta score: s" (1 the analysis '
            "is right, 0.5 half right, 0 wrong)."
        )

    def refine_prompt(self, problem_text: str, steps: Sequence[str], analyses: Sequence[str]) -> str:
        reviews = "\n\n".join(
            f"Review {i + 1}:\n" + "\n".join(_one_line(line) for line in _lines(a)[: len(steps) + 2])
            for i, a in enumerate(analyses)
        )
        return self.prompter(
            "Here is a solution and reviews of it.\n\n"
            f"{solution_block(problem_text, steps)}\n\n{reviews or '(no reviews)'}\n\n"
            "Write the whole solution again, one step per line, correcting the steps the reviews find "
            "wrong, and end with the final answer line."
        )

    parse_analysis = staticmethod(parse_analysis)
    parse_meta = staticmethod(parse_meta)

    def _task(self) -> Task:
        if self.task is None:
            raise ValueError("this judge format was built without a task: it cannot write references")
        return self.task

    def _check(self, problem: TaskProblem, steps: Sequence[str]) -> StepCheck:
        return self._task().check(problem, "\n".join(steps))

    def reference_analysis(self, problem: TaskProblem, steps: Sequence[str]) -> str:
        task, check = self._task(), self._check(problem, steps)
        expected = task.expected_steps(problem, len(check.steps))
        return analysis_text(check.steps, expected, check.earliest_error, task.true_score(problem, check))

    def unfaithful_analysis(self, problem: TaskProblem, steps: Sequence[str], rng: random.Random) -> str:
        """A well-formed analysis that misjudges the solution: another first wrong step (with the score
        that follows from it), another score, or both; steps it passes are quoted as given."""
        task, check = self._task(), self._check(problem, steps)
        n = len(check.steps)
        error, score = check.earliest_error, task.true_score(problem, check)
        kind = rng.choice(("step", "score", "both")) if n else "score"
        if kind in ("step", "both"):
            error = rng.choice([i for i in range(-1, n) if i != error])
            faked = StepCheck(check.steps, [i < error or error < 0 for i in range(n)], error, None, False)
            score = task.true_score(problem, faked)
        if kind in ("score", "both"):
            score = rng.choice([s for s in SCORES if s != score])
        truth = task.expected_steps(problem, n)
        expected = list(check.steps) if truth is not None else None
        if expected is not None and 0 <= error < n:
            right = truth[error]
            expected[error] = right if right != check.steps[error] else _slip(right, rng)
        return analysis_text(check.steps, expected, error, score)

    def meta_label(self, problem: TaskProblem, verdict: Verdict, check: StepCheck) -> float:
        if not verdict.parsed:
            return 0.0
        true = self._task().true_score(problem, check)
        return ((verdict.earliest_error == check.earliest_error) + (verdict.score == true)) / 2

    def meta_reference(self, problem: TaskProblem, steps: Sequence[str], analysis: str) -> tuple[str, float]:
        check = self._check(problem, steps)
        label = self.meta_label(problem, parse_analysis(analysis, len(check.steps)), check)
        return f"{self.reference_analysis(problem, steps)}\nMeta score: {format_score(label)}", label

    def split_self_evaluation(self, response: str) -> tuple[str, str | None]:
        solution, sep, analysis = response.partition(self.verify_tag)
        return (solution.strip(), analysis.strip()) if sep else (response.strip(), None)
