"""The generative verifier's text formats, parsers and labels (hand-computed), and its checkpoint."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from selfverify.config.schema import ModelSpec
from selfverify.judges.base import Verdict, VerifyInput
from selfverify.judges.compact_judge import (
    analysis_text,
    claimed_result,
    expected_lines,
    format_meta,
    meta_label,
    meta_prompt,
    meta_reference,
    parse_analysis,
    parse_meta,
    problem_prompt,
    reference_analysis,
    split_self_evaluation,
    true_score,
    unfaithful_analysis,
    verifier_prompt,
)
from selfverify.judges.generative import (
    GenerativeVerifier,
    MetaVerifier,
    ScaledLabel,
    scaled_verification_label,
    verdict_agreement,
)
from selfverify.judges.registry import load_verifier
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.workers import LMWorker
from selfverify.score import main as score_main
from selfverify.tasks import Problem, check_solution

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
# Q:5-7-6 evaluates to 5-7=-2, -2-6=-8.
PROBLEM = Problem(5, (("-", 7), ("-", 6)))
REFERENCE = ["5-7=-2", "-2-6=-8", "A:-8"]

# (steps, the faithful analysis, written out by hand)
CASES = {
    "correct": (REFERENCE, "5-7=-2 -2 +\n-2-6=-8 -8 +\nA:-8 -8 +\nS:1"),
    "slip_at_step_1": (["5-7=-2", "-2-6=-9", "A:-9"], "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0"),
    "slip_but_right_answer": (["5-7=-2", "-2-6=-9", "A:-8"], "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0"),
    "wrong_answer_line": (["5-7=-2", "-2-6=-8", "A:-9"], "5-7=-2 -2 +\n-2-6=-8 -8 +\nA:-8 -9 -\nS:0.5"),
    "direct_right_answer": (["A:-8"], "5-7=-2 -8 -\nS:0"),
    "direct_wrong_answer": (["A:-9"], "5-7=-2 -9 -\nS:0"),
    "missing_answer": (["5-7=-2", "-2-6=-8"], "5-7=-2 -2 +\n-2-6=-8 -8 -\nS:0"),
    "line_after_answer": (
        [*REFERENCE, "all done"],
        "5-7=-2 -2 +\n-2-6=-8 -8 +\nA:-8 -8 +\n. alldone -\nS:0.5",
    ),
    "empty": ([], "S:0"),
}


def verdict(score: float, analysis: str = "", parsed: bool = True) -> Verdict:
    return Verdict([], -1 if score == 1.0 else 0, score, analysis, parsed=parsed)


# --- prompts ---------------------------------------------------------------------------------------------


def test_verifier_prompt_exact() -> None:
    assert verifier_prompt("Q:5-7-6\n", ["5-7=-2", "-2-6=-9", "A:-9"]) == (
        "Q:5-7-6\n5-7=-2\n-2-6=-9\nA:-9\n#V\n"
    )
    # No trailing newline on the prompt, whitespace inside a step collapses to single spaces.
    assert verifier_prompt("Q:1+2", ["1+2\n=3 ", "  A:3"]) == "Q:1+2\n1+2 =3\nA:3\n#V\n"
    assert verifier_prompt("Q:1+2\n\n", []) == "Q:1+2\n#V\n"


def test_meta_prompt_exact() -> None:
    """The meta-verifier sees the analysis's verdict (named step, 1-based, 0 = none; score), not its lines."""
    analysis = "\n1+2=3 3 +\nA:3 3 +\nS:1\n\n"
    assert meta_prompt("Q:1+2\n", ["1+2=3", "A:3"], analysis) == "Q:1+2\n1+2=3\nA:3\n#M E:0 S:1\n"
    flagged = "1+2=3 3 +\nA:3 4 -\nS:0.5"
    assert meta_prompt("Q:1+2", ["1+2=3", "A:4"], flagged) == "Q:1+2\n1+2=3\nA:4\n#M E:2 S:0.5\n"
    assert meta_prompt("Q:1+2\n", ["1+2=3", "A:3"], "garbage") == "Q:1+2\n1+2=3\nA:3\n#M ?\n"
    assert meta_prompt("Q:1+2\n", [], "") == "Q:1+2\n#M ?\n"


def test_problem_prompt() -> None:
    assert problem_prompt("5-7-6") == "Q:5-7-6\n"
    assert problem_prompt("Q:5-7-6\n") == "Q:5-7-6\n"
    assert problem_prompt(" what is\n 1 +  2? ") == "Q:what is 1 + 2?\n"


