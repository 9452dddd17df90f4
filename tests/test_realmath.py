"""Real math data: answer extraction and comparison, step splitting, loading through ``datasets``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import datasets
import pytest

from selfverify.tasks.realmath import (
    answers_equal,
    clean_unicode,
    extract_answer,
    last_boxed,
    load_math_dataset,
    parse_number,
    split_steps,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("Natalia sold 48+24 = 72 clips.\n#### 72", "gsm8k", "72"),
        ("He makes $1,200.\n#### $1,200", "gsm8k", "1200"),
        ("no final line", "gsm8k", None),
        (r"So $x = \boxed{\frac{1}{2}}$.", "math", r"\frac{1}{2}"),
        (r"First \boxed{1}, then \boxed{\sqrt{\frac{a}{b}} + {c}}", "math", r"\sqrt{\frac{a}{b}} + {c}"),
        (r"\boxed 5", "math", "5"),
        (r"\boxed{unclosed", "math", None),
        (r"The answer is \boxed{042}.", "aime", "42"),
        ("so m + n = 113", "aime", "113"),
        ("The answer is 1,500.", "auto", "1500"),
        ("Thus she has 5 apples left after 3 days.", "auto", "3"),
        (r"Hence \boxed{7}. Check: 3 + 4 = 7", "auto", "7"),
        ("nothing numeric", "auto", None),
    ],
)
def test_extract_answer(text: str, kind: str, expected: str | None) -> None:
    assert extract_answer(text, kind) == expected  # type: ignore[arg-type]


def test_last_boxed_nested() -> None:
    assert last_boxed(r"\boxed{a{b{c}}d}") == "a{b{c}}d"
    assert last_boxed("no box") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,200", 1200),
        ("$5", 5),
        ("-3.5", -3.5),
        ("25%", 0.25),
        ("3/4", 0.75),
        (r"\frac{3}{4}", 0.75),
        ("x", None),
    ],
)
def test_parse_number(text: str, value: float | None) -> None:
    parsed = parse_number(text)
    assert (None if parsed is None else float(parsed)) == value


@pytest.mark.parametrize(
    ("pred", "gold", "equal"),
    [
        ("72", "72", True),
        ("1,200", "1200", True),
        ("$18.00", "18", True),
        ("0.5", r"\frac{1}{2}", True),
        (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2", True),
        ("１２", "12", True),
        ("7\u200b2", "72", True),
        ("71", "72", False),
        (None, "72", False),
        ("", "72", False),
        ("x + 1", "1 + x", True),
    ],
)
def test_answers_equal(pred: str | None, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal


def test_answers_equal_refuses_power_towers_quickly() -> None:
    start = time.perf_counter()
    assert answers_equal(r"9^{9^{9^{9}}}", "3") is False
    assert answers_equal("10**10**10", "5") is False
    assert time.perf_counter() - start < 0.5


def test_answers_equal_off_the_main_thread_is_the_main_threads_judgment() -> None:
    # \sqrt{4} = 2 only math-verify can tell (as text they differ), so the thread reached it.
    pairs = [("1,200", "1200"), ("a+b", "b+a"), (r"\sqrt{4}", "2"), (r"\sqrt{2}", "1.5")]
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.extend(answers_equal(p, g) for p, g in pairs))
    worker.start()
    worker.join(120)
    assert results == [answers_equal(p, g) for p, g in pairs] == [True, True, True, False]


def test_clean_unicode() -> None:
    assert clean_unicode("\u200f１２\u200b3\ufeff") == "123"


SOLUTION = "Natalia sold 48/2 = 24 clips in May. Then 0.5 x 4 = 2.\n\nShe sold 72 in total!\n#### 72"


def test_split_steps_rules() -> None:
    assert split_steps(SOLUTION) == [
        "Natalia sold 48/2 = 24 clips in May. Then 0.5 x 4 = 2.",
        "She sold 72 in total!",
        "#### 72",
    ]
    assert split_steps(SOLUTION, "sentences") == [
        "Natalia sold 48/2 = 24 clips in May.",
        "Then 0.5 x 4 = 2.",
        "She sold 72 in total!",
        "#### 72",
    ]
    assert split_steps(SOLUTION, "double-newline") == [  # the final answer line stays a step of its own
        "Natalia sold 48/2 = 24 clips in May. Then 0.5 x 4 = 2.",
        "She sold 72 in total!",
        "#### 72",
    ]
    assert split_steps("  \n\n ") == []
    with pytest.raises(ValueError, match="unknown split rule"):
        split_steps(SOLUTION, "words")  # type: ignore[arg-type]


def test_load_gsm8k_from_local_jsonl(tmp_path: Path) -> None:
    ds = load_math_dataset(FIXTURES / "gsm8k_sample.jsonl", "gsm8k", cache_dir=tmp_path / "cache")
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["id", "problem", "solution", "answer"]
    assert len(ds) == 20
    first = ds[0]
    assert first["id"] == "gsm8k-train-0"
    assert first["problem"].startswith("Natalia sold clips")
    assert first["solution"].endswith("#### 72") and "<<48/2=24>>" in first["solution"]
    assert first["answer"] == "72"


def test_load_math_and_aime_styles(tmp_path: Path) -> None:
    math_rows = [
        {"problem": "What is 1/2 + 1/4?", "solution": r"We get $\boxed{\frac{3}{4}}$.", "unique_id": "m/1"},
        {"problem": "Compute 2+2.", "solution": r"$\boxed{4}$", "answer": "4", "unique_id": "m/2"},
    ]
    math_file = tmp_path / "math.json"
    math_file.write_text(json.dumps(math_rows))
    ds = load_math_dataset(math_file, "math", split="test", cache_dir=tmp_path / "cache")
    assert [(r["id"], r["answer"]) for r in ds] == [("m/1", r"\frac{3}{4}"), ("m/2", "4")]

    aime_file = tmp_path / "aime.parquet"
    datasets.Dataset.from_list(
        [{"problem": "Find m+n.", "answer": 113}, {"problem": "Find k.", "answer": 42}]
    ).to_parquet(aime_file)
    ds = load_math_dataset(aime_file, "aime", cache_dir=tmp_path / "cache")
    assert [(r["id"], r["answer"], r["solution"]) for r in ds] == [
        ("aime-train-0", "113", ""),
        ("aime-train-1", "42", ""),
    ]


def test_load_errors(tmp_path: Path) -> None:
    bad = tmp_path / "data.csv"
    bad.write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_math_dataset(bad, "gsm8k")
    with pytest.raises(ValueError, match="unknown kind"):
        load_math_dataset(FIXTURES / "gsm8k_sample.jsonl", "olympiad")  # type: ignore[arg-type]
