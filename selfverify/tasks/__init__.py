"""Tasks behind one interface (``selfverify.tasks.base.Task``), chosen by ``task.name``:

- ``embedded``: left-to-right arithmetic in the compact ``Q:5-7-6`` notation (the tiny model's world);
- ``arithmetic_nl``: the same problems in words, "5 - 7 = -2" steps and an "Answer: N" line;
- ``gsm8k``, ``math``: real problems through ``datasets`` (a hub name or a local file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from selfverify.utils.io import SourceError

if TYPE_CHECKING:
    from selfverify.config.schema import TaskConfig

TASKS = ("embedded", "arithmetic_nl", "gsm8k", "math")


def make_task(cfg: TaskConfig, prompter: Prompter = raw_prompter) -> Task:
    """The task ``cfg.name`` names; ``prompter`` formats its prompts for the generator."""
    spec = TaskSpec(cfg.min_ops, cfg.max_ops, cfg.max_operand, cfg.ops, cfg.max_mul_operand)
    if cfg.name == "embedded":
        return EmbeddedTask(spec)
    if cfg.name == "arithmetic_nl":
        return WordedArithmeticTask(spec, prompter)
    from selfverify.tasks.mathdata import data_path

    source = cfg.source or str(data_path(f"{cfg.name}_sample.jsonl"))
    try:
        return _math_task(cfg, source, prompter)
    except (OSError, ConnectionError) as err:  # no such file, no reachable hub
        detail = " ".join(str(err).split())[:300]
        raise SourceError(f"task {cfg.name} from {source}: cannot load it: {detail}") from None


def _math_task(cfg: TaskConfig, source: str, prompter: Prompter) -> Task:
    from selfverify.tasks.mathdata import MathDatasetTask

    return MathDatasetTask(
        cfg.name,  # type: ignore[arg-type]
        source,
        split=cfg.split,
        heldout_source=cfg.heldout_source,
        heldout_split=cfg.heldout_split,
        prompter=prompter,
    )


__all__ = [
    "TASKS",
    "EmbeddedTask",
    "Problem",
    "Prompter",
    "StepCheck",
    "Task",
    "TaskSpec",
    "WordedArithmeticTask",
    "check_solution",
    "heldout_split",
    "make_task",
    "parse_problem",
    "raw_prompter",
    "split_steps",
    "train_problems",
]
