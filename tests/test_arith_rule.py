"""The rule-based arithmetic verifier: safe evaluation, claim finding, real GSM8K text, adversarial input."""

from __future__ import annotations

import json
import re
import time
from fractions import Fraction
from pathlib import Path

import pytest

from selfverify.judges.arith_rule import (
    ArithmeticRuleVerifier,
    Uncheckable,
    evaluate,
    final_answer,
    find_claims,
)
from selfverify.judges.base import VerifyInput
from selfverify.tasks.realmath import extract_answer, split_steps

FIXTURES = Path(__file__).parent / "fixtures"
GSM8K = [json.loads(line) for line in (FIXTURES / "gsm8k_sample.jsonl").read_text().splitlines()]


def statuses(text: str) -> list[str]:
    return [c.status for c in find_claims(text)]


# --- safe evaluation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("48/2", 24),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("2^3^2", 512),  # right-associative
        ("2**10", 1024),
        ("-2^2", -4),
        ("2^-2", Fraction(1, 4)),
        ("-3 + 5", 2),
        ("1,200 + 300", 1500),
        ("25%", Fraction(1, 4)),
        ("0.1 + 0.2", Fraction(3, 10)),
        (".5 * 4", 2),
        ("2(3+4)", 14),
        ("3 × 4 ÷ 6", 2),
        ("12 − 5", 7),
        (r"\frac{1}{2} \cdot 48", 24),
        (r"\dfrac{\frac{1}{2}}{2^{2}}", Fraction(1, 8)),
        ("１２ + ３", 15),
    ],
)
def test_evaluate_exact(expr: str, value: Fraction | int) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    "expr",
    [
        "9^9^9^9",
        "10**10**10",
        "2^100000",
        "4^0.5",
        "x + 1",
        "2x",
        "(" * 200 + "1" + ")" * 200,
        "1" * 100,
        "",
        "3 +",
    ],
)
def test_evaluate_refuses_quickly(expr: str) -> None:
    start = time.perf_counter()
    with pytest.raises(Uncheckable):
        evaluate(expr)
    assert time.perf_counter() - start < 0.1


def test_evaluate_never_runs_code() -> None:
    with pytest.raises(Uncheckable):
        evaluate("__import__('os').system('echo pwned')")
    assert statuses("__import__('os').system('x') = 0") == ["unchecked"]


def test_division_by_zero_is_an_error_not_a_crash() -> None:
    with pytest.raises(ZeroDivisionError):
        evaluate("5/0")
    assert [(c.status, c.detail) for c in find_claims("so 5/0 = 0")] == [("wrong", "division by zero")]


