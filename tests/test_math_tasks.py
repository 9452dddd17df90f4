"""GSM8K and MATH behind the task seam, on the shipped samples (selfverify.data) and test fixtures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from selfverify.tasks.base import Task
from selfverify.tasks.mathdata import (
    MATH_CORRUPTIONS,
    MathDatasetTask,
    MathProblem,
    data_path,
    user_message,
)
from selfverify.tasks.realmath import load_math_dataset
from selfverify.utils.io import RecordError

FIXTURES = Path(__file__).parent / "fixtures"
MATH_FORMAT = FIXTURES / "math_format_sample.jsonl"
# Reference solutions of the GSM8K sample with a claim that is false as written (row ids), e.g. row 167
# "So it cost 192*100=$1920" and row 224 "4080 + 4080 / 2 = 4000 + 2040".
GSM8K_FLAGGED = {"gsm8k-train-167", "gsm8k-train-168", "gsm8k-train-198", "gsm8k-train-224"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("datasets-cache")


@pytest.fixture(scope="module")
def gsm8k(cache: Path) -> MathDatasetTask:
    return MathDatasetTask("gsm8k", data_path("gsm8k_sample.jsonl"), cache_dir=cache)


@pytest.fixture(scope="module")
def math_task(cache: Path) -> MathDatasetTask:
    """MATH-format problems for training, the shipped real MATH records held out."""
    return MathDatasetTask(
        "math", MATH_FORMAT, heldout_source=data_path("math_sample.jsonl"), cache_dir=cache
    )


def all_problems(task: MathDatasetTask, n_heldout: int, n_train: int) -> list[MathProblem]:
    return task.heldout(n_heldout, seed=0) + task.train_problems(n_train, seed=0, tag="all", exclude=set())


def test_shipped_gsm8k_sample_loads(cache: Path) -> None:
    ds = load_math_dataset(data_path("gsm8k_sample.jsonl"), "gsm8k", cache_dir=cache)
    assert len(ds) == 300
    first = ds[0]
    assert first["problem"].startswith("Natalia sold clips") and first["answer"] == "72"
    assert "<<48/2=24>>" in first["solution"]
    assert data_path("README.md").read_text().count("MIT") >= 2
    with pytest.raises(FileNotFoundError, match="gsm8k_sample.jsonl"):
        data_path("no-such-file.jsonl")


def test_is_a_task_and_prompts_through_the_prompter(cache: Path) -> None:
    task = MathDatasetTask("gsm8k", data_path("gsm8k_sample.jsonl"), prompter=lambda m: f"<user>{m}<end>")
    assert isinstance(task, Task) and task.name == "gsm8k" and not task.exact_step_labels
    (p,) = task.heldout(1, seed=0)
    assert p.prompt == f"<user>{user_message(p.question, 'gsm8k')}<end>" and p.text == p.question
    assert "one step per line" in p.prompt and '"Answer: <number>"' in p.prompt
    # The prompt is not part of a problem's identity: held-out exclusion holds across templates.
    assert p == MathProblem(p.id, p.question, p.answer, p.reference, prompt="other")
    with pytest.raises(ValueError, match="unknown kind"):
        MathDatasetTask("aime", MATH_FORMAT)  # type: ignore[arg-type]


def test_heldout_slice_is_fixed_and_disjoint_from_training(gsm8k: MathDatasetTask) -> None:
    held = gsm8k.heldout(30, seed=0)
    assert set(gsm8k.heldout(30, seed=1)) == set(held)  # the same slice, ordered by seed
    train = gsm8k.train_problems(270, seed=0, tag="all", exclude=set())
    assert len(set(held)) == 30 and len(set(train)) == 270 and not set(held) & set(train)
    with pytest.raises(ValueError, match="31 held-out problems asked for, 30"):
        gsm8k.heldout(31, seed=0)


def test_heldout_source_is_held_out(math_task: MathDatasetTask) -> None:
    held = math_task.heldout(2, seed=0)
    assert {p.id for p in held} == {"test/precalculus/1303.json", "math-test-1"}
    assert len(math_task.train_problems(6, seed=0, tag="all", exclude=set())) == 6


def test_train_draws_are_keyed_by_seed_and_tag(gsm8k: MathDatasetTask) -> None:
    draw = gsm8k.train_problems(20, seed=3, tag="rl-1", exclude=set())
    assert draw == gsm8k.train_problems(20, seed=3, tag="rl-1", exclude=set())
    assert draw != gsm8k.train_problems(20, seed=3, tag="rl-2", exclude=set())
    assert draw != gsm8k.train_problems(20, seed=4, tag="rl-1", exclude=set())
    excluded = set(draw)
    rest = gsm8k.train_problems(250, seed=3, tag="rl-1", exclude=excluded)
    assert not excluded & set(rest)
    with pytest.raises(ValueError, match="251 training problems asked for, 250 remain"):
        gsm8k.train_problems(251, seed=3, tag="rl-1", exclude=excluded)


def test_gsm8k_demonstrations_check_as_correct(gsm8k: MathDatasetTask) -> None:
    flagged = set()
    for p in all_problems(gsm8k, 30, 270):
        demo = gsm8k.demonstration(p, direct=False)
        assert "<<" not in demo and "####" not in demo and demo.splitlines()[-1] == f"Answer: {p.answer}"
        check = gsm8k.check(p, demo)
        assert check.correct and check.answer == p.answer
        if check.earliest_error != -1:
            flagged.add(p.id)
            assert gsm8k.true_score(p, check) == 0.0  # a working step is wrong, not the answer
    # 296 of the 300 reference solutions pass the rule; these 4 state a false claim.
    assert flagged == GSM8K_FLAGGED


def natalia(task: MathDatasetTask) -> MathProblem:
    """The sample's first record: two steps, each with a checked result."""
    return next(p for p in all_problems(task, 30, 270) if p.id == "gsm8k-train-0")


