"""GSM8K and MATH behind the task seam (docs/guides/architecture.md, 'Seams'): real word problems, labelled
by the arithmetic rule.

Records come from :func:`selfverify.tasks.realmath.load_math_dataset` (a hub name for users with a hub, or a
local ``.jsonl``/``.json``/``.parquet`` file such as the samples shipped in ``selfverify.data``, see
:func:`data_path`). The generator is asked to reason one step per line and to end with a line
``Answer: <final answer>``.

Step labels are the arithmetic rule's (:class:`selfverify.judges.arith_rule.ArithmeticRuleVerifier`), not
ground truth, so ``exact_step_labels`` is False: a step is wrong when one of its numeric claims is
false; wrong setups with right arithmetic pass. The final answer is the one the solution states with
an answer marker ("Answer:", "the answer is", ``\\boxed{}``, ``####``; a bare last number is not an
answer here, since the task asks for an answer line), read by
:func:`~selfverify.judges.arith_rule.final_answer` and compared with
:func:`~selfverify.tasks.realmath.answers_equal`. When every step passes but that answer
is wrong or missing, the last step is the wrong one; nothing after the earliest wrong step counts.

Held-out problems come from ``heldout_source`` when one is given (training records asking a held-out
question are then dropped, whatever their id). Otherwise a fixed slice of the training records is
set aside: ``HELDOUT_FRACTION`` of them (at least one), chosen by an RNG keyed by the task's kind
alone, so the slice is the same for every seed and never drawn for training.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Literal

from selfverify.judges.arith_rule import ArithmeticRuleVerifier, final_answer
from selfverify.judges.base import VerifyInput
from selfverify.judges.records import parse_record
from selfverify.tasks.arithmetic import OFFSETS
from selfverify.tasks.base import Prompter, StepCheck, labelled_steps, raw_prompter
from selfverify.tasks.realmath import answers_equal, load_math_dataset, split_steps
from selfverify.utils.io import OnError, RecordError, read_records, report_record_error
from selfverify.utils.seeds import stream_seed

MathKind = Literal["gsm8k", "math"]
MATH_KINDS: tuple[str, ...] = ("gsm8k", "math")
HELDOUT_FRACTION = 0.1
ANSWER_WORD = "Answer:"
# One error per corrupted solution: offset, a step's stated result off by a little (later steps keep
# the right values); final, the working right but the answer line states another value; no_answer,
# the working right but the answer line dropped.
MATH_CORRUPTIONS: tuple[str, ...] = ("offset", "final", "no_answer")

_ANNOTATION_RE = re.compile(r"<<[^<>\n]*>>")
# The same markers realmath's answer extraction reads: a step carrying one states an answer.
_ANSWER_MARK_RE = re.compile(r"\banswer\b[\s*]*(?:is\b|:|=)|\\boxed|\\fbox|####", re.IGNORECASE)
_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "= 24", "= $0.2", "= 1,200": a stated numeric result (the last one of a step is changed).
_RESULT_RE = re.compile(r"=\s*\$?\s*(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?![\d,])")
_DIGITS_RE = re.compile(r"\d+")

_RULE = ArithmeticRuleVerifier()


def data_path(name: str) -> Path:
    """A file shipped in ``selfverify.data`` (the repository's ``data/``), found wherever the package is
    installed; raises ``FileNotFoundError`` naming the files that are there."""
    root = resources.files("selfverify.data")
    found = root.joinpath(name)
    if not found.is_file():
        shipped = sorted(p.name for p in root.iterdir() if p.is_file() and not p.name.endswith(".py"))
        raise FileNotFoundError(f"no {name!r} in selfverify.data; shipped: {', '.join(shipped)}")
    return Path(str(found))


@dataclass(frozen=True)
class MathProblem:
    """One GSM8K or MATH problem. ``prompt`` is left out of equality and hashing, so a problem is the
    same held-out problem whatever chat template built its prompt."""

    id: str
    question: str
    answer: str  # the reference final answer ("" when unknown)
    reference: str  # the reference solution as the source wrote it ("" when none)
    prompt: str = field(compare=False)

    @property
    def text(self) -> str:
        return self.question


def user_message(question: str, kind: MathKind) -> str:
    """The instruction the generator gets: the graded format (steps on lines, a final answer line)."""
    if kind == "gsm8k":
        last = f'"{ANSWER_WORD} <number>", the final answer as a number'
    else:
        last = f'"{ANSWER_WORD} <final answer>", the final answer in LaTeX (it may be boxed: \\boxed{{...}})'
    return f"{question}\n\nReason step by step, one step per line. End with a last line {last}."


def answer_line(answer: str, kind: MathKind) -> str:
    """The graded answer line; MATH answers are boxed, so LaTeX with words is read whole."""
    return f"{ANSWER_WORD} {answer}" if kind == "gsm8k" else f"{ANSWER_WORD} \\boxed{{{answer}}}"


def unbox(text: str) -> str:
    """``text`` with every ``\\boxed{x}`` written as ``x``: in a demonstration the answer line alone
    states the answer, so dropping that line leaves a solution with none."""
    while (m := _BOX_OPEN_RE.search(text)) is not None:
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if depth:  # unbalanced: leave the rest as written
            return text
        text = text[: m.start()] + text[m.end() : end - 1] + text[end:]
    return text


def reference_steps(reference: str, kind: MathKind) -> list[str]:
    """The working of a reference solution, one step per line, without its final answer marker.

    GSM8K: each line, ``<<a*b=c>>`` calculator annotations and the ``#### x`` line dropped. MATH:
    paragraphs with their inner line breaks joined (display math spans lines), split into sentences,
    boxes unwrapped.
    """
    if kind == "gsm8k":
        lines = [" ".join(_ANNOTATION_RE.sub("", line).split()) for line in split_steps(reference)]
        return [line for line in lines if line and not line.startswith("####")]
    paragraphs = [" ".join(p.split()) for p in split_steps(reference, "double-newline")]
    return [unbox(s) for p in paragraphs for s in split_steps(p, "sentences")]


def stated_answer(steps: Sequence[str]) -> str | None:
    """The final answer the marked steps state (the marker written last wins), None when no step has
    an answer marker: the working's last number is not taken for an answer."""
    marked = [s for s in steps if _ANSWER_MARK_RE.search(s)]
    return final_answer(marked) if marked else None


def arithmetic_holds(problem_text: str, steps: Sequence[str]) -> list[bool]:
    """Per step, whether the arithmetic rule finds no wrong numeric claim (unchecked claims pass)."""
    verdict = _RULE.verify(VerifyInput(problem=problem_text, steps=list(steps)))
    return [score == 1.0 for score in verdict.step_scores]


def _offset_result(step: str, offset: int) -> str | None:
    """``step`` with its last stated ``= number`` result moved by ``offset``, or None when it states
    none or the rule would not see the change (an unchecked claim such as ``x = 5``)."""
    matches = list(_RESULT_RE.finditer(step))
    if not matches:
        return None
    m = matches[-1]
    changed = Decimal(m.group(1).replace(",", "")) + offset
    altered = step[: m.start(1)] + str(changed) + step[m.end(1) :]
    return None if arithmetic_holds("", [altered])[0] else altered


def _wrong_answer(answer: str, rng: random.Random) -> str:
    """Another answer: the last digit run of ``answer`` moved by a small offset (kept non-negative, so
    no sign appears inside LaTeX), checked unequal; ``0`` for an answer without digits."""
    runs = list(_DIGITS_RE.finditer(answer))
    if not runs:
        return "0"
    m = runs[-1]
    for offset in rng.sample(OFFSETS, len(OFFSETS)):
        value = int(m.group()) + offset
        value = value if value >= 0 else int(m.group()) + abs(offset)
        wrong = answer[: m.start()] + str(value) + answer[m.end() :]
        if not answers_equal(wrong, answer):
            return wrong
    return "0" if answer != "0" else "1"


def _draw_kind(rng: random.Random, weights: Mapping[str, float] | None) -> str:
    """A corruption kind by ``weights``, kinds this task has not ignored (the embedded world's
    ``operand``/``skip`` may sit in a shared config); uniform when no known kind has weight."""
    known = {k: w for k, w in (weights or {}).items() if k in MATH_CORRUPTIONS and w > 0}
    if not known:
        return rng.choice(MATH_CORRUPTIONS)
    return rng.choices(list(known), list(known.values()))[0]


class MathDatasetTask:
    """GSM8K (``kind="gsm8k"``) or MATH (``kind="math"``) problems as a :class:`~selfverify.tasks.base.Task`.

    Records without a problem or a reference answer are dropped: they cannot be graded.
    """

    exact_step_labels = False

    def __init__(
        self,
        kind: MathKind,
        source: str | Path,
        *,
        split: str = "train",
        heldout_source: str | Path | None = None,
        heldout_split: str = "test",
        prompter: Prompter = raw_prompter,
        cache_dir: str | Path | None = None,
    ) -> None:
        if kind not in MATH_KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(MATH_KINDS)}")
        self.name = kind
        self.kind: MathKind = kind
        self.prompter = prompter
        # Seed data read by processbench_seed: (problem, steps) -> the file's earliest wrong step.
        self._seed_labels: dict[tuple[MathProblem, tuple[str, ...]], int] = {}
        records = self._load(source, split, cache_dir)
        if heldout_source is not None:
            self._heldout = self._load(heldout_source, heldout_split, cache_dir)
            held = {p.question for p in self._heldout}
            self._train = [p for p in records if p.question not in held]
        else:
            order = random.Random(f"mathdata-heldout-{kind}").sample(range(len(records)), len(records))
            chosen = set(order[: max(1, round(HELDOUT_FRACTION * len(records)))])
            self._heldout = [p for i, p in enumerate(records) if i in chosen]
            self._train = [p for i, p in enumerate(records) if i not in chosen]

    def _load(self, source: str | Path, split: str, cache_dir: str | Path | None) -> list[MathProblem]:
        rows = load_math_dataset(source, self.kind, split, cache_dir=cache_dir)
        gradable = (r for r in rows if r["problem"] and r["answer"])
        return [self.problem(r["id"], r["problem"], r["answer"], r["solution"]) for r in gradable]

    def problem(self, id: str, question: str, answer: str, reference: str) -> MathProblem:
        """A problem of this task, its prompt built by the task's prompter."""
        return MathProblem(id, question, answer, reference, self.prompter(user_message(question, self.kind)))

    def problem_from_text(self, text: str, answer: str | None, id: str) -> MathProblem:
        return self.problem(id, text, answer or "", "")

    def heldout(self, n: int, seed: int) -> list[MathProblem]:
        """``n`` held-out problems in an order keyed by ``seed``; all of them come from the fixed pool."""
        if n > len(self._heldout):
            raise ValueError(f"{self.name}: {n} held-out problems asked for, {len(self._heldout)} there are")
        return random.Random(stream_seed(seed, "heldout")).sample(self._heldout, n)

    def train_problems(self, n: int, *, seed: int, tag: str, exclude: set[MathProblem]) -> list[MathProblem]:
        """``n`` distinct training problems drawn by an RNG keyed by (seed, tag), none in ``exclude``."""
        available = [p for p in self._train if p not in exclude]
        if n > len(available):
            raise ValueError(
                f"{self.name}: {n} training problems asked for, {len(available)} remain "
                f"({len(self._train)} in the training pool, the rest excluded)"
            )
        return random.Random(stream_seed(seed, f"train_problems/{tag}")).sample(available, n)

    def split_steps(self, solution: str) -> list[str]:
        """Non-empty stripped lines: the task asks for one step per line."""
        return split_steps(solution)

    def check(self, problem: MathProblem, solution: str) -> StepCheck:
        """The rule's labels (see the module docstring), or for a solution read by
        :meth:`processbench_seed` its file's label (``correct``: no wrong step). Any other solution of
        a problem without a reference answer has its answer left ungraded: ``correct`` is False, no
        step blamed for it."""
        steps = self.split_steps(solution)
        seeded = self._seed_labels.get((problem, tuple(steps)))
        if seeded is not None:
            labels = [seeded == -1 or i < seeded for i in range(len(steps))]
            return StepCheck(steps, labels, seeded, stated_answer(steps), seeded == -1)
        ok = arithmetic_holds(problem.question, steps)
        answer = stated_answer(steps)
        correct = answers_equal(answer, problem.answer)
        if problem.answer and steps and all(ok) and not correct:
            ok[-1] = False
        earliest = labelled_steps(steps, ok)
        labels = ok if earliest == -1 else [i < earliest for i in range(len(steps))]
        return StepCheck(steps, labels, earliest, answer, correct)

    def true_score(self, problem: MathProblem, check: StepCheck) -> float:
        """1: no wrong step; 0.5: only the last step is wrong and its arithmetic holds, so the answer
        alone is wrong or missing; 0: a working step is wrong."""
        if check.earliest_error == -1:
            return 1.0
        last = len(check.steps) - 1
        if check.earliest_error == last and arithmetic_holds(problem.question, check.steps[last:])[0]:
            return 0.5
        return 0.0

    def demonstration(self, problem: MathProblem, direct: bool) -> str:
        """The reference rewritten into the graded format (``direct``, or no reference: the answer
        line alone)."""
        working = [] if direct else reference_steps(problem.reference, self.kind)
        return "\n".join([*working, answer_line(problem.answer, self.kind)])

    def expected_steps(self, problem: MathProblem, n: int) -> list[str] | None:
        if not problem.reference:
            return None
        return (self.demonstration(problem, direct=False).splitlines() + ["."] * n)[:n]

    def synthetic_solution(
        self,
        problem: MathProblem,
        rng: random.Random,
        correct_fraction: float,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[str, list[str]]:
        """(kind, steps): the demonstration with probability ``correct_fraction`` (kind ``none``), else
        it with one error of a kind of :data:`MATH_CORRUPTIONS` drawn by ``weights``. ``offset`` falls
        back to ``final`` when no working step states a result the rule would see changed, and
        ``no_answer`` when the working itself states the answer ("so the answer is 15")."""
        steps = self.demonstration(problem, direct=False).splitlines()
        if rng.random() < correct_fraction:
            return "none", steps
        kind = _draw_kind(rng, weights)
        working = steps[:-1]
        if kind == "offset":
            offset = rng.choice(OFFSETS)
            changed = [(i, s) for i, step in enumerate(working) if (s := _offset_result(step, offset))]
            if changed:
                i, step = rng.choice(changed)
                return kind, [*working[:i], step, *working[i + 1 :], steps[-1]]
        if kind == "no_answer" and stated_answer(working) is None:
            return kind, working
        return "final", [*working, answer_line(_wrong_answer(problem.answer, rng), self.kind)]

    def processbench_seed(
        self, path: str | Path, *, on_error: OnError = "skip"
    ) -> list[tuple[MathProblem, list[str], int]]:
        """(problem, steps, earliest wrong step) of each labelled record of a ProcessBench-format file
        (``{"id", "problem", "steps", "label"}``, JSONL or a JSON array): the judge's seed data.

        Malformed or unlabelled records are reported with their line number (a warning with
        ``on_error="skip"``, a :class:`~selfverify.utils.io.RecordError` with ``"fail"``). The problems have
        no reference answer or solution; from then on :meth:`check` labels exactly these steps by the
        file (the loop's ``loop.judge_seed``).
        """
        out = []
        for line_no, record in read_records(path, on_error=on_error):
            try:
                item = parse_record(record, line_no)
                if item.label is None:
                    raise ValueError("no 'label': seed data needs the earliest wrong step (-1 if none)")
            except ValueError as exc:
                report_record_error(RecordError(path, line_no, str(exc)), on_error)
                continue
            problem = self.problem(str(item.id), item.input.problem, "", "")
            # One line per step, as the loop's solutions are: a step's own line breaks become spaces.
            steps = [" ".join(step.split()) for step in item.input.steps]
            if not all(steps):
                report_record_error(RecordError(path, line_no, "an empty step"), on_error)
                continue
            self._seed_labels[(problem, tuple(steps))] = item.label
            out.append((problem, steps, item.label))
        return out
