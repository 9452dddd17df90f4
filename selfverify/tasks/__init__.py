"""Tasks and answer checking: the embedded arithmetic world."""

from selfverify.tasks.arithmetic import (
    Problem,
    StepCheck,
    TaskSpec,
    check_solution,
    heldout_split,
    parse_problem,
    split_steps,
    train_problems,
)

__all__ = [
    "Problem",
    "StepCheck",
    "TaskSpec",
    "check_solution",
    "heldout_split",
    "parse_problem",
    "split_steps",
    "train_problems",
]
