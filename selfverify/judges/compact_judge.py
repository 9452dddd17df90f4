"""The compact judge format (the embedded world's): prompts, parsers and ground-truth references for the
verifier and the meta-verifier (DeepSeekMath-V2, 2025), in plain text a character model can write.

**Verifier.** Prompt: the problem prompt, the solution's steps one per line, then ``#V``::

    Q:5-7-6
    5-7=-2
    -2-6=-9
    A:-9
    #V

Output (the analysis): one line per judged step: the step *as it should read*, what the given step
claims (its result: the text after its ``=``, or after ``A:``), and `` +`` when the given step is right
or `` -`` when it is wrong; judging stops at the first ``-``. A last line ``S:<score>`` gives the
overall score, which follows from the step it names: 1 (every step right), 0.5 (every operation step
right, the answer line wrong, missing after them or followed by more lines: a minor flaw), 0 (an
operation step is wrong)::

    5-7=-2 -2 +
    -2-6=-8 -9 -
    S:0

A line that should not be there (after the answer) has the expected text ``.``. Judging by
re-deriving each step and comparing is what a solver does when it checks work; the expected line
names the issue exactly. The claimed result is copied next to the derived one so that the mark is a
comparison of two adjacent numbers: with only the derived step before it, a small verifier learns to
derive every step right and still marks every given step ``+`` (docs/results/judges.md, 'Tried and dropped').

**Refinement** (the generator, in test-time search): the solution block, each analysis after a ``#V``
line, then ``#R``; the output is the revised solution in the generator's ordinary format.

**Meta-verifier.** Prompt: the problem and the steps, then ``#M`` and the verdict of the analysis
under audit: the step it names as the earliest wrong one (1-based; 0: none) and its score, or ``?`` when
it does not parse. Output: its own analysis of the solution (the verifier's format: it checks the steps
itself), then ``M:<score>``: 1 when the analysis is faithful (it names the real earliest wrong step, or
none when there is none, and its score is the true score), 0.5 when one of the two is right, 0 when
neither is or it is unparsable::

    Q:5-7-6
    5-7=-2
    -2-6=-9
    A:-9
    #M E:0 S:1

    5-7=-2 -2 +
    -2-6=-8 -9 -
    S:0
    M:0

It reads the analysis's verdict, not its lines: shown the lines, a small meta-verifier copies them as
its own check instead of checking, and without a check of its own it cannot tell a faithful verdict
from a wrong one (docs/results/judges.md, 'Tried and dropped'). Faithfulness, as labelled, is about
the verdict.

Parsing is strict (regular expressions over bounded lines); unparsable output gets ``parsed=False``,
which is R_format = 0 in the rewards.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from selfverify.judges.base import SCORES, Verdict, format_score
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.tasks import Problem, StepCheck, check_solution
from selfverify.tasks.arithmetic import ANSWER_PREFIX, score_for

VERIFY_TAG = "#V"
META_TAG = "#M"
REFINE_TAG = "#R"
_SCORE = r"(0|0\.5|1)"
_MARK_RE = re.compile(r"^(\S{1,40}) (\S{1,40}) ([+-])$")
_SCORE_RE = re.compile(rf"^S:{_SCORE}$")
_META_RE = re.compile(rf"^M:{_SCORE}$")
NOTHING = "."  # the expected text of a line that should not exist
# 1: expected step and mark; 2: + the claimed result; 3: + the meta-verifier's own check; 4: it reads the
# analysis's verdict, not its lines.
FORMAT_VERSION = 4


def verifier_prompt(problem_prompt: str, steps: Sequence[str]) -> str:
    """``Q:...`` + the steps + ``#V``; newlines inside a step become spaces (one line per step)."""
    return _solution_block(problem_prompt, steps) + VERIFY_TAG + "\n"


def meta_prompt(problem_prompt: str, steps: Sequence[str], analysis: str) -> str:
    """``Q:...`` + the steps + ``#M`` and the analysis's verdict: ``E:<k> S:<score>`` (k: the 1-based
    step it names as the earliest wrong one, 0 for none), or ``?`` when the analysis does not parse."""
    verdict = parse_analysis(analysis, len(steps))
    claim = f"E:{verdict.earliest_error + 1} S:{format_score(verdict.score)}" if verdict.parsed else "?"
    return _solution_block(problem_prompt, steps) + f"{META_TAG} {claim}\n"


def refine_prompt(problem_prompt: str, steps: Sequence[str], analyses: Sequence[str]) -> str:
    """The solution block, each analysis after a ``#V`` line, then ``#R``: the generator writes the
    revised solution (its ordinary format). The analysis lines already read as the steps should, so a
    revision copies the right steps and recomputes from the first wrong one."""
    shown = "".join(f"{VERIFY_TAG}\n{a.strip()}\n" for a in analyses)
    return _solution_block(problem_prompt, steps) + shown + REFINE_TAG + "\n"


