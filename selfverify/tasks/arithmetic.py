"""The embedded world: multi-step arithmetic evaluated left to right, with ground-truth step labels.

A problem is a start value and a list of operations, written ``Q:12+7*3-4`` and evaluated strictly
left to right (no precedence): ((12+7)*3)-4. The reference solution writes one step per line and a
final answer line::

    12+7=19
    19*3=57
    57-4=53
    A:53

The rule-based step checker labels every line of *any* solution text. A step is correct when it is
well formed, continues from the previous step's stated result (the start value for the first step),
applies the problem's next operation, and its arithmetic is right; the answer line is correct when
all operations were done and it repeats the last result. Nothing after the earliest wrong step counts
(ProcessBench semantics), and a solution without an answer line is wrong at its last step. Parsing
is a fixed regular expression over bounded digit strings; nothing is ever evaluated as code.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

from selfverify.config.schema import TaskSpec
from selfverify.tasks.base import StepCheck, labelled_steps
from selfverify.utils.seeds import stream_seed

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
MAX_DIGITS = 12  # bounds every number the checker reads, so untrusted text can't cost big-int work
# Bounds a parsed problem: its true answer is big-int work that grows with the square of the number of
# operations (Q:1*9*9*... with 100,000 of them took 6 s to check); real problems have a handful.
MAX_OPS = 1000
_NUM = rf"-?\d{{1,{MAX_DIGITS}}}"
STEP_RE = re.compile(rf"^({_NUM})([+\-*])({_NUM})=({_NUM})$")
ANSWER_RE = re.compile(rf"^A:({_NUM})$")
ANSWER_PREFIX = "A:"


@dataclass(frozen=True)
class Problem:
    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def prompt(self) -> str:
        return "Q:" + str(self.start) + "".join(f"{op}{b}" for op, b in self.ops) + "\n"

    @property
    def text(self) -> str:
        """The problem statement without the prompt framing."""
        return self.prompt[2:].strip()

    def running_values(self) -> list[int]:
        values, acc = [], self.start
        for op, b in self.ops:
            acc = OPS[op](acc, b)
            values.append(acc)
        return values

    @property
    def answer(self) -> int:
        return self.running_values()[-1]

    def reference_solution(self) -> str:
        lines, answer = _work(self.start, list(self.ops))
        return "\n".join([*lines, f"{ANSWER_PREFIX}{answer}"])

    def direct_solution(self) -> str:
        """The answer alone, with no working: a shortcut the checker marks wrong at step 0."""
        return f"{ANSWER_PREFIX}{self.answer}"


def sample_problem(rng: random.Random, spec: TaskSpec) -> Problem:
    n = rng.randint(spec.min_ops, spec.max_ops)
    if spec.max_value is not None:
        return _bounded_problem(rng, spec, n, spec.max_value)
    ops = []
    for _ in range(n):
        op = rng.choice(spec.ops)
        ops.append((op, rng.randint(1, _largest_operand(spec, op))))
    return Problem(rng.randint(1, spec.max_operand), tuple(ops))


def _largest_operand(spec: TaskSpec, op: str) -> int:
    return spec.max_mul_operand if op == "*" else spec.max_operand


def _bounded_problem(rng: random.Random, spec: TaskSpec, n: int, bound: int) -> Problem:
    """``n`` operations whose running values stay within ``bound`` in magnitude: each draws an operation
    among those with an operand that keeps the value there, then such an operand. ``+`` or ``-`` by 1
    always fits (the configuration checks that one of them is allowed), so a draw never runs dry."""
    start = rng.randint(1, spec.max_operand)
    acc, ops = start, []
    for _ in range(n):
        fits = {
            op: [b for b in range(1, _largest_operand(spec, op) + 1) if abs(OPS[op](acc, b)) <= bound]
            for op in spec.ops
        }
        op = rng.choice([o for o in spec.ops if fits[o]])
        b = rng.choice(fits[op])
        ops.append((op, b))
        acc = OPS[op](acc, b)
    return Problem(start, tuple(ops))


# One error per corrupted solution, each a mistake a solver makes:
# offset: a step's result is off by a little, later steps carry the wrong value on;
# operand: a step uses a wrong number (its left operand miscopied or the problem's operand misread),
#   with the arithmetic right for the wrong number;
# skip: one operation of the problem is left out, the rest done right;
# no_answer: the working is right but the answer line is missing (wrong at the last step);
# final: the working is right but the answer line states another value;
# operation: a step does another operation than the problem's, with the arithmetic right for it.
CORRUPTIONS = ("offset", "operand", "skip", "no_answer", "final", "operation")
# Drawn alike where no weights are given (the cold start's refinement drafts, the PRM's data): the kinds
# those were measured with, so that adding a kind leaves their data as it was.
UNWEIGHTED_CORRUPTIONS = CORRUPTIONS[:5]
OFFSETS = (-10, -3, -2, -1, 1, 2, 3, 10)


def _work(start: int, ops: list[tuple[str, int]]) -> tuple[list[str], int]:
    """Solution lines ``a op b=c`` for ``ops`` applied left to right from ``start``; the final value."""
    lines, acc = [], start
    for op, b in ops:
        value = OPS[op](acc, b)
        lines.append(f"{acc}{op}{b}={value}")
        acc = value
    return lines, acc


def corrupt_solution(problem: Problem, kind: str, rng: random.Random) -> list[str]:
    """The problem's solution lines with one error of the given kind (see :data:`CORRUPTIONS`)."""
    ops, n = list(problem.ops), len(problem.ops)
    lines, final = _work(problem.start, ops)
    if kind == "no_answer":
        return lines
    if kind == "final":
        return lines + [f"{ANSWER_PREFIX}{final + rng.choice(OFFSETS)}"]
    if kind == "skip":
        k = rng.randrange(n)
        lines, final = _work(problem.start, ops[:k] + ops[k + 1 :])
        return lines + [f"{ANSWER_PREFIX}{final}"]
    k = rng.randrange(n)
    if kind == "offset":
        return slipped_solution(problem, k, rng.choice(OFFSETS))
    if kind not in ("operand", "operation"):
        raise ValueError(f"unknown corruption {kind!r}; known: {', '.join(CORRUPTIONS)}")
    head, acc = _work(problem.start, ops[:k])
    op, b = ops[k]
    if kind == "operation":
        op = rng.choice([o for o in OPS if o != op])
    elif rng.random() < 0.5:
        acc += rng.choice(OFFSETS[1:-1])  # the carried value miscopied
    else:
        # The problem's number misread: a nearby one, not negative when it is not. A negative operand
        # (parse_problem reads them) left no candidate at all (IndexError) below -3.
        low = max(b - 3, 0) if b >= 0 else b - 3
        b = rng.choice([x for x in range(low, b + 4) if x != b])
    wrong = OPS[op](acc, b)
    step = f"{acc}{op}{b}={wrong}"
    tail, final = _work(wrong, ops[k + 1 :])
    return head + [step] + tail + [f"{ANSWER_PREFIX}{final}"]


