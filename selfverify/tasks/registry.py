"""The tasks by name: ``make_task`` builds the one ``task.name`` names."""

from __future__ import annotations

from selfverify.config.schema import TaskConfig, TaskSpec
from selfverify.tasks.arithmetic import EmbeddedTask
from selfverify.tasks.base import Prompter, Task, raw_prompter
from selfverify.tasks.mathdata import MathDatasetTask, data_path
from selfverify.tasks.worded import WordedArithmeticTask
from selfverify.utils.io import SourceError

TASKS = ("embedded", "arithmetic_nl", "gsm8k", "math")


def make_task(cfg: TaskConfig, prompter: Prompter = raw_prompter) -> Task:
    """The task ``cfg.name`` names; ``prompter`` formats its prompts for the generator."""
    spec = TaskSpec(cfg.min_ops, cfg.max_ops, cfg.max_operand, cfg.ops, cfg.max_mul_operand, cfg.max_value)
    if cfg.name == "embedded":
        return EmbeddedTask(spec)
    if cfg.name == "arithmetic_nl":
        return WordedArithmeticTask(spec, prompter)
    source = cfg.source or str(data_path(f"{cfg.name}_sample.jsonl"))
    try:
        return _math_task(cfg, source, prompter)
    except (OSError, ConnectionError) as err:  # no such file, no reachable hub
        detail = " ".join(str(err).split())[:300]
        raise SourceError(f"task {cfg.name} from {source}: cannot load it: {detail}") from None


def _math_task(cfg: TaskConfig, source: str, prompter: Prompter) -> Task:
    return MathDatasetTask(
        cfg.name,  # type: ignore[arg-type]
        source,
        split=cfg.split,
        heldout_source=cfg.heldout_source,
        heldout_split=cfg.heldout_split,
        prompter=prompter,
    )