def test_gsm8k_demonstration_format(gsm8k: MathDatasetTask) -> None:
    p = natalia(gsm8k)
    assert gsm8k.demonstration(p, direct=False) == (
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n"
        "Answer: 72"
    )
    assert gsm8k.demonstration(p, direct=True) == "Answer: 72"
    assert gsm8k.expected_steps(p, 5) == [*gsm8k.demonstration(p, False).splitlines(), ".", "."]
    assert gsm8k.expected_steps(p, 2) == gsm8k.demonstration(p, False).splitlines()[:2]
    assert gsm8k.expected_steps(gsm8k.problem("x", "q", "1", ""), 3) is None


def assert_caught(task: MathDatasetTask, p: MathProblem, kind: str, steps: list[str]) -> None:
    """The injected error is the earliest wrong step: the changed step for ``offset`` (the answer is
    still right), the last step for the answer kinds (scored 0.5, the working being right)."""
    check = task.check(p, "\n".join(steps))
    demo = task.demonstration(p, direct=False).splitlines()
    if kind == "offset":
        changed = next(i for i, (a, b) in enumerate(zip(demo, steps, strict=True)) if a != b)
        assert (check.earliest_error, check.correct, task.true_score(p, check)) == (changed, True, 0.0)
        assert check.step_correct == [i < changed for i in range(len(steps))]
    else:
        assert (check.earliest_error, check.correct) == (len(steps) - 1, False)
        assert task.true_score(p, check) == 0.5
        assert (check.answer is None) == (kind == "no_answer")


@pytest.mark.parametrize("kind", MATH_CORRUPTIONS)
def test_synthetic_errors_are_caught_at_their_step(gsm8k: MathDatasetTask, kind: str) -> None:
    rng = random.Random(kind)
    kinds = []
    for p in all_problems(gsm8k, 30, 270):
        if p.id in GSM8K_FLAGGED:
            continue
        drawn, steps = gsm8k.synthetic_solution(p, rng, correct_fraction=0.0, weights={kind: 1.0})
        assert_caught(gsm8k, p, drawn, steps)
        kinds.append(drawn)
    # offset falls back to final where no step states a result the rule checks.
    assert set(kinds) == ({kind} if kind != "offset" else {"offset", "final"})
    assert kinds.count(kind) > 250


def test_synthetic_solution_weights_and_correct_fraction(gsm8k: MathDatasetTask) -> None:
    p = natalia(gsm8k)
    rng = random.Random(0)
    assert gsm8k.synthetic_solution(p, rng, 1.0) == ("none", gsm8k.demonstration(p, False).splitlines())
    # Kinds of other tasks (the embedded world's operand/skip) are ignored.
    drawn = {gsm8k.synthetic_solution(p, rng, 0.0, {"operand": 5.0, "no_answer": 1.0})[0] for _ in range(20)}
    assert drawn == {"no_answer"}
    unknown_only = {gsm8k.synthetic_solution(p, rng, 0.0, {"skip": 1.0})[0] for _ in range(60)}
    assert unknown_only == set(MATH_CORRUPTIONS)  # none known: every kind alike