def slipped_solution(problem: Problem, k: int, offset: int) -> list[str]:
    """The problem's solution lines with step ``k``'s result off by ``offset`` (a slip), the steps after
    it carried on from the wrong value."""
    ops = list(problem.ops)
    head, acc = _work(problem.start, ops[:k])
    op, b = ops[k]
    wrong = OPS[op](acc, b) + offset
    tail, final = _work(wrong, ops[k + 1 :])
    return head + [f"{acc}{op}{b}={wrong}"] + tail + [f"{ANSWER_PREFIX}{final}"]


def synthetic_solution(
    problem: Problem, rng: random.Random, correct_fraction: float, weights: Mapping[str, float] | None = None
) -> tuple[str, list[str]]:
    """(kind, steps): the reference solution with probability ``correct_fraction`` (kind ``none``),
    else the reference with one error of a kind drawn by ``weights`` (kind -> weight; a kind left out
    is never drawn), or of any kind of :data:`UNWEIGHTED_CORRUPTIONS` alike when ``weights`` is None."""
    if rng.random() < correct_fraction:
        return "none", problem.reference_solution().splitlines()
    if weights is None:
        kind = rng.choice(UNWEIGHTED_CORRUPTIONS)
    else:
        kind = rng.choices(list(weights), list(weights.values()))[0]
    return kind, corrupt_solution(problem, kind, rng)


def heldout_split(spec: TaskSpec, n: int, seed: int) -> list[Problem]:
    """The fixed held-out problems: distinct, drawn from their own seed."""
    rng, seen, out = random.Random(stream_seed(seed, "heldout")), set(), []
    while len(out) < n:
        p = sample_problem(rng, spec)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def train_problems(spec: TaskSpec, n: int, *, seed: int, tag: str, exclude: set[Problem]) -> list[Problem]:
    """``n`` training problems, never a held-out one, drawn from an RNG keyed by (seed, tag).

    Keying the draw by a tag such as ``"rl-17"`` makes every step's data independent of the steps
    before it, so a resumed run sees exactly the data the killed run would have seen.
    """
    rng, out = random.Random(stream_seed(seed, f"train_problems/{tag}")), []
    while len(out) < n:
        p = sample_problem(rng, spec)
        if p not in exclude:
            out.append(p)
    return out


def split_steps(solution: str) -> list[str]:
    """One step per non-empty line."""
    return [line.strip() for line in solution.strip().splitlines() if line.strip()]


def check_solution(problem: Problem, solution: str) -> StepCheck:
    """Label every step of ``solution`` (see the module docstring for the rule)."""
    steps = split_steps(solution)
    labels: list[bool] = []
    prev, done, answer = problem.start, 0, None
    for line in steps:
        ok = answer is None and (not labels or labels[-1])  # nothing after the earliest error counts
        if (m := ANSWER_RE.match(line)) is not None:
            answer = int(m.group(1)) if answer is None else answer
            ok = ok and done == len(problem.ops) and answer == prev
        elif ok and (m := STEP_RE.match(line)) is not None and done < len(problem.ops):
            a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
            ok = a == prev and (op, b) == problem.ops[done] and OPS[op](a, b) == c
            prev, done = c, done + 1
        else:
            ok = False
        labels.append(ok)
    if answer is None and labels:
        labels[-1] = False  # an unfinished solution is wrong at its last step
    earliest = labelled_steps(steps, labels)
    correct = answer is not None and answer == problem.answer
    return StepCheck(steps, labels, earliest, answer, correct)


