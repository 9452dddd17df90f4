"""The embedded world: problem generation, held-out split, and the ground-truth step checker."""

import random

import pytest

from selfverify.tasks import Problem, TaskSpec, check_solution, heldout_split, parse_problem, train_problems
from selfverify.tasks.arithmetic import (
    UNWEIGHTED_CORRUPTIONS,
    corrupt_solution,
    error_kind,
    sample_problem,
    slipped_solution,
    synthetic_solution,
)

P = Problem(12, (("+", 7), ("*", 3), ("-", 4)))


def test_left_to_right_reference():
    assert P.prompt == "Q:12+7*3-4\n"
    assert P.answer == 53  # ((12+7)*3)-4, not 12+21-4
    assert P.reference_solution() == "12+7=19\n19*3=57\n57-4=53\nA:53"


def test_reference_solutions_are_fully_correct():
    rng = random.Random(1)
    for _ in range(500):
        p = sample_problem(rng, TaskSpec(min_ops=1, max_ops=5, max_operand=50))
        check = check_solution(p, p.reference_solution())
        assert check.correct and check.earliest_error == -1 and all(check.step_correct)
        assert parse_problem(p.prompt) == p


def test_a_bounded_world_keeps_every_running_value_within_its_bound():
    rng, spec = random.Random(2), TaskSpec(min_ops=8, max_ops=12, ops="+-*", max_value=99)
    problems = [sample_problem(rng, spec) for _ in range(300)]
    for p in problems:
        values = [int(line.split("=")[1]) for line in p.reference_solution().splitlines()[:-1]]
        assert len(values) == len(p.ops) and max(map(abs, values)) <= 99
    # Every operation is still drawn: the bound narrows operands, it does not drop an operation.
    assert {op for p in problems for op, _ in p.ops} == {"+", "-", "*"}
    assert sample_problem(random.Random(2), TaskSpec(max_value=None)) == sample_problem(
        random.Random(2), TaskSpec()
    )


@pytest.mark.parametrize(
    ("solution", "labels", "earliest", "correct"),
    [
        ("12+7=19\n19*3=57\n57-4=53\nA:53", [1, 1, 1, 1], -1, True),
        ("12+7=18\n18*3=54\n54-4=50\nA:50", [0, 0, 0, 0], 0, False),  # arithmetic slip, carried forward
        ("12+7=19\n19*3=58\n58-4=54\nA:54", [1, 0, 0, 0], 1, False),
        ("12+7=19\n19+3=22\n22-4=18\nA:18", [1, 0, 0, 0], 1, False),  # wrong operator
        ("12+7=19\n20*3=60\n60-4=56\nA:56", [1, 0, 0, 0], 1, False),  # does not continue from 19
        ("12+7=19\n19*3=57\nA:57", [1, 1, 0], 2, False),  # skipped an operation
        ("12+7=19\n19*3=57\n57-4=53", [1, 1, 0], 2, False),  # no answer line: wrong at its last step
        ("12+7=19\n19*3=57\n57-4=53\nA:52", [1, 1, 1, 0], 3, False),
        ("12+7=19\n19*3=57\n57-4=53\nA:53\n53+1=54", [1, 1, 1, 1, 0], 4, True),  # text after the answer
        ("12+7=19\n19*3=58\n57-4=53\nA:53", [1, 0, 0, 0], 1, True),  # right answer, wrong step
        ("hello\nA:53", [0, 0], 0, True),
        ("", [], 0, False),
        ("12+7=19\n19*3=57\n57-4=53\nA:" + "9" * 40, [1, 1, 1, 0], 3, False),  # huge number: not parsed
    ],
)
def test_step_labels(solution, labels, earliest, correct):
    check = check_solution(P, solution)
    assert check.step_correct == [bool(x) for x in labels]
    assert check.earliest_error == earliest
    assert check.correct is correct


def test_heldout_is_fixed_distinct_and_never_trained_on():
    spec = TaskSpec()
    held = heldout_split(spec, 200, seed=0)
    assert held == heldout_split(spec, 200, seed=0)
    assert len(set(held)) == 200
    train = train_problems(spec, 2000, seed=0, tag="sft-0", exclude=set(held))
    assert not set(train) & set(held)
    assert train == train_problems(spec, 2000, seed=0, tag="sft-0", exclude=set(held))
    assert train != train_problems(spec, 2000, seed=0, tag="sft-1", exclude=set(held))