@pytest.mark.parametrize(
    ("solution", "labels", "answer", "correct", "score"),
    [
        ("6 * 3 = 18 apples.\nAnswer: 18", [1, 1], "18", True, 1.0),
        ("6 * 3 = 18 apples.\n#### 18", [1, 1], "18", True, 1.0),
        ("6 * 3 = 18 apples.\nThe answer is $18.", [1, 1], "18", True, 1.0),
        ("6 * 3 = 18 apples.\nAnswer: \\boxed{18}", [1, 1], "18", True, 1.0),
        ("6 * 3 = 18 apples.\nAnswer: 19", [1, 0], "19", False, 0.5),
        ("6 * 3 = 18 apples.", [0], None, False, 0.5),  # no answer line: the last number is no answer
        ("6 * 3 = 17 apples.\n17 + 1 = 18\nAnswer: 18", [0, 0, 0], "18", True, 0.0),
        ("6 * 3 = 18 apples.\nAnswer: 6 * 4 = 18", [1, 0], "18", True, 0.0),  # a false claim on it
        ("", [], None, False, 0.0),
    ],
)
def test_check_labels(
    gsm8k: MathDatasetTask, solution: str, labels: list[int], answer: str | None, correct: bool, score: float
) -> None:
    p = gsm8k.problem("apples", "Each of 6 bags holds 3 apples. How many apples?", "18", "")
    check = gsm8k.check(p, solution)
    assert check.step_correct == [bool(x) for x in labels]
    assert (check.answer, check.correct, gsm8k.true_score(p, check)) == (answer, correct, score)


def test_math_path(math_task: MathDatasetTask, cache: Path) -> None:
    rows = load_math_dataset(MATH_FORMAT, "math", cache_dir=cache)
    assert rows[0]["answer"] == "\\frac{3}{4}"  # from the last \boxed{} when there is no answer column
    problems = all_problems(math_task, 2, 6)
    for p in problems:
        demo = math_task.demonstration(p, direct=False)
        assert demo.count("\\boxed") == 1 and demo.splitlines()[-1] == f"Answer: \\boxed{{{p.answer}}}"
        check = math_task.check(p, demo)
        assert (check.earliest_error, check.correct) == (-1, True)
        for kind in MATH_CORRUPTIONS:
            assert_caught(math_task, p, *math_task.synthetic_solution(p, random.Random(1), 0.0, {kind: 1.0}))
    area = next(p for p in problems if p.answer == "54")
    # Display math spanning lines stays one step.
    display = "The area is the width times the length: \\[ 6 \\times 9 = 54."
    assert display in math_task.demonstration(area, False).splitlines()
    half = next(p for p in problems if p.answer == "\\frac{3}{4}")
    assert math_task.check(half, "1/2 + 1/4 = 3/4\nAnswer: 0.75").correct
    assert not math_task.check(half, "Answer: \\boxed{\\frac{3}{5}}").correct
    assert "LaTeX" in half.prompt


def test_processbench_seed(gsm8k: MathDatasetTask, capsys: pytest.CaptureFixture[str]) -> None:
    seed = gsm8k.processbench_seed(FIXTURES / "processbench_sample.jsonl")
    labels = {p.id: label for p, _, label in seed}
    assert labels == {
        "pb-ok": -1,
        "pb-arith": 1,
        "pb-latex": -1,
        "pb-first": 0,
        "pb-logic": 1,
        "pb-chain": 1,
        "pb-percent": -1,
    }
    err = capsys.readouterr().err
    for line_no in (6, 7, 8, 9, 10, 13, 15):
        assert f"processbench_sample.jsonl:{line_no}:" in err
    problem, steps, _ = seed[0]
    assert (problem.answer, problem.reference) == ("", "")
    assert problem.prompt == user_message(problem.question, "gsm8k")
    assert steps == [
        "Tom has 3 * 12 = 36 eggs.",
        "He uses 5, so 36 - 5 = 31 eggs are left.",
        "The answer is 31.",
    ]
    # The task now labels exactly these solutions by the file, even pb-logic's logic error, which the
    # rule (without a reference answer it checks arithmetic only) misses; an edited solution gets the rule.
    checks = {p.id: gsm8k.check(p, "\n".join(s)) for p, s, _ in seed}
    assert {k: c.earliest_error for k, c in checks.items()} == labels
    assert checks["pb-ok"].correct and not checks["pb-logic"].correct
    problem, steps, _ = next(item for item in seed if item[0].id == "pb-logic")
    assert gsm8k.check(problem, "\n".join([*steps, "So 1 + 1 = 2."])).earliest_error == -1
    with pytest.raises(RecordError) as info:
        gsm8k.processbench_seed(FIXTURES / "processbench_sample.jsonl", on_error="fail")
    assert info.value.line_no == 6


def test_processbench_seed_reads_a_json_array(gsm8k: MathDatasetTask, tmp_path: Path) -> None:
    path = tmp_path / "seed.json"
    records = [{"id": 7, "problem": "1 + 1?", "steps": ["1 + 1 = 2", "Answer: 2"], "label": -1}]
    path.write_text(json.dumps(records, indent=1))
    ((problem, steps, label),) = gsm8k.processbench_seed(path)
    assert (problem.id, steps, label) == ("7", ["1 + 1 = 2", "Answer: 2"], -1)