# What went wrong at a solution's earliest wrong step (:func:`error_kind`).
ERROR_KINDS = (
    "carry",  # the arithmetic off by 10, 100, ...: a carry or borrow dropped or added
    "sign",  # the arithmetic right but for its sign
    "slip",  # any other arithmetic error
    "copy",  # a step starts from a value other than the previous step's result
    "operand",  # the problem's next number misread
    "operation",  # another operation than the problem's next
    "skip",  # an operation of the problem left out (the step does a later one)
    "form",  # a line that is neither a step nor an answer
    "early",  # the answer given before every operation was done, or no answer line
    "answer",  # the answer line does not repeat the last result
)


def error_kind(problem: Problem, check: StepCheck) -> str | None:
    """The kind of error (:data:`ERROR_KINDS`) at the earliest wrong step of a solution, from its
    :func:`check_solution`; None when it has none. A bare answer counts as ``early``."""
    k = check.earliest_error
    if k == -1:
        return None
    steps, ops = check.steps, problem.ops
    if k >= len(steps):
        return "early"
    line = steps[k]
    if ANSWER_RE.match(line) is not None:
        return "early" if k < len(ops) else "answer"
    if (m := STEP_RE.match(line)) is None or k >= len(ops):
        return "form"
    a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    if (op, b) != ops[k]:
        if (op, b) in ops[k + 1 :]:
            return "skip"
        return "operation" if op != ops[k][0] else "operand"
    if a != ([problem.start, *problem.running_values()])[k]:
        return "copy"
    true = OPS[op](a, b)
    if c == true:
        return "early"  # every step right to here, the answer line missing
    if c == -true:
        return "sign"
    off = str(abs(c - true))
    return "carry" if len(off) > 1 and off.rstrip("0") == "1" else "slip"


_PROMPT_RE = re.compile(rf"^Q:({_NUM})((?:[+\-*]{_NUM})+)$")
_OP_RE = re.compile(rf"([+\-*])({_NUM})")


def parse_problem(text: str) -> Problem:
    """Inverse of ``Problem.prompt`` (accepts it with or without the ``Q:`` framing); raises ``ValueError``
    for other text or more than ``MAX_OPS`` operations."""
    t = text.strip()
    if not t.startswith("Q:"):
        t = "Q:" + t
    m = _PROMPT_RE.match(t)
    if m is None:
        raise ValueError(f"not an embedded arithmetic problem: {text[:80]!r}")
    ops = tuple((op, int(b)) for op, b in _OP_RE.findall(m.group(2)))
    if len(ops) > MAX_OPS:
        raise ValueError(f"an embedded arithmetic problem has at most {MAX_OPS} operations, not {len(ops)}")
    return Problem(int(m.group(1)), ops)


def score_for(problem: Problem, earliest_error: int) -> float:
    """DeepSeekMath-V2's {0, 0.5, 1} label from the step named: 1 no wrong step; 0.5 every operation
    step right, the first error at the answer line or after it (a minor flaw); 0 an operation step is
    wrong."""
    if earliest_error == -1:
        return 1.0
    return 0.5 if earliest_error >= len(problem.ops) else 0.0


@dataclass
class EmbeddedTask:
    """The embedded world as a task: ``Q:5-7-6`` prompts for the tiny character model."""

    spec: TaskSpec
    name: str = "embedded"
    exact_step_labels: bool = True

    def heldout(self, n: int, seed: int) -> list[Problem]:
        return heldout_split(self.spec, n, seed)

    def train_problems(self, n: int, *, seed: int, tag: str, exclude: set) -> list[Problem]:
        return train_problems(self.spec, n, seed=seed, tag=tag, exclude=exclude)

    def check(self, problem: Problem, solution: str) -> StepCheck:
        return check_solution(problem, solution)

    def problem_from_text(self, text: str, answer: str | None, id: str) -> Problem:
        """``5-7-6`` or ``Q:5-7-6``: the answer follows from the problem (a given one is not read)."""
        return parse_problem(text)

    def true_score(self, problem: Problem, check: StepCheck) -> float:
        return score_for(problem, check.earliest_error)

    def demonstration(self, problem: Problem, direct: bool) -> str:
        return problem.direct_solution() if direct else problem.reference_solution()

    def expected_steps(self, problem: Problem, n: int) -> list[str]:
        return (problem.reference_solution().splitlines() + ["."] * n)[:n]

    def error_kind(self, problem: Problem, check: StepCheck) -> str | None:
        return error_kind(problem, check)

    def synthetic_solution(
        self,
        problem: Problem,
        rng: random.Random,
        correct_fraction: float,
        weights: Mapping[str, float] | None = None,
    ) -> tuple[str, list[str]]:
        return synthetic_solution(problem, rng, correct_fraction, weights)

    def split_steps(self, solution: str) -> list[str]:
        return split_steps(solution)
