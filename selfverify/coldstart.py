"""Cold-start demonstrations for the generator: worked or answer-only solutions of training problems,
followed by a faithful self-evaluation when the generator is trained to verify itself."""

from __future__ import annotations

import random

from selfverify.config import Config
from selfverify.tasks import Problem, split_steps, train_problems
from verifiers.generative import VERIFY_TAG, reference_analysis


def demonstrations(cfg: Config, step: int, exclude: set[Problem]) -> tuple[list[str], list[str]]:
    """(prompts, responses) of SFT batch ``step``; keyed by (seed, step), so a resumed run repeats it.

    A share ``sft.direct_answer_fraction`` of responses state only the answer. Under
    ``reward.mode=self_verify`` each response continues with ``#V`` and the ground-truth analysis of
    itself (verifiers.generative), so the generator starts out able to write its self-evaluation.
    """
    problems = train_problems(cfg.task, cfg.sft.batch_size, seed=cfg.seed, tag=f"sft-{step}", exclude=exclude)
    style = random.Random(f"{cfg.seed}-sft-style-{step}")
    demos = [
        p.direct_solution() if style.random() < cfg.sft.direct_answer_fraction else p.reference_solution()
        for p in problems
    ]
    if cfg.reward.mode == "self_verify":
        demos = [
            f"{d}\n{VERIFY_TAG}\n{reference_analysis(p, split_steps(d))}"
            for p, d in zip(problems, demos, strict=True)
        ]
    return [p.prompt for p in problems], demos