def _solution_block(problem_prompt: str, steps: Sequence[str]) -> str:
    body = "".join(" ".join(s.split()) + "\n" for s in steps)
    return problem_prompt.rstrip("\n") + "\n" + body


def true_score(problem: Problem, check: StepCheck) -> float:
    """The label on DeepSeekMath-V2's {0, 0.5, 1} scale (see the module docstring)."""
    return score_for(problem, check.earliest_error)


def expected_lines(problem: Problem, n_steps: int) -> list[str]:
    """What each of ``n_steps`` lines should read. Only lines up to the earliest wrong one are ever
    judged, and every line before it is right, so this is the reference solution, then ``.``."""
    reference = problem.reference_solution().splitlines()
    return (reference + [NOTHING] * n_steps)[:n_steps]


def quoted(text: str) -> str:
    """``text`` as an analysis line can hold it: spaces dropped, at most 40 characters (``_MARK_RE``)."""
    return "".join(text.split())[:40] or NOTHING


def claimed_result(step: str) -> str:
    """What a step claims, as the analysis quotes it: the text after its last ``=`` (or after ``A:``),
    else the whole step."""
    text = "".join(step.split())
    for sep in ("=", ANSWER_PREFIX):
        if sep in text and text.rsplit(sep, 1)[1]:
            return quoted(text.rsplit(sep, 1)[1])
    return quoted(text)


def reference_analysis(problem: Problem, steps: Sequence[str]) -> str:
    """The faithful analysis of a solution, from the ground-truth checker."""
    check = check_solution(problem, "\n".join(steps))
    return analysis_text(problem, check.steps, check.earliest_error, true_score(problem, check))


def analysis_text(
    problem: Problem,
    steps: Sequence[str],
    earliest_error: int,
    score: float,
    expected: Sequence[str] | None = None,
) -> str:
    """An analysis in this module's format of ``steps`` claiming ``earliest_error`` and ``score``; the
    expected lines are the reference's unless given."""
    n = len(steps)
    expected = expected_lines(problem, n) if expected is None else expected
    last = earliest_error if earliest_error >= 0 else n - 1
    # The expected step is quoted like the claim: the checker reads steps of up to 41 characters (three
    # signed 12-digit numbers), one more than a field of a line holds; unquoted, the faithful analysis of
    # Q:-400000000000+-400000000000 did not parse.
    marks = [
        f"{quoted(expected[i])} {claimed_result(steps[i])} {'-' if i == earliest_error else '+'}"
        for i in range(min(last + 1, n))
    ]
    return "\n".join([*marks, f"S:{format_score(score)}"])


def unfaithful_analysis(problem: Problem, steps: Sequence[str], rng: random.Random) -> str:
    """A well-formed analysis that misjudges the solution (meta-verifier training negatives): it names
    another earliest wrong step (or none) with the score that follows from it, gives another score, or
    both. Its lines agree with their own marks, as a misjudging verifier's do: a step it passes reads as
    given (a missed error is copied, not re-derived) and the step it names reads as it should, or as a
    slip of the verifier's own arithmetic where the given step is right. Only checking the steps
    themselves tells it from a faithful analysis."""
    check = check_solution(problem, "\n".join(steps))
    n = len(check.steps)
    error, score = check.earliest_error, true_score(problem, check)
    kind = rng.choice(("step", "score", "both")) if n else "score"
    if kind in ("step", "both"):
        error = rng.choice([i for i in range(-1, n) if i != error])
        score = score_for(problem, error)
    if kind in ("score", "both"):
        score = rng.choice([s for s in SCORES if s != score])
    expected = [quoted(step) for step in check.steps]
    if 0 <= error < n:
        right = expected_lines(problem, n)[error]
        expected[error] = right if right != expected[error] else _slip(right, rng)
    return analysis_text(problem, check.steps, error, score, expected)


def _slip(line: str, rng: random.Random) -> str:
    """``line`` with its result off by a little (a verifier's arithmetic slip)."""
    head, sep, value = line.rpartition("=") if "=" in line else line.rpartition(ANSWER_PREFIX)
    if not sep or not re.fullmatch(r"-?\d{1,12}", value):
        return NOTHING if line != NOTHING else "A:0"
    return f"{head}{sep}{int(value) + rng.choice((-3, -2, -1, 1, 2, 3))}"


