"""Tasks behind one interface (``selfverify.tasks.base.Task``), chosen by ``task.name``
(``selfverify.tasks.registry.make_task``):

- ``embedded``: left-to-right arithmetic in the compact ``Q:5-7-6`` notation (the tiny model's world);
- ``arithmetic_nl``: the same problems in words, "5 - 7 = -2" steps and an "Answer: N" line;
- ``gsm8k``, ``math``: real problems through ``datasets`` (a hub name or a local file).
"""

from __future__ import annotations

from selfverify.config.schema import TaskSpec
from selfverify.tasks.arithmetic import (
    EmbeddedTask,
    Problem,
    check_solution,
    heldout_split,
    parse_problem,
    split_steps,
    train_problems,
)
from selfverify.tasks.base import Prompter, StepCheck, Task, raw_prompter
from selfverify.tasks.worded import WordedArithmeticTask

__all__ = [
    "EmbeddedTask",
    "Problem",
    "Prompter",
    "StepCheck",
    "Task",
    "TaskSpec",
    "WordedArithmeticTask",
    "check_solution",
    "heldout_split",
    "parse_problem",
    "raw_prompter",
    "split_steps",
    "train_problems",
]