# --- reference analyses and their parse ------------------------------------------------------------------


def test_expected_lines_pad_with_nothing() -> None:
    assert expected_lines(PROBLEM, 2) == ["5-7=-2", "-2-6=-8"]
    assert expected_lines(PROBLEM, 5) == [*REFERENCE, ".", "."]
    assert expected_lines(PROBLEM, 0) == []


@pytest.mark.parametrize("name", CASES)
def test_reference_analysis(name: str) -> None:
    steps, expected = CASES[name]
    assert reference_analysis(PROBLEM, steps) == expected


def test_true_scores_of_the_cases() -> None:
    scores = {
        name: true_score(PROBLEM, check_solution(PROBLEM, "\n".join(s))) for name, (s, _) in CASES.items()
    }
    assert scores == {
        "correct": 1.0,
        "slip_at_step_1": 0.0,
        "slip_but_right_answer": 0.0,  # an operation step is wrong, whatever the answer
        "wrong_answer_line": 0.5,  # every operation right, only the answer line wrong
        "direct_right_answer": 0.0,
        "direct_wrong_answer": 0.0,
        "missing_answer": 0.0,
        "line_after_answer": 0.5,
        "empty": 0.0,
    }


@pytest.mark.parametrize("name", CASES)
def test_parse_analysis_round_trips_the_reference(name: str) -> None:
    steps, _ = CASES[name]
    check = check_solution(PROBLEM, "\n".join(steps))
    text = reference_analysis(PROBLEM, steps)
    v = parse_analysis(text, len(check.steps))
    assert v.parsed and v.analysis == text
    assert v.earliest_error == check.earliest_error
    n, err = len(check.steps), check.earliest_error
    assert v.step_scores == [1.0 if err == -1 or i < err else 0.0 for i in range(n)]
    assert v.score == true_score(PROBLEM, check)
    assert meta_label(PROBLEM, v, check) == 1.0


def test_parse_analysis_hand_values() -> None:
    v = parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0", 3)
    assert (v.step_scores, v.earliest_error, v.score, v.parsed) == ([1.0, 0.0, 0.0], 1, 0.0, True)
    v = parse_analysis("5-7=-2 -2 +\n-2-6=-8 -8 +\nA:-8 -8 +\nS:1", 3)
    assert (v.step_scores, v.earliest_error, v.score) == ([1.0, 1.0, 1.0], -1, 1.0)
    v = parse_analysis("x y -\nS:0.5", 4)
    assert (v.step_scores, v.earliest_error, v.score) == ([0.0] * 4, 0, 0.5)
    # Surrounding whitespace and blank lines are tolerated.
    v = parse_analysis("\n  5-7=-2 -2 +  \n\n -2-6=-8 -9 - \nS:0 \n\n", 2)
    assert v.parsed and (v.step_scores, v.earliest_error) == ([1.0, 0.0], 1)
    v = parse_analysis("S:1", 0)  # no steps: judged wrong at step 0 (as the checker does)
    assert v.parsed and (v.step_scores, v.earliest_error, v.score) == ([], 0, 1.0)
    # A judged line without the claimed result does not parse.
    assert not parse_analysis("5-7=-2 +\n-2-6=-8 -\nS:0", 3).parsed


def test_claimed_result() -> None:
    assert [claimed_result(s) for s in ("5-7=-2", "A:-8", "all done", "1 + 2 = 3", "x=", "=" * 3)] == [
        "-2",
        "-8",
        "alldone",
        "3",
        "x=",
        "===",
    ]
    assert claimed_result("9" * 100) == "9" * 40


def test_analysis_text_claims_what_it_is_told() -> None:
    steps = ["5-7=-2", "-2-6=-9", "A:-9"]
    assert analysis_text(PROBLEM, REFERENCE, -1, 1.0) == CASES["correct"][1]
    assert analysis_text(PROBLEM, steps, 1, 0.5) == "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0.5"
    assert analysis_text(PROBLEM, [*steps, "x"], 3, 0.0) == "5-7=-2 -2 +\n-2-6=-8 -9 +\nA:-8 -9 +\n. x -\nS:0"
    assert analysis_text(PROBLEM, [], 0, 1.0) == "S:1"