def test_synthetic_errors_drawn_by_weight():
    problems = train_problems(TaskSpec(), 300, seed=0, tag="test", exclude=set())
    rng = random.Random(0)
    weights = {"offset": 3.0, "operand": 3.0, "skip": 1.0, "no_answer": 1.0, "final": 1.0}
    kinds = [synthetic_solution(p, rng, 0.0, weights)[0] for p in problems]
    assert set(kinds) == set(weights)  # a kind left out ("operation") is never drawn
    assert 0.55 < (kinds.count("offset") + kinds.count("operand")) / len(kinds) < 0.78
    assert {synthetic_solution(p, rng, 0.0, {"offset": 1.0, "skip": 0.0})[0] for p in problems} == {"offset"}
    assert {synthetic_solution(p, rng, 0.0)[0] for p in problems} == set(UNWEIGHTED_CORRUPTIONS)
    for p in problems[:20]:
        kind, steps = synthetic_solution(p, rng, 0.5, weights)
        assert (check_solution(p, "\n".join(steps)).earliest_error == -1) == (kind == "none")


def test_an_operation_corruption_does_another_operation_at_its_step():
    """The error the generator makes and the judge, never shown one, missed (docs/results/hard.md)."""
    rng = random.Random(3)
    for p in train_problems(TaskSpec(ops="+-*"), 60, seed=0, tag="test", exclude=set()):
        steps = corrupt_solution(p, "operation", rng)
        check = check_solution(p, "\n".join(steps))
        k = check.earliest_error
        assert 0 <= k < len(p.ops) and steps[:k] == p.reference_solution().splitlines()[:k]
        op, b = steps[k].split("=")[0][-2], int(steps[k].split("=")[0][-1])  # one-digit operands
        assert op != p.ops[k][0] and b == p.ops[k][1]
        # Another operation that a later step of the problem does reads as that step, skipped to.
        assert error_kind(p, check) == ("skip" if (op, b) in p.ops[k + 1 :] else "operation")


def test_a_slip_is_wrong_at_its_step_and_carried_on():
    assert slipped_solution(P, 1, -2) == ["12+7=19", "19*3=55", "55-4=51", "A:51"]
    problems = train_problems(TaskSpec(), 200, seed=0, tag="test", exclude=set())
    rng = random.Random(0)
    for p in problems:
        steps, reference = corrupt_solution(p, "offset", rng), p.reference_solution().splitlines()
        k = check_solution(p, "\n".join(steps)).earliest_error
        assert 0 <= k < len(p.ops) and steps[:k] == reference[:k] and steps[k] != reference[k]


def test_difficulty_knobs():
    rng = random.Random(0)
    spec = TaskSpec(min_ops=4, max_ops=4, max_operand=5, ops="+")
    for _ in range(50):
        p = sample_problem(rng, spec)
        assert len(p.ops) == 4 and all(op == "+" and 1 <= b <= 5 for op, b in p.ops)


def test_parse_problem_rejects_other_text():
    with pytest.raises(ValueError, match="not an embedded"):
        parse_problem("Q:__import__('os')")


def test_embedded_rule_verifier_through_the_interface():
    from selfverify.judges import VerifyInput
    from selfverify.judges.registry import load_verifier

    verifier = load_verifier("embedded-rule")
    good, bad = verifier.verify_batch(
        [
            VerifyInput(P.text, P.reference_solution().splitlines()),
            VerifyInput(P.prompt, ["12+7=19", "19*3=58", "58-4=54", "A:54"]),
        ]
    )
    assert (good.earliest_error, good.score, good.step_scores) == (-1, 1.0, [1.0] * 4)
    assert (bad.earliest_error, bad.score, bad.step_scores) == (1, 0.0, [1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    ("solution", "kind"),
    [
        ("47+38=85\n85*3=255\n255-9=246\nA:246", None),
        ("47+38=75\n75*3=225\n225-9=216\nA:216", "carry"),
        ("47+38=85\n85*3=255\n255-9=-246\nA:-246", "sign"),
        ("47+38=86\n86*3=258\n258-9=249\nA:249", "slip"),
        ("47+38=85\n58*3=174\n174-9=165\nA:165", "copy"),
        ("47+38=85\n85*8=680\n680-9=671\nA:671", "operand"),
        ("47+38=85\n85+3=88\n88-9=79\nA:79", "operation"),
        ("47+38=85\n85-9=76\nA:76", "skip"),
        ("47+38=85\n85*3 is 255", "form"),
        ("47+38=85\nA:85", "early"),
        ("47+38=85\n85*3=255\n255-9=246", "early"),
        ("A:246", "early"),  # a bare answer, even a right one, is wrong at its first line
        ("47+38=85\n85*3=255\n255-9=246\nA:245", "answer"),
    ],
)
def test_error_kind_names_the_earliest_error(solution: str, kind: str | None) -> None:
    problem = Problem(47, (("+", 38), ("*", 3), ("-", 9)))
    assert error_kind(problem, check_solution(problem, solution)) == kind
