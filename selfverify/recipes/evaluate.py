"""Held-out evaluation of the generator against the task's checker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from selfverify.judges.rewards import shows_working
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem


def evaluate_generator(
    generator: LMWorker,
    task: Task,
    problems: list[TaskProblem],
    *,
    max_new_tokens: int,
    batch_size: int,
    solution_of: Callable[[str], str] = lambda text: text,
) -> dict[str, float]:
    """Greedy decoding: answer accuracy, fully valid solutions, bare answers (no working shown),
    response length, and where the task names them (the embedded world) the share of each kind of
    error (``errors/<kind>``). ``solution_of`` picks the solution out of a response (e.g. without a
    self-evaluation)."""
    correct = valid = bare = length = 0.0
    kinds: Counter[str] = Counter()
    error_kind = getattr(task, "error_kind", None)  # the embedded world names what went wrong
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        out = generator.generate([p.prompt for p in chunk], max_new_tokens=max_new_tokens, greedy=True)
        for p, text in zip(chunk, out.texts, strict=True):
            check = task.check(p, solution_of(text))
            correct += check.correct
            valid += check.correct and check.all_steps_valid
            bare += not shows_working(check.steps)
            if error_kind is not None and (kind := error_kind(p, check)) is not None:
                kinds[kind] += 1
        length += out.lengths.sum().item()
    n = len(problems)
    return {
        "accuracy": correct / n,
        "valid_solution_rate": valid / n,
        "bare_answer_rate": bare / n,
        "response_length": length / n,
    } | {f"errors/{k}": kinds[k] / n for k in sorted(kinds)}