# --- claims in text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.", ["right"]),
        ("Natalia sold 48/2 = <<48/2=25>>25 clips in May.", ["wrong"]),
        ("She earned 0.2 x 50 = $<<0.2*50=10>>10.", ["right"]),
        ("3 × 4 = 12 and 3 * 4 = 13", ["right", "wrong"]),
        ("a total of 12 + 4 = 16 stars", ["right"]),
        ("$12 + 5 = 17$", ["right"]),
        (r"$\frac{1}{2} \times 48 = 24$ and $3 \cdot 4 \div 2 = 6$", ["right", "right"]),
        ("48/2 = 24 = 25", ["right", "wrong"]),
        ("1,200 + 300 = 1,500", ["right"]),
        ("25% * 80 = 20", ["right"]),
        ("100 - 20 = 80%", ["right"]),  # % as a label also passes
        ("He paid $5 + $3 = $8.", ["right"]),
        ("so, -3 + 5 = 2", ["right"]),
        ("(so 3 + 4 = 7)", ["right"]),
        ("3² = 9", ["right"]),
        ("1½ + ½ = 2", ["right"]),
        ("18 items + 6 items = 25 items", ["wrong"]),
        ("25 floors x 4 apartments/floor = 100 apartments", ["right"]),
        ("7 minutes x 60 = 420 seconds + 23 = 443 seconds", ["right", "right"]),  # running total
        ("25 / 1/3 = 75", ["right"]),  # spaced "/" around a tight fraction
        ("500/ 1/10 = 50", ["right"]),  # or left to right: both readings pass
    ],
)
def test_claims_found_and_judged(text: str, expected: list[str]) -> None:
    assert statuses(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "x = 5",
        "2x + 3 = 7",
        "the cost - 5 = 10",
        "half of 48 = 24",
        "25% of 80 = 20",
        "1 hour = 60 minutes",
        "4.5 gallons = 4.5 * 8 pints",
        "5! = 120",
        r"\sqrt{9} + 1 = 4",
        "3 + 4 = 1.5 million",
        "17/3 = 5 and 2/3",
        "12 x 1 and 1/4 = 15",
        "6:00+48 = 6:48",
        "0900-0130 = 0730",
        "4 pounds - 6 ounces = 58 ounces",
    ],
)
def test_not_fully_numeric_claims_are_unchecked(text: str) -> None:
    assert statuses(text) and set(statuses(text)) == {"unchecked"}


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("2/3 = 0.67", "right"),  # rounded
        ("2/3 = 0.66", "right"),  # truncated
        ("2/3 = 0.65", "wrong"),
        ("1/4 = 0.3", "right"),  # 0.25 rounded half up
        ("1/2 = 0.6", "wrong"),  # exact value has no more decimals than claimed: must match
        ("100/3 = 33", "right"),  # whole items: rounded down
        ("100/3 = 34", "wrong"),  # neither nearest nor truncated
        ("200/3 = 67", "right"),  # nearest
        ("-2/3 = -0.6", "right"),  # truncated toward zero
        ("100/3 = 32", "wrong"),
        ("10/4 = 2.5", "right"),
        ("1/3 = 33.33%", "right"),
    ],
)
def test_rounding_rule(text: str, status: str) -> None:
    assert statuses(text) == [status]


def test_wrong_claims_say_what_the_values_are() -> None:
    assert [c.detail for c in find_claims("48/2 = 24 = 25")] == ["", "24 ≠ 25"]
    assert [c.detail for c in find_claims("so 10/4 = 2.4")] == ["10/4 = 2.5"]
    assert [c.detail for c in find_claims("so 10/3 = 3.4")] == ["10/3 = 10/3 ≈ 3.33333"]
    assert [c.detail for c in find_claims("(2 + 3) * 4 = 5 * 5")] == ["(2 + 3) * 4 = 20, 5 * 5 = 25"]


def test_odd_unicode_is_read_through() -> None:
    assert statuses("１２ × ３ = ３６") == ["right"]
    assert statuses("\u200f12 + 3 = 15\u200f") == ["right"]
    assert statuses("1\u200b2 + 3 = 15") == ["right"]
    assert statuses("🍎 3 + 4 = 8 🍏") == ["wrong"]
    assert statuses("٣ + ٤ = ٧") == ["right"]


# --- the verifier on real GSM8K text -------------------------------------------------------------

VERIFIER = ArithmeticRuleVerifier()


def test_gsm8k_reference_solutions_are_judged_correct() -> None:
    assert len(GSM8K) == 20
    verdicts = VERIFIER.verify_batch(
        [
            VerifyInput(r["question"], split_steps(r["answer"]), extract_answer(r["answer"], "gsm8k"))
            for r in GSM8K
        ]
    )
    for record, verdict in zip(GSM8K, verdicts, strict=True):
        assert verdict.step_scores == [1.0] * len(split_steps(record["answer"])), verdict.analysis
        assert (verdict.earliest_error, verdict.score, verdict.analysis) == (-1, 1.0, "")
        assert verdict.extra["answer_correct"] is True
    assert sum(v.extra["claims_checked"] for v in verdicts) >= 60


# A calculator annotation whose expression is purely numeric, and the number written after it.
ANNOTATED = re.compile(r"<<([\d(.][^=<>]*)=([\d.]+)>>([\d.,]+)")


