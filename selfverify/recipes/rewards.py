"""The reward functions the jobs train with, each built by a named builder. A builder that takes a
judge (``verifier``, ``meta``) returns a reward that calls that model on every rollout: the call into
another model is visible here, where the reward is built.

The formulas themselves (R_format·R_score·R_meta, the self-verification reward, mixing step and
outcome rewards) are pure functions in ``selfverify.judges.rewards``.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from selfverify.config.schema import Config, RewardConfig
from selfverify.judges.base import JudgeFormat
from selfverify.judges.generative import GenerativeVerifier, MetaVerifier, verdict_agreement
from selfverify.judges.rewards import (
    meta_verifier_reward,
    mix_step_rewards,
    outcome_rewards,
    self_verify_reward,
    shows_working,
    verifier_reward,
)
from selfverify.recipes.generator import unrevised
from selfverify.recipes.judge_data import Labelled, MetaItem, World, solution_part
from selfverify.recipes.rl_step import RewardFn, Scored, step_scored
from selfverify.runtime.rollout import Rollout
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem


def _scored(rewards: list[float]) -> Scored:
    """Rewards with "right" meaning a full reward."""
    return Scored(torch.tensor(rewards), torch.tensor([r == 1.0 for r in rewards]))


def task_rewards(task: Task, tok: PreTrainedTokenizerBase, reward: RewardConfig) -> RewardFn:
    """The RL-only job's reward, from the task alone: the outcome (1 for a right final answer), or with
    ``reward.mode`` process/mix the task's exact step labels as step rewards (1 right, 0 wrong)."""

    def reward_fn(problems: list[TaskProblem], rollout: Rollout) -> Scored:
        checks = [task.check(p, t) for p, t in zip(problems, rollout.texts, strict=True)]
        outcome = outcome_rewards(checks)
        if reward.mode == "outcome":
            return Scored(outcome, outcome > 0)
        step_scores = [[float(ok) for ok in c.step_correct] for c in checks]
        if reward.mode == "mix":
            step_scores = mix_step_rewards(
                step_scores, outcome.tolist(), reward.process_weight, reward.outcome_weight
            )
        return step_scored(tok, rollout, step_scores, outcome > 0)

    return reward_fn


def verifier_rewards(fmt: JudgeFormat, meta: MetaVerifier | None) -> RewardFn:
    """The verifier's RL reward R_format·R_score·R_meta on labelled samples: **calls the meta-verifier**
    on every analysis the verifier wrote. ``meta`` None: R_format·R_score alone (R_meta = 1), the
    ablation in which nothing stops the verifier from reporting issues that are not there."""

    def reward_fn(items: list[Labelled], rollout: Rollout) -> Scored:
        verdicts = [fmt.parse_analysis(t, len(it.steps)) for it, t in zip(items, rollout.texts, strict=True)]
        if meta is None:
            metas = [1.0] * len(items)
        else:
            judged = meta.meta_verify(
                [it.problem.text for it in items], [it.steps for it in items], rollout.texts
            )
            metas = [ms for ms, _ in judged]
        return _scored(
            [
                verifier_reward(v.parsed, v.score, it.score, ms)
                for v, it, ms in zip(verdicts, items, metas, strict=True)
            ]
        )

    return reward_fn


def meta_rewards(fmt: JudgeFormat) -> RewardFn:
    """The meta-verifier's RL reward R_format·R_score against the meta labels (no model call)."""

    def reward_fn(items: list[MetaItem], rollout: Rollout) -> Scored:
        judged = [fmt.parse_meta(t) for t in rollout.texts]
        return _scored(
            [meta_verifier_reward(ok, s, it.label) for it, (s, ok) in zip(items, judged, strict=True)]
        )

    return reward_fn


def own_check_rewards(meta_fmt: JudgeFormat) -> RewardFn:
    """A blind meta-verifier's RL reward: its own analysis agrees with the label's (the step it names,
    its score), as an analysis it audits must agree with its own (no model call)."""

    def reward_fn(items: list[Labelled], rollout: Rollout) -> Scored:
        return _scored(
            [
                verdict_agreement(
                    meta_fmt.parse_analysis(it.analysis, len(it.steps)),
                    meta_fmt.parse_analysis(t, len(it.steps)),
                )
                for it, t in zip(items, rollout.texts, strict=True)
            ]
        )

    return reward_fn


def generator_rewards(
    cfg: Config, world: World, tok: PreTrainedTokenizerBase, verifier: GenerativeVerifier, meta: MetaVerifier
) -> RewardFn:
    """The loop generator's reward by ``reward.mode``: outcome (the task's check, no model call);
    otherwise **calls the verifier** on every solution — process: its step scores as step rewards; mix:
    those mixed with the outcome; self_verify: R_format·(α·R_Y + β·R_Z), which also **calls the
    meta-verifier** on the generator's own analysis (R_format: the analysis parses and the solution
    shows its working)."""
    task, fmt, mode = world.task, world.fmt, cfg.reward.mode

    def reward_fn(problems: list[TaskProblem], rollout: Rollout) -> Scored:
        problems = unrevised(problems)  # a refinement is scored as a solution of its problem
        solutions = [task.split_steps(solution_part(cfg, world, t)) for t in rollout.texts]

        def outcome() -> torch.Tensor:
            return outcome_rewards(
                [task.check(p, "\n".join(s)) for p, s in zip(problems, solutions, strict=True)]
            )

        if mode == "outcome":
            rewards = outcome()
            return Scored(rewards, rewards > 0)
        verdicts = verifier.analyse([p.text for p in problems], solutions)
        judged_right = torch.tensor([v.score == 1.0 for v in verdicts])
        if mode == "self_verify":
            evaluations = [fmt.split_self_evaluation(t)[1] for t in rollout.texts]
            metas = meta.meta_verify([p.text for p in problems], solutions, [z or "" for z in evaluations])
            rewards = []
            for v, s, z, (ms, _) in zip(verdicts, solutions, evaluations, metas, strict=True):
                own = fmt.parse_analysis(z, len(s)) if z is not None else None
                formatted = shows_working(s) and own is not None and own.parsed
                own_score = own.score if own else 0.0
                rewards.append(
                    self_verify_reward(
                        formatted, v.score, own_score, ms, alpha=cfg.reward.alpha, beta=cfg.reward.beta
                    )
                )
            return Scored(torch.tensor(rewards), judged_right)
        step_scores = [v.step_scores for v in verdicts]
        if mode == "mix":
            step_scores = mix_step_rewards(
                step_scores, outcome().tolist(), cfg.reward.process_weight, cfg.reward.outcome_weight
            )
        return step_scored(tok, rollout, step_scores, judged_right)

    return reward_fn
