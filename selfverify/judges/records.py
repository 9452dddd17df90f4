"""Labelled solution records as scoring and training read them: ProcessBench's
``{"problem", "steps", "label"}`` or a plain ``{"problem", "solution", "answer"}`` split into steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selfverify.judges.base import VerifyInput
from selfverify.tasks.realmath import SplitRule, split_steps


@dataclass(frozen=True)
class ScoreItem:
    """One validated input record."""

    id: str | int
    input: VerifyInput
    label: int | None


def parse_record(record: dict[str, Any], line_no: int, split_rule: SplitRule = "lines") -> ScoreItem:
    """Validate one input record; raises ``ValueError`` saying what is wrong with it."""
    problem = record.get("problem")
    if not isinstance(problem, str):
        raise ValueError("missing 'problem'" if problem is None else "'problem' must be a string")
    if "steps" in record:
        steps = record["steps"]
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise ValueError("'steps' must be a list of strings")
    elif isinstance(record.get("solution"), str):
        steps = split_steps(record["solution"], split_rule)
    else:
        raise ValueError("needs 'steps' (a list of strings) or 'solution' (a string)")
    answer = record.get("answer")
    if answer is not None:
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise ValueError("'answer' must be a string or a number")
        answer = str(answer)
    label = record.get("label")
    if label is not None:
        if isinstance(label, bool) or not isinstance(label, int):
            raise ValueError("'label' must be an integer")
        if not -1 <= label < len(steps):
            # Not the value itself when huge: str() of an int over 4300 digits raises its own ValueError.
            shown = label if abs(label) < 10**12 else "(a huge integer)"
            raise ValueError(f"'label' {shown} is out of range for {len(steps)} steps")
    item_id = record.get("id", line_no)
    if item_id is None:
        item_id = line_no
    if isinstance(item_id, bool) or not isinstance(item_id, str | int):
        raise ValueError("'id' must be a string or an integer")
    return ScoreItem(item_id, VerifyInput(problem=problem, steps=steps, answer=answer), label)