def analysis_lines(text: str) -> tuple[list[tuple[str, str, str]], float] | None:
    """An analysis's lines as (the step as it should read, the claim quoted, the mark), and its score;
    None when the text is not in that form."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or (m := _SCORE_RE.match(lines[-1])) is None:
        return None
    marked = [_MARK_RE.match(line) for line in lines[:-1]]
    if None in marked:
        return None
    return [mark.groups() for mark in marked], float(m.group(1))


def parse_analysis(text: str, n_steps: int) -> Verdict:
    """An analysis -> Verdict. Judged steps score 1 (``+``) or 0 (``-``); steps after the first wrong
    one score 0 (they build on it). Unparsable text: ``parsed=False``, every step 0, score 0."""
    failed = Verdict([0.0] * n_steps, 0, 0.0, text, parsed=False)
    if (parsed := analysis_lines(text)) is None:
        return failed
    marks, score = [mark for _, _, mark in parsed[0]], parsed[1]
    wrong = marks.index("-") if "-" in marks else -1
    complete = len(marks) == wrong + 1 if wrong >= 0 else len(marks) == n_steps
    if not complete or len(marks) > n_steps:
        return failed
    scores = [1.0 if i < wrong or wrong == -1 else 0.0 for i in range(n_steps)]
    return Verdict(scores, wrong if n_steps else 0, score, text)  # no steps: wrong at step 0


def meta_label(problem: Problem, analysis: Verdict, check: StepCheck) -> float:
    """Is the analysis faithful to the truth (see the module docstring)?"""
    if not analysis.parsed:
        return 0.0
    right = (analysis.earliest_error == check.earliest_error) + (analysis.score == true_score(problem, check))
    return right / 2


def parse_meta(text: str) -> tuple[float, bool]:
    """Meta-verifier output (its own analysis, then ``M:<score>``) -> (score, parsed); output that is
    not in that form scores 0, unparsed."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    m = _META_RE.match(lines[-1]) if lines else None
    own = lines[:-1]
    if m is None or not own or not _SCORE_RE.match(own[-1]) or not all(map(_MARK_RE.match, own[:-1])):
        return 0.0, False
    return float(m.group(1)), True


def meta_reference(problem: Problem, steps: Sequence[str], analysis: str) -> tuple[str, float]:
    """The faithful meta-verification of ``analysis`` (the faithful analysis of the solution, then the
    meta label) and that label, from the ground-truth checker."""
    check = check_solution(problem, "\n".join(steps))
    label = meta_label(problem, parse_analysis(analysis, len(steps)), check)
    return reference_analysis(problem, steps) + "\n" + format_meta(label), label


def require_format(version: object, where: str) -> None:
    """Refuse a judge trained under another analysis format: its outputs would be misread."""
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{where}: a generative verifier of analysis format {version}; this version reads format "
            f"{FORMAT_VERSION} (the claimed result on every line; the meta-verifier reads the analysis's "
            "verdict and checks the steps itself): retrain it"
        )


def format_meta(score: float) -> str:
    return f"M:{format_score(score)}"


def split_self_evaluation(response: str) -> tuple[str, str | None]:
    """A self-verifying generator writes its solution, ``#V``, then an analysis of it:
    returns (solution, analysis), analysis None when the separator is missing."""
    solution, sep, analysis = response.partition(VERIFY_TAG)
    return (solution.strip(), analysis.strip()) if sep else (response.strip(), None)


def problem_prompt(problem: str) -> str:
    """A problem as the prompts show it (``Q:`` framing, one line)."""
    text = " ".join(problem.split())
    return (text if text.startswith("Q:") else "Q:" + text) + "\n"


@dataclass
class CompactFormat:
    """This module's format as a judge format (the embedded world's; see ``prose_judge.ProseFormat``
    for natural-language solutions). Its references come from the embedded checker."""

    name: str = "compact"
    version: int = FORMAT_VERSION
    verify_tag: str = VERIFY_TAG

    def verifier_prompt(self, problem_text: str, steps: Sequence[str]) -> str:
        return verifier_prompt(problem_prompt(problem_text), steps)

    def meta_prompt(self, problem_text: str, steps: Sequence[str], analysis: str) -> str:
        return meta_prompt(problem_prompt(problem_text), steps, analysis)

    def refine_prompt(self, problem_text: str, steps: Sequence[str], analyses: Sequence[str]) -> str:
        return refine_prompt(problem_prompt(problem_text), steps, analyses)

    parse_analysis = staticmethod(parse_analysis)
    parse_meta = staticmethod(parse_meta)
    reference_analysis = staticmethod(reference_analysis)
    unfaithful_analysis = staticmethod(unfaithful_analysis)
    meta_reference = staticmethod(meta_reference)
    split_self_evaluation = staticmethod(split_self_evaluation)

    @staticmethod
    def meta_label(problem: Problem, verdict: Verdict, check: StepCheck) -> float:
        return meta_label(problem, verdict, check)