@pytest.mark.parametrize("name", CASES)
def test_unfaithful_analysis_parses_and_misjudges(name: str) -> None:
    steps, _ = CASES[name]
    check = check_solution(PROBLEM, "\n".join(steps))
    rng, wrong_step, wrong_score = random.Random(0), False, False
    for _ in range(30):
        v = parse_analysis(unfaithful_analysis(PROBLEM, steps, rng), len(check.steps))
        assert v.parsed and meta_label(PROBLEM, v, check) < 1.0
        wrong_step |= v.earliest_error != check.earliest_error
        wrong_score |= v.score != true_score(PROBLEM, check)
    assert wrong_score and wrong_step == bool(steps)  # no steps: only the score can be wrong


MALFORMED = {
    "empty": ("", 2),
    "blank": (" \n\n ", 2),
    "missing_score": ("5-7=-2 -2 +\n-2-6=-8 -9 -", 3),
    "score_not_on_scale": ("5-7=-2 -8 -\nS:0.7", 3),
    "score_padded": ("5-7=-2 -8 -\nS:01", 3),
    "score_as_float": ("5-7=-2 -2 +\n-2-6=-8 -8 +\nA:-8 -8 +\nS:1.0", 3),
    "score_not_last": ("S:0\n5-7=-2 -8 -", 3),
    "mark_without_sign": ("5-7=-2 -2\nS:0", 1),
    "mark_without_claim": ("5-7=-2 +\nS:1", 1),
    "mark_with_two_spaces": ("5-7=-2 -2  +\nS:1", 1),
    "mark_with_inner_space": ("5-7 =-2 -2 +\nS:1", 1),
    "two_minus": ("5-7=-2 -3 -\n-2-6=-8 -9 -\nS:0", 3),
    "plus_after_minus": ("5-7=-2 -3 -\n-2-6=-8 -8 +\nS:0", 3),
    "too_few_marks": ("5-7=-2 -2 +\nS:1", 3),
    "no_marks_for_steps": ("S:1", 2),
    "more_marks_than_steps": ("a a +\nb b +\nS:1", 1),
    "minus_beyond_the_steps": ("a a +\nb c -\nS:0", 1),
    "overlong_expected_line": ("x" * 41 + " x +\nS:1", 1),
    "overlong_claim": ("x " + "x" * 41 + " +\nS:1", 1),
    "garbage": ("U?%_JOK?sH\n'N~gnZ)", 2),
    "unicode": ("∀x. x x +\nS：1", 1),
    "unicode_score": ("5-7=-2 -2 +\nＳ:1", 1),
    "huge_single_line": ("x" * 200_000, 3),
    "huge_many_marks": ("1 1 +\n" * 50_000 + "S:1", 3),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_parse_analysis_rejects_malformed_text(name: str) -> None:
    text, n = MALFORMED[name]
    v = parse_analysis(text, n)
    assert not v.parsed
    assert (v.step_scores, v.earliest_error, v.score, v.analysis) == ([0.0] * n, 0, 0.0, text)


# --- the meta-verifier ---------------------------------------------------------------------------------


def test_meta_label() -> None:
    check = check_solution(PROBLEM, "5-7=-2\n-2-6=-9\nA:-9")  # wrong at step 1, score 0
    assert meta_label(PROBLEM, parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0", 3), check) == 1.0
    assert (
        meta_label(PROBLEM, parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0.5", 3), check) == 0.5
    )  # step right
    assert meta_label(PROBLEM, parse_analysis("5-7=-2 -2 -\nS:0", 3), check) == 0.5  # score right
    assert meta_label(PROBLEM, parse_analysis("5-7=-2 -2 -\nS:1", 3), check) == 0.0
    assert meta_label(PROBLEM, parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 +\nA:-8 -9 +\nS:1", 3), check) == 0.0
    assert meta_label(PROBLEM, parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -", 3), check) == 0.0  # unparsed
    correct = check_solution(PROBLEM, "\n".join(REFERENCE))
    unparsed_but_right = Verdict([1.0] * 3, -1, 1.0, "", parsed=False)
    assert meta_label(PROBLEM, unparsed_but_right, correct) == 0.0


def test_verdict_agreement_scores_as_the_meta_label_does() -> None:
    own = parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0", 3)  # wrong at step 1, score 0
    assert verdict_agreement(own, own) == 1.0
    assert verdict_agreement(own, parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0.5", 3)) == 0.5  # step
    assert verdict_agreement(own, parse_analysis("5-7=-2 -2 -\nS:0", 3)) == 0.5  # score
    assert verdict_agreement(own, parse_analysis("5-7=-2 -2 -\nS:1", 3)) == 0.0
    unparsed = parse_analysis("5-7=-2 -2 +\n-2-6=-8 -9 -", 3)  # no score line
    assert verdict_agreement(own, unparsed) == verdict_agreement(unparsed, own) == 0.0
    assert verdict_agreement(unparsed, parse_analysis("5-7=-2 -2 -\nS:0", 3)) == 0.0  # its step and score
    # Scored against the truth, an analysis agreeing with the faithful one gets its meta label.
    check = check_solution(PROBLEM, "5-7=-2\n-2-6=-9\nA:-9")
    faithful = parse_analysis(reference_analysis(PROBLEM, ["5-7=-2", "-2-6=-9", "A:-9"]), 3)
    for text in ("5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0.5", "5-7=-2 -2 -\nS:1", "S:1"):
        audited = parse_analysis(text, 3)
        assert verdict_agreement(faithful, audited) == meta_label(PROBLEM, audited, check)


def test_a_blind_meta_verifier_scores_an_analysis_by_its_own(tmp_path: Path) -> None:
    """Auditing blind, a real (tiny, overfitted) model writes its own analysis from the verifier's prompt,
    never shown the analysis it audits, and scores that analysis by agreement with its own."""
    tok = build_char_tokenizer()
    lm = LMWorker(build_model(SPEC, tok, 0), tok)
    steps = ["5-7=-2", "-2-6=-9", "A:-9"]
    faithful = reference_analysis(PROBLEM, steps)
    lm.start_sft(1e-2, warmup_steps=0, total_steps=150)
    for _ in range(150):  # it learns to write the faithful analysis of this one solution
        lm.sft_step([verifier_prompt("Q:5-7-6\n", steps)], [faithful])
    lm.end_training()
    blind = MetaVerifier(lm, max_new_tokens=40, blind=True)
    own = blind.analyse(["5-7-6"], [steps])[0]
    assert own.parsed and own.analysis.strip() == faithful
    audited = {
        "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0": 1.0,  # the faithful analysis
        "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0.5": 0.5,  # the step right, the score not
        "5-7=-2 -2 -\nS:0": 0.5,  # the score right, the step not
        "5-7=-2 -2 +\n-2-6=-8 -9 +\nA:-8 -9 +\nS:1": 0.0,  # passes the slip
        "not an analysis": 0.0,
    }
    judged = blind.meta_verify(["5-7-6"] * len(audited), [steps] * len(audited), list(audited))
    assert judged == [(score, True) for score in audited.values()]
    # Prompted, the same model is shown each analysis's verdict: another prompt, and it never learnt it.
    prompted = MetaVerifier(lm, max_new_tokens=40).meta_verify(["5-7-6"], [steps], [faithful])
    assert prompted != [(1.0, True)]


def test_parse_and_format_meta() -> None:
    own = "5-7=-2 -2 +\n-2-6=-8 -9 -\nS:0\n"
    assert parse_meta(own + "M:1") == (1.0, True)
    assert parse_meta("\n  " + own.replace("\n", " \n") + "M:0.5 \n") == (0.5, True)
    assert parse_meta("S:1\nM:0") == (0.0, True)  # an analysis of a solution with no steps
    for bad in (
        "",
        "  \n",
        "M:1",  # no own analysis
        own + "M:2",
        own + "M:0.7",
        own + "M: 1",
        own + "m:1",
        own + "M:1.0",
        own + "M:1\nanything after",
        "5-7=-2 -2 +\nM:1",  # no score line
        "x\nS:0\nM:1",
        own,
    ):
        assert parse_meta(bad) == (0.0, False), bad
    assert [format_meta(s) for s in (0.0, 0.5, 1.0)] == ["M:0", "M:0.5", "M:1"]
    for s in (0.0, 0.5, 1.0):
        assert parse_meta(own + format_meta(s)) == (s, True)


def test_meta_reference_is_own_check_then_label() -> None:
    steps = ["5-7=-2", "-2-6=-9", "A:-9"]
    faithful = reference_analysis(PROBLEM, steps)
    assert meta_reference(PROBLEM, steps, faithful) == (faithful + "\nM:1", 1.0)
    target, label = meta_reference(PROBLEM, steps, "5-7=-2 -2 +\n-2-6=-9 -9 +\nA:-9 -9 +\nS:1")
    assert (target, label) == (faithful + "\nM:0", 0.0)
    assert parse_meta(target) == (0.0, True)
    assert meta_reference(PROBLEM, steps, "not an analysis")[1] == 0.0


def test_split_self_evaluation() -> None:
    assert split_self_evaluation("5-7=-2\nA:-2\n#V\n5-7=-2 +\nS:1\n") == ("5-7=-2\nA:-2", "5-7=-2 +\nS:1")
    assert split_self_evaluation("  5-7=-2\nA:-2\n") == ("5-7=-2\nA:-2", None)
    assert split_self_evaluation("A:3#V") == ("A:3", "")
    assert split_self_evaluation("a#Vb#Vc") == ("a", "b#Vc")  # the first separator splits
    assert split_self_evaluation("") == ("", None)


# --- scaled verification ------------------------------------------------------------------------------


def test_scaled_label_all_clean_is_one() -> None:
    analyses = [verdict(1.0, "first"), verdict(1.0, "second")]
    assert scaled_verification_label(analyses, [[0.0, 0.0], [0.0]], k=2) == ScaledLabel(1.0, "first")


def test_scaled_label_confirmed_issues_agreeing_on_the_lowest_score() -> None:
    analyses = [verdict(0.0, "x"), verdict(0.0, "y"), verdict(0.5, "z"), verdict(1.0, "clean")]
    metas = [[1.0, 1.0, 0.0], [1.0, 0.5, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    assert scaled_verification_label(analyses, metas, k=2) == ScaledLabel(0.0, "x")
    assert scaled_verification_label(analyses, metas, k=3) == ScaledLabel(None, None)  # only 2 agree
    # One clean analysis does not outvote a confirmed issue.
    one = [verdict(1.0, "clean"), verdict(0.5, "issue")]
    assert scaled_verification_label(one, [[1.0], [1.0, 1.0]], k=1) == ScaledLabel(0.5, "issue")


def test_scaled_label_needs_a_strict_majority_of_confirmations() -> None:
    # [1, 0] is a tie and [1, 0.5, 0.5] a minority: neither issue is valid, the 0.5 ones are.
    analyses = [verdict(0.0, "tie"), verdict(0.0, "minority"), verdict(0.5, "a"), verdict(0.5, "b")]
    metas = [[1.0, 0.0], [1.0, 0.5, 0.5], [1.0, 1.0, 0.0], [1.0]]
    assert scaled_verification_label(analyses, metas, k=2) == ScaledLabel(0.5, "a")
    assert scaled_verification_label(analyses, metas, k=3) == ScaledLabel(None, None)
    # 0.5 confirms nothing: only a meta score of 1 counts.
    assert scaled_verification_label([verdict(0.0)], [[0.5, 0.5, 0.5]], k=1) == ScaledLabel(None, None)


def test_scaled_label_lowest_score_must_have_k_votes() -> None:
    # Two valid analyses agree on 0.5 but the lowest valid score is 0, held by one: discarded.
    analyses = [verdict(0.0, "low"), verdict(0.5, "a"), verdict(0.5, "b")]
    metas = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    assert scaled_verification_label(analyses, metas, k=2) == ScaledLabel(None, None)
    assert scaled_verification_label(analyses, metas, k=1) == ScaledLabel(0.0, "low")


def test_scaled_label_no_valid_issue_is_discarded() -> None:
    analyses = [verdict(0.0, "x"), verdict(0.5, "y"), verdict(1.0, "clean")]
    metas = [[0.0, 0.0, 1.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert scaled_verification_label(analyses, metas, k=1) == ScaledLabel(None, None)


def test_scaled_label_ignores_unparsed_analyses() -> None:
    unparsed = verdict(0.0, "garbage", parsed=False)
    # The unparsed issue, confirmed or not, is ignored: the parsed ones are clean.
    assert scaled_verification_label([unparsed, verdict(1.0, "ok")], [[1.0, 1.0], [0.0]], k=1) == (
        ScaledLabel(1.0, "ok")
    )
    # It does not count toward k either.
    both = [unparsed, verdict(0.0, "real")]
    assert scaled_verification_label(both, [[1.0, 1.0], [1.0, 1.0]], k=2) == ScaledLabel(None, None)
    assert scaled_verification_label(both, [[1.0, 1.0], [1.0, 1.0]], k=1) == ScaledLabel(0.0, "real")
    # Nothing parsed: discarded.
    assert scaled_verification_label([unparsed], [[1.0]], k=1) == ScaledLabel(None, None)
    assert scaled_verification_label([], [], k=1) == ScaledLabel(None, None)


def test_scaled_label_needs_one_meta_list_per_analysis() -> None:
    with pytest.raises(ValueError):
        scaled_verification_label([verdict(0.0), verdict(0.0)], [[1.0]], k=1)


# --- the model: save, load, verify, score CLI -----------------------------------------------------------

ITEMS = [
    VerifyInput("Q:5-7-6", ["5-7=-2", "-2-6=-9", "A:-9"]),
    VerifyInput("5-7-6", REFERENCE),
    VerifyInput("1+2", []),
    VerifyInput("1+2", ["A:3"]),
]


def tiny_verifier() -> GenerativeVerifier:
    tok = build_char_tokenizer()
    return GenerativeVerifier(LMWorker(build_model(SPEC, tok, 0), tok), max_new_tokens=10)


def test_verify_batch_returns_a_verdict_per_item() -> None:
    verdicts = tiny_verifier().verify_batch(ITEMS)
    assert len(verdicts) == len(ITEMS)
    for v, item in zip(verdicts, ITEMS, strict=True):
        assert isinstance(v, Verdict)
        assert len(v.step_scores) == len(item.steps)
        assert all(s in (0.0, 1.0) for s in v.step_scores) and v.score in (0.0, 0.5, 1.0)
        if not v.parsed:  # an untrained model writes garbage
            assert v.step_scores == [0.0] * len(item.steps) and v.score == 0.0


def test_save_and_load_verifier_round_trip(tmp_path: Path) -> None:
    verifier = tiny_verifier()
    out = tmp_path / "gen"
    verifier.save(out)
    manifest = json.loads((out / "verifier.json").read_text())
    assert manifest == {"kind": "generative", "max_new_tokens": 10, "format": "compact", "format_version": 4}
    for spec in (str(out), str(out / "verifier.json")):
        loaded = load_verifier(spec)
        assert isinstance(loaded, GenerativeVerifier) and loaded.max_new_tokens == 10
    state, original = loaded.lm.model.state_dict(), verifier.lm.model.state_dict()
    assert state.keys() == original.keys()
    assert all(bool((state[k] == original[k]).all()) for k in state)
    prompt = "Q:1+2\n#V\n"
    assert loaded.lm.tokenizer(prompt)["input_ids"] == verifier.lm.tokenizer(prompt)["input_ids"]
    assert loaded.verify_batch(ITEMS) == verifier.verify_batch(ITEMS)
    assert load_verifier(str(out), batch_size=3).batch_size == 3
    (out / "verifier.json").write_text(json.dumps(manifest | {"format_version": 3}))
    with pytest.raises(CheckpointError, match="analysis format 3"):  # its meta prompts would be misread
        load_verifier(str(out))


def test_score_cli_with_a_generative_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verifier = tiny_verifier()
    ckpt = tmp_path / "gen"
    verifier.save(ckpt)
    records = [
        {"id": "slip", "problem": "5-7-6", "steps": ["5-7=-2", "-2-6=-9", "A:-9"], "label": 1},
        {"id": "ok", "problem": "5-7-6", "steps": REFERENCE, "label": -1},
    ]
    src, out, metrics = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "metrics.json"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["--verifier", str(ckpt), "--input", str(src), "--output", str(out)]
    assert score_main([*argv, "--metrics-json", str(metrics)]) == 0
    assert "scored 2 records (0 skipped)" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    expected = verifier.verify_batch([VerifyInput(r["problem"], r["steps"]) for r in records])
    assert [row["id"] for row in rows] == ["slip", "ok"]
    for row, record, v in zip(rows, records, expected, strict=True):
        assert row["label"] == record["label"]
        assert len(row["step_scores"]) == len(record["steps"])
        assert (row["step_scores"], row["earliest_error"], row["score"]) == (
            v.step_scores,
            v.earliest_error,
            v.score,
        )
        assert row["analysis"] == v.analysis and row.get("parsed", True) == v.parsed
    summary = json.loads(metrics.read_text())
    assert summary["records"] == 2 and summary["n"] == 2 and summary["verifier"] == str(ckpt)


@pytest.mark.parametrize("name", [n for n, (steps, _) in CASES.items() if steps])
def test_unfaithful_analysis_agrees_with_its_own_marks(name: str) -> None:
    """A step it passes reads as given, the step it names reads otherwise: no surface tell."""
    steps, _ = CASES[name]
    given = ["".join(s.split()) for s in steps]
    rng = random.Random(1)
    for _ in range(30):
        for i, line in enumerate(unfaithful_analysis(PROBLEM, steps, rng).splitlines()[:-1]):
            expected, _claim, mark = line.split(" ")
            assert (expected == given[i]) == (mark == "+")