def _corrupt(step: str) -> str | None:
    """Change the result of the first calculator claim of ``step``, in the annotation and the text."""
    m = ANNOTATED.search(step)
    if m is None:
        return None
    new = str(Fraction(m.group(2)) + 1) if "." not in m.group(2) else str(float(m.group(2)) + 1)
    return step[: m.start()] + f"<<{m.group(1)}={new}>>{new}" + step[m.end() :]


def test_corrupted_gsm8k_steps_are_caught_at_the_right_step() -> None:
    cases = 0
    for record in GSM8K:
        steps = split_steps(record["answer"])
        for k, step in enumerate(steps):
            corrupted = _corrupt(step)
            if corrupted is None:
                continue
            verdict = VERIFIER.verify(
                VerifyInput(record["question"], [*steps[:k], corrupted, *steps[k + 1 :]])
            )
            assert verdict.earliest_error == k, (corrupted, verdict.analysis)
            assert verdict.step_scores[k] == 0.0 and verdict.score == 0.0
            assert verdict.analysis.startswith(f"Step {k + 1}: ")
            cases += 1
    assert cases >= 60


def test_corruption_in_the_text_alone_is_caught() -> None:
    steps = [ANNOTATED.sub(r"\3", s) for s in split_steps(GSM8K[0]["answer"])]
    assert steps[0] == "Natalia sold 48/2 = 24 clips in May."
    steps[1] = steps[1].replace("= 72", "= 71")
    verdict = VERIFIER.verify(VerifyInput(GSM8K[0]["question"], steps, "72"))
    assert verdict.earliest_error == 1
    assert verdict.analysis == "Step 2: 48+24 = 71 is wrong (48+24 = 72)."
    assert verdict.score == 0.0


def test_overall_score_follows_the_final_answer() -> None:
    steps = ["Natalia sold 48/2 = 24 clips in May.", "48 + 24 = 72 in total.", "#### 72"]
    assert VERIFIER.verify(VerifyInput("p", steps, "72")).score == 1.0
    assert VERIFIER.verify(VerifyInput("p", steps, "$72$")).score == 1.0
    wrong = VERIFIER.verify(VerifyInput("p", steps, "73"))
    assert (wrong.score, wrong.earliest_error) == (0.0, -1)
    assert wrong.analysis == "Final answer 72 does not match the reference answer 73."
    assert VERIFIER.verify(VerifyInput("p", steps)).score == 1.0  # no reference: arithmetic only
    assert final_answer(["The answer is \\boxed{\\frac{3}{4}}.", "Done."]) == "\\frac{3}{4}"


def test_empty_solution() -> None:
    verdict = VERIFIER.verify(VerifyInput("p", []))
    assert (verdict.step_scores, verdict.earliest_error, verdict.score) == ([], -1, 1.0)
    assert VERIFIER.verify(VerifyInput("p", [], "5")).score == 0.0


# --- adversarial text ------------------------------------------------------------------------------

ADVERSARIAL = [
    "9^9^9^9 = 1",
    "10**10**10 = 5",
    r"$9^{9^{9^{9}}} = 3$",
    "(" * 100_000 + "1" + ")" * 100_000 + " = 1",
    "1+" * 500_000 + "1 = 3",
    "1 = 1 " * 200_000,
    "{" * 100_000 + " = 1",
    "{}" * 10_000 + "1 = 1",
    r"\frac{" * 5_000 + "1" + "}{2}" * 5_000 + " = 1",
    "<<1+1=2>>" * 50_000,
    "1" * 5_000 + " + 1 = 2",
    "\u202e\u200b\ufeff１２ × ３ = ３６ 🤯" * 1_000,
    "\ud800 3 + 4 = 7",
]


def test_adversarial_steps_are_bounded_in_time() -> None:
    start = time.perf_counter()
    verdicts = VERIFIER.verify_batch([VerifyInput("p", [text, text[:1000]], "7") for text in ADVERSARIAL])
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0
    assert all(len(v.step_scores) == 2 for v in verdicts)
    assert verdicts[0].extra["claims_unchecked"] >= 1 and verdicts[0].earliest_error == -1
    assert verdicts[4].extra.get("steps_truncated") == 1
