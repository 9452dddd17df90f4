"""The generator's phases, shared by the RL-only job and the self-verification loop: its cold start
(SFT on demonstrations), the prompts of its RL steps, value pretraining and the RL phase itself.

Each takes the worker, the task and a ``checkpoint(step)`` callback that saves the run part-way, so
both jobs resume inside a phase at the step they last saved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from selfverify.config.schema import Config, RLConfig
from selfverify.judges.base import Verdict
from selfverify.recipes.coldstart import demonstrations
from selfverify.recipes.rl_step import ProblemSource, RewardFn, rl_step, value_pretrain_step
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.utils.seeds import stream_seed
from selfverify.utils.tracking import Tracker

Checkpoint = Callable[[int], None]  # saves the run with this many steps of the phase done


def problem_source(cfg: Config, task: Task, exclude: set[TaskProblem], tag: str) -> ProblemSource:
    """The prompts of one RL step, keyed by ``tag`` (and the refill round under dynamic sampling),
    never held-out ones."""
    return lambda refill: task.train_problems(
        cfg.rl.prompts_per_step,
        seed=cfg.seed,
        tag=tag if refill == 0 else f"{tag}-r{refill}",
        exclude=exclude,
    )


@dataclass(frozen=True)
class Revision:
    """A training problem posed as a refinement (DeepSeekMath-V2's sequential refinement, trained by
    RL): ``prompt`` shows the generator's own flawed draft and the verifier's analysis of it, and the
    response, the revised solution, is rewarded as any solution of ``problem``."""

    problem: TaskProblem
    prompt: str

    @property
    def text(self) -> str:
        return self.problem.text

    @property
    def answer(self) -> object:
        return self.problem.answer


def unrevised(problems: Sequence[TaskProblem]) -> list[TaskProblem]:
    """The problems a step's responses solve: a refinement's own problem in place of it."""
    return [p.problem if isinstance(p, Revision) else p for p in problems]


def refining_source(
    base: ProblemSource,
    fraction: float,
    draft: Callable[[list[TaskProblem], int], list[list[str]]],
    analyse: Callable[[list[TaskProblem], list[list[str]]], list[Verdict]],
    refine_prompt: Callable[[str, Sequence[str], Sequence[str]], str],
) -> ProblemSource:
    """``base``'s prompts with the last ``fraction`` of them posed as refinements where the verifier
    finds an issue in a draft: ``draft(problems, refill)`` samples one solution (its steps) of each,
    ``analyse`` is the verifier's greedy analysis, and a draft it scores below 1 becomes a
    :class:`Revision` prompt over the draft and that analysis; a draft it passes leaves its problem
    an ordinary prompt. The refinement then learns from the verifier's score of what it writes, not
    only from the cold start's demonstrations over injected errors."""

    def source(refill: int) -> list[TaskProblem]:
        problems = base(refill)
        k = round(len(problems) * fraction)
        if k == 0:
            return problems
        tail = problems[-k:]
        drafts = draft(tail, refill)
        verdicts = analyse(tail, drafts)
        revised = [
            Revision(p, refine_prompt(p.text, steps, [v.analysis])) if v.parsed and v.score < 1.0 else p
            for p, steps, v in zip(tail, drafts, verdicts, strict=True)
        ]
        return problems[:-k] + revised

    return source


def cold_start(
    generator: LMWorker,
    cfg: Config,
    task: Task,
    exclude: set[TaskProblem],
    tracker: Tracker,
    *,
    first: int,
    checkpoint: Checkpoint,
    fmt: object | None = None,
    progress: bool = True,
) -> None:
    """SFT on demonstrations from step ``first`` (> 0: resumed, with the optimizer saved there);
    ``fmt``: the judge format whose self-evaluation the demonstrations end with (reward.mode=self_verify)."""
    sft = cfg.sft
    generator.start_sft(sft.lr, warmup_steps=sft.warmup_steps, total_steps=sft.steps, resume=first > 0)
    bar = tqdm(range(first, sft.steps), desc="generator cold start (SFT)", disable=not progress)
    for step in bar:
        m = generator.sft_step(*demonstrations(cfg, task, step, exclude, fmt))
        tracker.log("sft", step + 1, m)
        bar.set_postfix(loss=f"{m['loss']:.3f}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < sft.steps:
            checkpoint(step + 1)
    generator.end_training()


@dataclass
class GeneratorRL:
    """The generator's RL as one job or one loop round runs it: the worker, its settings and reward, the
    prompts' source, and where the steps are logged. ``round`` keys the steps' random streams."""

    generator: LMWorker
    rl: RLConfig
    reward_fn: RewardFn
    source_for: Callable[[str], ProblemSource]
    tracker: Tracker
    seed: int
    round: int = 0
    progress: bool = True

    def value_pretraining(self, *, tag: str, log_offset: int, first: int = 0, desc: str) -> None:
        """VAPO's value pretraining: the critic alone on Monte-Carlo returns, steps ``first`` onward of
        ``rl.value_pretrain_steps``, their prompts keyed ``{tag}-{step}``."""
        pad_id = self.generator.get_tokenizer().pad_token_id
        bar = tqdm(range(first, self.rl.value_pretrain_steps), desc=desc, disable=not self.progress)
        for step in bar:
            seed = stream_seed(self.seed, "value_pretrain", self.round, step)
            m = value_pretrain_step(
                self.generator, pad_id, self.rl, self.source_for(f"{tag}-{step}"), self.reward_fn, seed
            )
            self.tracker.log("value_pretrain", log_offset + step + 1, m)
            bar.set_postfix(value_loss=f"{m['value_loss']:.3f}")

    def steps(
        self,
        *,
        offset: int,
        steps: int,
        first: int,
        eval_every: int,
        evaluate: Callable[[], dict[str, float]],
        checkpoint: Checkpoint,
        checkpoint_every: int,
        desc: str,
    ) -> None:
        """``steps`` RL steps from step ``first``, numbered from ``offset`` (the loop's rounds continue one
        count): an evaluation every ``eval_every`` steps and a checkpoint every ``checkpoint_every``,
        except after the last step (the caller evaluates and saves there)."""
        pad_id = self.generator.get_tokenizer().pad_token_id
        bar = tqdm(range(first, steps), desc=desc, disable=not self.progress)
        for step in bar:
            g = offset + step
            seed = stream_seed(self.seed, "generator_rl", self.round, g)
            m = rl_step(self.generator, pad_id, self.rl, self.source_for(f"rl-{g}"), self.reward_fn, seed)
            self.tracker.log("rl", g + 1, m)
            bar.set_postfix(reward=f"{m['reward']:.2f}")
            if (step + 1) % eval_every == 0 and step + 1 < steps:
                self.tracker.log("eval", g + 1, evaluate())
            if (step + 1) % checkpoint_every == 0 and step + 1 < steps:
                checkpoint(step + 1)
