"""Cold-start demonstrations for the generator: worked or answer-only solutions of training problems,
followed by a faithful self-evaluation when the generator is trained to verify itself, and refinements:
a flawed solution and a faithful analysis of it in, the corrected solution out (test-time search)."""

from __future__ import annotations

import random

from selfverify.config.schema import Config
from selfverify.judges.base import JudgeFormat
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.utils.seeds import stream_seed


def demonstrations(
    cfg: Config, task: Task, step: int, exclude: set[TaskProblem], fmt: JudgeFormat | None = None
) -> tuple[list[str], list[str]]:
    """(prompts, responses) of SFT batch ``step``; keyed by (seed, step), so a resumed run repeats it.

    A share ``sft.direct_answer_fraction`` of responses state only the answer. Under
    ``reward.mode=self_verify`` each response continues with the judge format ``fmt``'s tag and the
    ground-truth analysis of itself, so the generator starts out able to write its self-evaluation.
    With a judge format, ``sft.refine_fraction`` × batch_size refinements follow, on problems of their
    own (so the solution demonstrations are the same with or without them): ``fmt``'s refinement
    prompt over a solution with one injected error and its faithful analysis, answered by the worked
    solution.
    """
    problems = task.train_problems(cfg.sft.batch_size, seed=cfg.seed, tag=f"sft-{step}", exclude=exclude)
    style = random.Random(stream_seed(cfg.seed, "sft_style", 0, step))
    demos = [task.demonstration(p, direct=style.random() < cfg.sft.direct_answer_fraction) for p in problems]
    prompts, responses = (
        [p.prompt for p in problems],
        [_with_self_evaluation(cfg, task, fmt, p, d) for p, d in zip(problems, demos, strict=True)],
    )
    n_refine = round(cfg.sft.batch_size * cfg.sft.refine_fraction) if fmt is not None else 0
    if n_refine:
        flawed = task.train_problems(n_refine, seed=cfg.seed, tag=f"sft-refine-{step}", exclude=exclude)
        rng = random.Random(stream_seed(cfg.seed, "sft_refine", 0, step))
        for p in flawed:
            _, steps = task.synthetic_solution(p, rng, correct_fraction=0.0)
            prompts.append(fmt.refine_prompt(p.text, steps, [fmt.reference_analysis(p, steps)]))
            responses.append(_with_self_evaluation(cfg, task, fmt, p, task.demonstration(p, direct=False)))
    return prompts, responses


def _with_self_evaluation(
    cfg: Config, task: Task, fmt: JudgeFormat | None, problem: TaskProblem, demo: str
) -> str:
    """``demo``, followed under ``reward.mode=self_verify`` by ``fmt``'s tag and its faithful analysis."""
    if cfg.reward.mode != "self_verify":
        return demo
    assert fmt is not None, "reward.mode=self_verify demonstrations need the judge format"
    return f"{demo}\n{fmt.verify_tag}\n{fmt.reference_analysis(problem, task.split_steps(demo))}"
