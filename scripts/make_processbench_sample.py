"""Make a ProcessBench-format file from GSM8K reference solutions, some with one corrupted step.

Each record is ``{"id", "problem", "steps", "label", "corruption"}``: steps are the reference
solution's lines with the ``<<a*b=c>>`` calculator annotations removed (the ``#### x`` line stays as
the last step), and ``corruption`` says what was done:

- ``none`` (label -1): the reference as is (GSM8K references hold a few genuine slips, so a handful
  of these are not truly error-free);
- ``arithmetic`` (label k): in step k, the result of one ``... = c`` claim is changed (c -> c ± d);
- ``setup`` (label k): in step k, the first operand of an integer claim ``a op b = c`` is changed and
  the result recomputed, so the step is arithmetically consistent but uses a wrong quantity; a
  rule-based checker cannot see these, by design of the sample.

Usage: python scripts/make_processbench_sample.py --input gsm8k_train.jsonl --output pb.jsonl --n 1000
"""

from __future__ import annotations

import argparse
import json
import random
import re
from fractions import Fraction
from pathlib import Path

from selfverify.tasks.realmath import extract_answer, split_steps
from selfverify.utils.io import AtomicJsonlWriter, read_records

ANNOTATION_RE = re.compile(r"<<[^<>]*>>")
RESULT_RE = re.compile(r"=\s*\$?(\d[\d,]*(?:\.\d+)?)")
INT_CLAIM_RE = re.compile(r"(?<![\d.,/])(\d+)(\s*)([-+*/x×])(\s*)(\d+)(\s*=\s*\$?)(\d+)(?![\d.,])")


def apply_op(op: str, a: int, b: int) -> Fraction:
    """``a op b`` exactly, for the operators INT_CLAIM_RE matches."""
    if op == "+":
        return Fraction(a + b)
    if op == "-":
        return Fraction(a - b)
    if op == "/":
        return Fraction(a, b)
    return Fraction(a * b)


def corrupt_result(step: str, rng: random.Random) -> str | None:
    """Change the result of one ``= c`` in ``step``; None when the step has none."""
    matches = list(RESULT_RE.finditer(step))
    if not matches:
        return None
    m = rng.choice(matches)
    old = m.group(1)
    if "." in old:
        digits = old.replace(",", "")
        last = int(digits[-1])
        new = digits[:-1] + str((last + rng.choice([1, 2, 3])) % 10)
    else:
        value = int(old.replace(",", ""))
        new = str(max(value + rng.choice([-2, -1, 1, 2, 10]), 0))
        if new == str(value):
            new = str(value + 1)
    return step[: m.start(1)] + new + step[m.end(1) :]


def corrupt_setup(step: str, rng: random.Random) -> str | None:
    """Change the first operand of one integer claim and recompute its result consistently."""
    matches = list(INT_CLAIM_RE.finditer(step))
    rng.shuffle(matches)
    for m in matches:
        a, op, b = int(m.group(1)), m.group(3), int(m.group(5))
        new_a = a + rng.choice([-2, -1, 1, 2, 3])
        if new_a <= 0 or (op == "/" and b == 0):
            continue
        result = apply_op(op, new_a, b)
        if result.denominator != 1 or result < 0:
            continue
        claim = f"{new_a}{m.group(2)}{op}{m.group(4)}{b}{m.group(6)}{result.numerator}"
        return step[: m.start()] + claim + step[m.end() :]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--input", type=Path, required=True, help="GSM8K JSONL (question, answer)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--n", type=int, default=1000, help="records to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--p-arithmetic", type=float, default=0.3, help="share with a corrupted result")
    parser.add_argument("--p-setup", type=float, default=0.3, help="share with a consistent wrong operand")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = list(read_records(args.input))
    rng.shuffle(rows)
    counts = {"none": 0, "arithmetic": 0, "setup": 0}
    with AtomicJsonlWriter(args.output) as out:
        for line_no, row in rows:
            if out.count >= args.n:
                break
            steps = [ANNOTATION_RE.sub("", s) for s in split_steps(row["answer"])]
            # The final "#### x" step is left alone: its corruption is an answer error, not a step error.
            body = len(steps) - 1 if extract_answer(steps[-1], "gsm8k") is not None else len(steps)
            draw = rng.random()
            kind = "arithmetic" if draw < args.p_arithmetic else "none"
            if args.p_arithmetic <= draw < args.p_arithmetic + args.p_setup:
                kind = "setup"
            label = -1
            if kind != "none":
                corrupt = corrupt_result if kind == "arithmetic" else corrupt_setup
                for k in rng.sample(range(body), k=body):
                    changed = corrupt(steps[k], rng)
                    if changed is not None:
                        steps[k], label = changed, k
                        break
                if label == -1:
                    continue  # nothing to corrupt in this solution: use another one
            counts[kind] += 1
            record = {"id": f"gsm8k-train-{line_no - 1}", "problem": row["question"], "steps": steps}
            out.write(record | {"label": label, "corruption": kind})
    print(json.dumps({"written": sum(counts.values()), **counts}))


if __name__ == "__main__":
    main()
