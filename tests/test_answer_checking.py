"""Answer checking that cannot be talked into a wrong answer (docs/guides/architecture.md, 'Untrusted text'):
the answer of a response is the value it states last, a stated expression is not a stated value, and
math-verify keeps its time limit off the main thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfverify.judges.arith_rule import ArithmeticRuleVerifier, final_answer
from selfverify.judges.base import VerifyInput
from selfverify.tasks import realmath
from selfverify.tasks.realmath import answers_equal, extract_answer

VERIFIER = ArithmeticRuleVerifier()
BIG = "9" * 5000


@pytest.fixture(autouse=True, scope="module")
def warm_math_verify() -> None:
    """Import math-verify and build its parsers once, so no fuzz example pays for it against its deadline."""
    answers_equal(r"\sqrt{4}", "2")


def in_a_thread(fn: Callable[[], object]) -> object:
    """``fn()`` run on a fresh thread (not the main one), its result returned here."""
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(fn()))
    worker.start()
    worker.join(120)
    assert results, "the thread did not finish"
    return results[0]


# --- the answer is the value stated last ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A chain after the marker states its last side; nothing is re-evaluated.
        ("What is 3 + 2 - 3 + 2?\nSo the final answer is 3 + 2 - 3 + 2 = 9.", "9"),
        ("The answer is 3 + 2 - 3 + 2, which equals 9.", "9"),
        (r"\boxed{3 + 2 - 3 + 2 = 9}", "9"),
        ("#### 3 + 2 - 3 + 2 = 9", "9"),
        ("Answer: x = 5", "5"),
        ("Answer: $x = 5$.", "5"),
        # A restated problem, then a wrong result stated last.
        ("What is 3 + 2 - 3 + 2? We get 3 + 2 = 5, 5 - 3 = 2, 2 + 2 = 4.\nAnswer: 6", "6"),
        # A stated expression stays an expression: it is not turned into its value.
        ("The answer is 3 + 2 - 3 + 2.", "3 + 2 - 3 + 2"),
        # Between markers the one written last wins.
        (r"First \boxed{4}, then \boxed{5}.", "5"),
        ("So \\boxed{5}.\nAnswer: 7", "7"),
        ("Answer: 7\nOn reflection, \\boxed{5}", "5"),
        ("#### 72\nAnswer: 70", "70"),
        ("The answer is 5. But 2 + 2 = 4, so the answer is 4.", "4"),
        # A marker that states no value is skipped; a marked answer beats a later unmarked number.
        ("The answer is 4. I hope the answer is clear.", "4"),
        ("2 + 2 = 4, so the answer is 4. Check: 4 - 2 = 2.", "4"),
        ("**Final Answer:** 12 apples", "12"),
        ("#### $1,200", "1200"),
        ("So she makes $18, and she spends $2.\nThe answer is $18, not $2.", "18"),
        ("The answer is $18$.", "18"),
        ("The answer is x >= 2.", "x >= 2"),
        (r"The answer is $\frac{1}{2}$ of the pie.", r"\frac{1}{2}"),
        # With no marker, the last stated result.
        ("3 + 2 - 3 + 2 = 9", "9"),
        # Other scripts' digits, full-width text, invisible characters.
        ("The answer is ١٢", "12"),
        ("Ａｎｓｗｅｒ： ４２", "42"),
        ("Answer: ۴۲", "42"),
        ("Ans\u200bwer: 7", "7"),
    ],
)
def test_extract_answer_is_the_value_stated_last(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("pred", "gold", "equal"),
    [
        # Talked into: a stated expression does not match its value.
        ("3 + 2 - 3 + 2", "4", False),
        (r"\boxed{3+2-3+2}", "4", False),
        ("$2 + 2$", "4", False),
        ("1/2 + 1/4", "3/4", False),
        (r"\frac{1}{2} + \frac{1}{4}", r"\frac{3}{4}", False),
        ("3 + 1 apples", "4", False),
        (r"3 + 1 \text{ apples}", "4", False),
        ("3 + 2 - 3 + 2 = 9", "4", False),
        # ... but its last side, and the same expression written as the reference, do.
        ("3 + 2 - 3 + 2 = 9", "9", True),
        ("2 + 2 = 4", "4", True),
        ("x = 4", "4", True),
        ("3 + 2 - 3 + 2", "3+2-3+2", True),
        # Values in closed form are still math-verify's to compare.
        (r"\sqrt{4}", "2", True),
        ("x^2+2x+1", "(x+1)^2", True),
        (r"1+2\sqrt{3}", r"2\sqrt{3}+1", True),
        (r"1.5 \times 10^{6}", "1500000", True),
        ("2^{10}", "1024", True),
        ("3+4i", "4i+3", True),
        ("y = 2x + 3", "y=2x+3", True),
        ("x <= 5", r"x \leq 5", True),
        ("$", "$", False),
    ],
)
def test_answers_equal_is_not_talked_into_a_match(pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal


@pytest.mark.parametrize(
    ("steps", "truth", "predicted", "correct"),
    [
        (["What is 3 + 2 - 3 + 2?", "So the final answer is 3 + 2 - 3 + 2 = 9."], "4", "9", False),
        (["We need 3 + 2 - 3 + 2.", r"The answer is \boxed{3 + 2 - 3 + 2}."], "4", "3 + 2 - 3 + 2", False),
        (["What is 2 + 2?", "#### 2+2"], "4", "2+2", False),
        (["2 + 2 = 4", r"So \boxed{4}.", "Answer: 5"], "4", "5", False),
        (["The answer is 5.", "Wait: 2 + 2 = 4, so the answer is 4."], "5", "4", False),
        (["2 + 2 = 4, so the answer is 4.", "Check: 4 - 2 = 2."], "4", "4", True),
        (["3 + 2 = 5, 5 - 3 = 2 and 2 + 2 = 4.", "Answer: 4"], "4", "4", True),
    ],
)
def test_rule_verifier_scores_a_talked_into_answer_zero(
    steps: list[str], truth: str, predicted: str, correct: bool
) -> None:
    verdict = VERIFIER.verify(VerifyInput("What is 3 + 2 - 3 + 2?", steps, truth))
    assert verdict.extra["predicted_answer"] == predicted
    assert verdict.extra["answer_correct"] is correct
    assert (verdict.score == 1.0) is correct


def test_a_stated_wrong_chain_is_right_only_against_its_last_side() -> None:
    steps = ["What is 3 + 2 - 3 + 2?", "So the final answer is 3 + 2 - 3 + 2 = 9."]
    against_9 = VERIFIER.verify(VerifyInput("What is 3 + 2 - 3 + 2?", steps, "9"))
    assert against_9.extra["answer_correct"] is True
    # Its arithmetic is still wrong, so the solution still scores 0.
    assert (against_9.earliest_error, against_9.score) == (1, 0.0)


def test_huge_numbers_and_towers_neither_crash_nor_hang() -> None:
    start = time.perf_counter()
    assert extract_answer(f"Answer: {BIG}") == BIG
    assert extract_answer(f"so the answer is {BIG} + 1 = {BIG}.") == BIG
    assert extract_answer(BIG) == BIG
    assert answers_equal(BIG, BIG) is True
    assert answers_equal(BIG, BIG[:-1] + "8") is False
    assert extract_answer("Answer: 10^10^10") == "10^10^10"
    assert answers_equal("10^10^10", "5") is False
    assert answers_equal(r"10^{10^{10}}", "10") is False
    assert answers_equal("1", "2^{99999999999}") is False  # a huge power is not worked out either
    assert answers_equal("2^{99999999999}", "2^{99999999999}") is True
    assert answers_equal("1", "10000000!") is False
    assert VERIFIER.verify(VerifyInput("p", ["10^10^10 = 5", "Answer: 10^10^10"], "5")).score == 0.0
    long = BIG[:3000]  # the rule verifier reads the last ANSWER_SEARCH_CHARS of a step
    assert VERIFIER.verify(VerifyInput("p", [f"{long} - 1 = {long}", f"Answer: {long}"], long)).score == 1.0
    assert VERIFIER.verify(VerifyInput("p", [f"Answer: {long}"], long[:-1] + "8")).score == 0.0
    assert time.perf_counter() - start < 1.5


@pytest.mark.parametrize(
    "text",
    [
        "answer is {" * 20_000,
        "Answer: " + "(" * 50_000,
        "answer: " + "\\(" * 50_000 + "5",
        "answer: 5" + "\\)" * 50_000,
        "$" * 100_000,
        "\\boxed{" * 10_000,
        "#### " * 20_000,
        "answer is 1 " * 20_000,
        "answer is " + "{" * 50_000 + "=" * 50_000,
        " " * 100_000 + "x",
    ],
)
def test_extraction_of_adversarial_text_is_quick(text: str) -> None:
    start = time.perf_counter()
    for kind in ("auto", "gsm8k", "math", "aime"):
        extract_answer(text, kind)  # type: ignore[arg-type]
    final_answer([text, text])
    assert time.perf_counter() - start < 2


# --- off the main thread: math-verify in a worker process, never a string comparison ----------------


def test_rule_verifier_off_the_main_thread_judges_as_on_it() -> None:
    item = VerifyInput("Simplify.", ["We get $\\sqrt{4}$.", r"So the answer is \boxed{\sqrt{4}}."], "2")
    on_main = VERIFIER.verify(item)
    off_main = in_a_thread(lambda: VERIFIER.verify(item))
    assert on_main.extra["answer_correct"] is True
    assert off_main == on_main


def test_a_worker_timeout_is_unequal_not_a_string_match(monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker that says it is ready and then never answers: as text "x+1" equals "x+1", but a comparison
    # that runs out of time counts as unequal, and the stuck worker is killed.
    real = realmath._WORKER_CODE
    stuck = "import sys, time; sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(600)"
    monkeypatch.setattr(realmath, "_WORKER_CODE", stuck)
    monkeypatch.setattr(realmath, "_WORKER", realmath._MathVerifyWorker())
    monkeypatch.setattr(realmath, "MATH_VERIFY_WORKER_TIMEOUT_S", 0.5)
    assert in_a_thread(lambda: answers_equal("x+1", "x+1")) is False
    assert realmath._WORKER._process is None
    # The next comparison starts a fresh worker, here a real one.
    monkeypatch.setattr(realmath, "_WORKER_CODE", real)
    assert in_a_thread(lambda: answers_equal("x+1", "1+x")) is True


# --- fuzz ---------------------------------------------------------------------------------------------

FRAGMENTS = [
    "answer is ", "Answer:", "**", "####", "\\boxed{", "\\fbox", "{", "}", "$", "$$", "\\(", "\\)", "\\[",
    "=", "<=", " = ", "\n", ". ", ", ", "3", "17", "-", "+", "2.5", "1,000", "x", "apples", "which equals",
    "\\frac{1}{2}", "\\text{", "１２", "٣", "\u200b", " ", "<<2*3=6>>",
]  # fmt: skip
TEXTS = st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join))
# Answer-like text for math-verify; exponents stay small so that no input runs into its timeout.
ANSWER_FRAGMENTS = [
    "1", "2", "10", "0.5", "+", "-", "*", "/", "^2", "^{3}", "=", "x", "y", "\\frac{1}{2}", "\\sqrt{2}", "(",
    ")", "[", "]", ",", "$", "\\boxed{", "}", "{", "%", "\\pi", " ", "\\times", "１", "<=", "\\text{ cm}",
]  # fmt: skip
ANSWERS = st.one_of(
    st.none(), st.text(max_size=20), st.lists(st.sampled_from(ANSWER_FRAGMENTS), max_size=10).map("".join)
)
KIND = st.sampled_from(["auto", "gsm8k", "math", "aime"])


@given(TEXTS, KIND)
def test_fuzz_extract_answer_never_raises(text: str, kind: str) -> None:
    found = extract_answer(text, kind)  # type: ignore[arg-type]
    assert found is None or isinstance(found, str)


@given(TEXTS)
def test_fuzz_an_appended_answer_line_is_the_answer(text: str) -> None:
    assert extract_answer(text + "\nAnswer: 17") == "17"
    assert final_answer([text, "Answer: 17"]) == "17"
    assert answers_equal(extract_answer(text + "\nAnswer: 17"), "17") is True


@given(TEXTS, st.lists(st.integers(0, 10**6), min_size=1, max_size=6), st.integers(-(10**9), 10**9))
def test_fuzz_a_chain_after_the_answer_is_states_its_last_side(text: str, terms: list[int], n: int) -> None:
    chain = " + ".join(map(str, terms))
    assert extract_answer(f"{text}\nSo the answer is {chain} = {n}.") == str(n)
    assert extract_answer(f"{text}\nSo the answer is ${chain} = {n}$.") == str(n)
    assert extract_answer(f"{text}\n\\boxed{{{chain} = {n}}}") == str(n)


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=5))
def test_fuzz_the_last_boxed_answer_wins(values: list[int]) -> None:
    assert extract_answer(" then ".join(f"\\boxed{{{v}}}" for v in values)) == str(values[-1])


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(["+", "-", "\\times", "*"]))
def test_fuzz_a_stated_expression_is_not_its_value(a: int, b: int, op: str) -> None:
    value = {"+": a + b, "-": a - b, "\\times": a * b, "*": a * b}[op]
    assert answers_equal(f"{a} {op} {b}", str(value)) is False
    assert answers_equal(f"{a} {op} {b} = {value}", str(value)) is True


@given(ANSWERS, ANSWERS)
def test_fuzz_answers_equal_never_raises(pred: str | None, gold: str | None) -> None:
    assert answers_equal(pred, gold) in (True, False)
