"""Cold-start demonstrations for the generator: worked or answer-only solutions of training problems,
followed by a faithful self-evaluation when the generator is trained to verify itself."""

from __future__ import annotations

import random

from selfverify.config.schema import Config
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.utils.seeds import stream_seed


def demonstrations(
    cfg: Config, task: Task, step: int, exclude: set[TaskProblem], fmt: object | None = None
) -> tuple[list[str], list[str]]:
    """(prompts, responses) of SFT batch ``step``; keyed by (seed, step), so a resumed run repeats it.

    A share ``sft.direct_answer_fraction`` of responses state only the answer. Under
    ``reward.mode=self_verify`` each response continues with the judge format ``fmt``'s tag and the
    ground-truth analysis of itself, so the generator starts out able to write its self-evaluation.
    """
    problems = task.train_problems(cfg.sft.batch_size, seed=cfg.seed, tag=f"sft-{step}", exclude=exclude)
    style = random.Random(stream_seed(cfg.seed, "sft_style", 0, step))
    demos = [task.demonstration(p, direct=style.random() < cfg.sft.direct_answer_fraction) for p in problems]
    if cfg.reward.mode == "self_verify":
        demos = [
            f"{d}\n{fmt.verify_tag}\n{fmt.reference_analysis(p, task.split_steps(d))}"  # type: ignore[attr-defined]
            for p, d in zip(problems, demos, strict=True)
        ]
    return [p.prompt for p in problems], demos
