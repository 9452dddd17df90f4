"""Natural-language arithmetic (exact step labels through the embedded checker) and the prose judge
format (DeepSeekMath-V2 style): references parse back to the truth, misjudgments are told apart,
malformed analyses are refused, and no text makes a parser raise."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfverify.judges.prose_judge import ProseFormat, parse_analysis, parse_meta
from selfverify.tasks import TaskSpec, check_solution
from selfverify.tasks.arithmetic import CORRUPTIONS
from selfverify.tasks.worded import WordedArithmeticTask, embedded_line, worded_line

TASK = WordedArithmeticTask(TaskSpec(min_ops=2, max_ops=4, max_operand=9, ops="+-*"))
FMT = ProseFormat(TASK)
PROBLEMS = TASK.heldout(40, seed=0)


def test_prompts_go_through_the_prompter() -> None:
    task = WordedArithmeticTask(TASK.spec, prompter=lambda text: f"<user>{text}<assistant>")
    p = task.heldout(1, seed=0)[0]
    assert p.prompt == f"<user>{p.text}<assistant>" and p.text.startswith("Compute ")
    assert p in set(TASK.heldout(1, seed=0))  # the prompt is not part of the problem's identity


def test_a_demonstration_is_right_and_a_direct_answer_is_wrong_at_step_0() -> None:
    for p in PROBLEMS:
        worked = TASK.check(p, TASK.demonstration(p, direct=False))
        assert worked.earliest_error == -1 and worked.correct and TASK.true_score(p, worked) == 1.0
        assert all(" = " in s for s in worked.steps[:-1]) and worked.steps[-1].startswith("Answer: ")
        direct = TASK.check(p, TASK.demonstration(p, direct=True))
        assert direct.earliest_error == 0 and direct.correct


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_worded_labels_equal_the_embedded_labels(kind: str) -> None:
    rng = random.Random(kind)
    for p in PROBLEMS:
        _, steps = TASK.synthetic_solution(p, rng, 0.0, {kind: 1.0})
        worded = TASK.check(p, "\n".join(steps))
        embedded = check_solution(p.problem, "\n".join(embedded_line(s) for s in steps))
        assert (worded.step_correct, worded.earliest_error, worded.correct) == (
            embedded.step_correct,
            embedded.earliest_error,
            embedded.correct,
        )
        assert worded.earliest_error >= 0  # every kind injects an error the checker finds


def test_worded_lines_are_read_leniently_only_in_spacing_case_and_minus_signs() -> None:
    assert embedded_line(worded_line("-2-6=-8")) == "-2-6=-8"
    assert embedded_line("  ANSWER :  \u22125 ") == "A:-5"
    assert embedded_line("Step 1: 5 - 7 = -2") != "5-7=-2"  # other words are not read through


@pytest.mark.parametrize("kind", ("none", *CORRUPTIONS))
def test_reference_analyses_parse_back_to_the_truth(kind: str) -> None:
    rng = random.Random(kind)
    for p in PROBLEMS:
        weights = None if kind == "none" else {kind: 1.0}
        _, steps = TASK.synthetic_solution(p, rng, 1.0 if kind == "none" else 0.0, weights)
        check = TASK.check(p, "\n".join(steps))
        verdict = parse_analysis(FMT.reference_analysis(p, steps), len(steps))
        assert verdict.parsed
        assert verdict.earliest_error == check.earliest_error
        assert verdict.score == TASK.true_score(p, check)
        meta_text, label = FMT.meta_reference(p, steps, verdict.analysis)
        assert label == 1.0 and parse_meta(meta_text) == (1.0, True)


def test_unfaithful_analyses_are_well_formed_and_labelled_unfaithful() -> None:
    rng = random.Random(0)
    labels = []
    for p in PROBLEMS:
        _, steps = TASK.synthetic_solution(p, rng, 0.5)
        analysis = FMT.unfaithful_analysis(p, steps, rng)
        verdict = parse_analysis(analysis, len(steps))
        assert verdict.parsed, analysis
        label = FMT.meta_label(p, verdict, TASK.check(p, "\n".join(steps)))
        assert label < 1.0
        labels.append(label)
    assert {0.0, 0.5} <= set(labels)


def test_the_meta_prompt_shows_the_full_analysis() -> None:
    p = PROBLEMS[0]
    steps = TASK.demonstration(p, direct=False).splitlines()
    analysis = FMT.reference_analysis(p, steps)
    prompt = FMT.meta_prompt(p.text, steps, analysis)
    assert all(line in prompt for line in analysis.splitlines())


GOOD = "Step 1: 5 - 7 = -2. Correct.\nStep 2: -2 - 6 = -8, not -9. Wrong.\nFirst wrong step: 2\nScore: 0"


@pytest.mark.parametrize(
    "text",
    [
        GOOD.replace("Step 2:", "Step 3:"),  # numbering out of order
        GOOD.replace("First wrong step: 2", "First wrong step: 1"),  # contradicts its own marks
        GOOD.replace("First wrong step: 2", "First wrong step: none"),
        GOOD.replace("Score: 0", "Score: 2"),
        GOOD.rsplit("\n", 1)[0],  # no score
        GOOD.replace("Wrong.", "Correct."),  # judging stops before the end with no wrong step
        "",
    ],
)
def test_malformed_analyses_do_not_parse(text: str) -> None:
    assert not parse_analysis(text, 3).parsed
    assert parse_analysis(GOOD, 3).parsed


def test_meta_output_needs_its_own_check() -> None:
    assert parse_meta(f"{GOOD}\nMeta score: 0.5") == (0.5, True)
    assert parse_meta("Meta score: 1") == (0.0, False)
    assert parse_meta(f"{GOOD}\nMeta score: yes") == (0.0, False)


@given(st.text(max_size=400), st.integers(min_value=0, max_value=12))
def test_no_text_makes_the_parsers_raise(text: str, n_steps: int) -> None:
    verdict = parse_analysis(text, n_steps)
    assert len(verdict.step_scores) == n_steps and verdict.score in (0.0, 0.5, 1.0)
    score, parsed = parse_meta(text)
    assert score in (0.0, 0.5, 1.0) and (parsed or score == 0.0)
