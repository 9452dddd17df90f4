"""Held-out evaluation of the generator against the task's checker."""

from __future__ import annotations

from collections.abc import Callable

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
    """Greedy decoding: answer accuracy, fully valid solutions, and response length.
    ``solution_of`` picks the solution out of a response (e.g. without a self-evaluation)."""
    correct = valid = length = 0.0
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        out = generator.generate([p.prompt for p in chunk], max_new_tokens=max_new_tokens, greedy=True)
        for p, text in zip(chunk, out.texts, strict=True):
            check = task.check(p, solution_of(text))
            correct += check.correct
            valid += check.correct and check.all_steps_valid
        length += out.lengths.sum().item()
    n = len(problems)
    return {"accuracy": correct / n, "valid_solution_rate": valid / n, "response_length": length / n}
