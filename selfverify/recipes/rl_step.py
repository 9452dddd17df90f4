"""One on-policy RL step, for every objective preset (docs/guides/architecture.md, 'Data flow'):

    problems -> rollouts (G per prompt; DAPO refills zero-variance groups) -> rewards (+ overlong
    shaping) -> token rewards / values -> advantages (the configured estimator) -> policy update
    (+ critic update) -> metrics

Everything objective-specific is chosen by name in ``RLConfig`` and computed by the pure functions
in ``selfverify.algos``; this module only wires them to a worker (``selfverify.runtime.workers``), which
samples, scores log-probs and updates its model: the step runs the same whether the worker is in this
process or in a Ray actor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.profiler import record_function
from transformers import PreTrainedTokenizerBase

from selfverify.algos import (
    gae_advantages,
    get_advantage_estimator,
    group_has_variance,
    kl_penalty,
    length_adaptive_lambda,
    masked_sum,
    overlong_filter_mask,
    overlong_penalty,
    step_rewards_to_token_rewards,
    zero_variance_fraction,
)
from selfverify.algos.utils import explained_variance
from selfverify.config.schema import RLConfig
from selfverify.runtime.rollout import Rollout, concat_rollouts, line_end_tokens
from selfverify.runtime.workers import LMWorker
from selfverify.tasks.base import TaskProblem
from selfverify.utils.seeds import stream_seed


class StepRewards(NamedTuple):
    """Per-step rewards of a batch of responses: [B, S] each (S = the most steps in a response)."""

    rewards: torch.Tensor
    end: torch.Tensor  # index, within the response, of each step's last token
    mask: torch.Tensor  # 1 for a real step


class Scored(NamedTuple):
    """What a reward function returns: sequence rewards [B] (the sum of the step rewards when there
    are step rewards), whether each response is correct [B], and optionally step rewards."""

    rewards: torch.Tensor
    correct: torch.Tensor
    steps: StepRewards | None = None


# Scores a batch of responses: (problems, rollout) -> Scored, or a (rewards, correct) pair.
RewardFn = Callable[[list[TaskProblem], Rollout], Scored | tuple[torch.Tensor, torch.Tensor]]
# Draws the prompts of one sampling round: round index -> problems.
ProblemSource = Callable[[int], list[TaskProblem]]


def uses_critic(cfg: RLConfig) -> bool:
    return cfg.advantage == "gae"


@dataclass
class Collected:
    """One RL step's samples: the problems, their rollout, rewards, groups and step rewards."""

    problems: list[TaskProblem]
    rollout: Rollout
    rewards: torch.Tensor  # [B] task reward (before shaping)
    correct: torch.Tensor  # [B] bool
    group_ids: torch.Tensor  # [B]
    rounds: int
    steps: StepRewards | None = None


def lr_decay_steps(cfg: RLConfig, steps: int) -> int | None:
    """The RL steps a phase of ``steps`` decays its learning rate over (None: constant). The schedule
    advances once per RL step, however many optimizer steps its mini-batches and epochs take."""
    return steps if cfg.lr_schedule == "cosine" else None


def concat_step_rewards(parts: list[StepRewards]) -> StepRewards:
    """Stack step rewards of different step counts (padded steps are masked out)."""
    width = max(p.rewards.shape[1] for p in parts)
    pad = torch.nn.functional.pad
    return StepRewards(
        *(torch.cat([pad(p[i], (0, width - p.rewards.shape[1])) for p in parts]) for i in range(3))
    )


def step_rewards(
    tok: PreTrainedTokenizerBase, rollout: Rollout, step_scores: Sequence[Sequence[float]]
) -> StepRewards:
    """Per-step rewards placed on each step's last token (steps = non-empty response lines)."""
    ends = line_end_tokens(tok, rollout)
    width = max(1, max(len(s) for s in step_scores))
    rewards, end, mask = (torch.zeros(len(ends), width) for _ in range(3))
    for i, (scores, e) in enumerate(zip(step_scores, ends, strict=True)):
        n = min(len(scores), len(e)) if e else 0
        if n == 0:  # no steps: the whole response is one step, scored by its (outcome) part
            last = max(int(rollout.lengths[i].item()) - 1, 0)
            rewards[i, 0], end[i, 0], mask[i, 0] = (scores[-1] if scores else 0.0), last, 1.0
            continue
        rewards[i, :n] = torch.tensor(scores[:n])
        end[i, :n] = torch.tensor(e[:n], dtype=torch.float)
        mask[i, :n] = 1.0
    return StepRewards(rewards, end.long(), mask)


def step_scored(
    tok: PreTrainedTokenizerBase,
    rollout: Rollout,
    step_scores: Sequence[Sequence[float]],
    correct: torch.Tensor,
) -> Scored:
    """What a process reward function returns: each response's step scores on its steps' last tokens,
    their sum as its sequence reward."""
    rewards = torch.tensor([sum(s) for s in step_scores])
    return Scored(rewards, correct, step_rewards(tok, rollout, step_scores))


def collect(
    worker: LMWorker,
    pad_id: int,
    cfg: RLConfig,
    source: ProblemSource,
    reward_fn: RewardFn,
    seed: int,
) -> Collected:
    """Sample ``group_size`` responses per prompt and score them.

    With ``dynamic_sampling`` (DAPO), groups whose rewards are all equal carry no GRPO signal: they
    are dropped and new prompts are sampled until ``prompts_per_step`` groups remain or
    ``max_gen_rounds`` rounds have run (then the batch is whatever was kept, possibly smaller).
    """
    kept: list[tuple[list[TaskProblem], Rollout, Scored]] = []
    n_groups, rounds = 0, 0
    max_rounds = cfg.max_gen_rounds if cfg.dynamic_sampling else 1
    while n_groups < cfg.prompts_per_step and rounds < max_rounds:
        problems = source(rounds)
        expanded = [p for p in problems for _ in range(cfg.group_size)]
        with record_function("rl_step/generate"):
            rollout = worker.generate(
                [p.prompt for p in expanded],
                max_new_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature,
                seed=stream_seed(seed, "refill", rounds) if rounds else seed,
            )
        with record_function("rl_step/reward"):
            scored = Scored(*reward_fn(expanded, rollout))
        last = (problems, rollout, scored)
        rounds += 1
        if cfg.dynamic_sampling:
            gids = torch.arange(len(problems)).repeat_interleave(cfg.group_size)
            informative = group_has_variance(scored.rewards, gids)[:: cfg.group_size]
            groups = informative.nonzero().flatten()[: cfg.prompts_per_step - n_groups].tolist()
            rows = torch.tensor(
                [g * cfg.group_size + j for g in groups for j in range(cfg.group_size)], dtype=torch.long
            )
            problems = [problems[g] for g in groups]
            steps = StepRewards(*(t[rows] for t in scored.steps)) if scored.steps is not None else None
            rollout, scored = rollout.select(rows), Scored(scored.rewards[rows], scored.correct[rows], steps)
        if problems:
            kept.append((problems, rollout, scored))
            n_groups += len(problems)
    if not kept:  # no informative group in any round: keep the last one (its GRPO advantages are 0)
        kept.append(last)
    problems = [p for part in kept for p in part[0]]
    scores = [part[2] for part in kept]
    return Collected(
        problems=problems,
        rollout=concat_rollouts([part[1] for part in kept], pad_id),
        rewards=torch.cat([s.rewards for s in scores]),
        correct=torch.cat([s.correct for s in scores]),
        group_ids=torch.arange(len(problems)).repeat_interleave(cfg.group_size),
        rounds=rounds,
        steps=concat_step_rewards([s.steps for s in scores]) if scores[0].steps is not None else None,
    )


def terminal_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] sequence rewards -> [B, T] with each reward on its response's last token (one whole step)."""
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    has_tokens = (response_mask.sum(-1) > 0).float()
    return step_rewards_to_token_rewards(
        scores[:, None], last[:, None], has_tokens[:, None], response_mask.shape[1]
    )


def task_token_rewards(
    scores: torch.Tensor, steps: StepRewards | None, response_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T] task rewards for token-level estimators: each step's reward on its last token, or the
    sequence reward on the response's last token when there are no step rewards."""
    if steps is None:
        return terminal_token_rewards(scores, response_mask)
    return step_rewards_to_token_rewards(steps.rewards, steps.end, steps.mask, response_mask.shape[1])


def rl_step(
    worker: LMWorker,
    pad_id: int,
    cfg: RLConfig,
    source: ProblemSource,
    reward_fn: RewardFn,
    seed: int,
) -> dict[str, float]:
    """Collect one batch and update the worker's policy (and critic) on it; ``pad_id``: its
    tokenizer's pad token (batches of refill rounds are padded together)."""
    b = collect(worker, pad_id, cfg, source, reward_fn, seed)
    rollout, mask = b.rollout, b.rollout.response_mask
    scores, steps = shaped_rewards(cfg, b)
    with record_function("rl_step/logprobs"):  # pi_old, the reference's, the critic's values
        old_lp, ref_lp, values = worker.rollout_stats(rollout, cfg)
    kl_reward = None
    if ref_lp is not None and cfg.kl_in_reward:
        kl_reward = -cfg.kl_coef * kl_penalty(old_lp, ref_lp, cfg.kl_kind) * mask
    advantages, returns, metrics = estimate_advantages(
        worker, cfg, b, scores, steps, values, kl_reward, reward_fn
    )
    train_batch = rollout
    if cfg.overlong_filter:
        train_batch = dataclasses.replace(
            rollout, response_mask=overlong_filter_mask(rollout.truncated, mask)
        )
    with record_function("rl_step/update"):
        metrics |= worker.update(
            train_batch,
            old_logprobs=old_lp,
            advantages=advantages,
            ref_logprobs=ref_lp,
            cfg=cfg,
            seed=seed,
            positive=b.correct,
            old_values=values,
            returns=returns,
        )
    return metrics | {
        "reward": b.rewards.mean().item(),
        "accuracy": b.correct.float().mean().item(),
        "zero_variance_groups": zero_variance_fraction(b.rewards, b.group_ids),
        "gen_rounds": float(b.rounds),
        "batch_size": float(len(b.problems) * cfg.group_size),
        "response_length": rollout.lengths.mean().item(),
        "truncation_rate": rollout.truncated.float().mean().item(),
    }


def shaped_rewards(cfg: RLConfig, b: Collected) -> tuple[torch.Tensor, StepRewards | None]:
    """The batch's sequence rewards and step rewards after DAPO's soft overlong punishment (with step
    rewards: on the last step), when ``rl.overlong_buffer`` asks for it."""
    scores, steps = b.rewards.clone(), b.steps
    if cfg.overlong_buffer > 0:
        penalty = overlong_penalty(b.rollout.lengths, cfg.max_new_tokens, cfg.overlong_buffer)
        scores = scores + penalty
        if steps is not None:
            rows = torch.arange(len(penalty))
            last = (steps.mask.sum(-1).long() - 1).clamp(min=0)
            shaped = steps.rewards.clone()
            shaped[rows, last] += penalty
            steps = steps._replace(rewards=shaped)
    return scores, steps


def estimate_advantages(
    worker: LMWorker,
    cfg: RLConfig,
    b: Collected,
    scores: torch.Tensor,
    steps: StepRewards | None,
    values: torch.Tensor | None,
    kl_reward: torch.Tensor | None,
    reward_fn: RewardFn,
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """Advantages [B, T] by ``rl.advantage``, the critic's returns (GAE) and its diagnostics.

    Process rewards (docs/guides/architecture.md, 'Rewards'): each step's reward on its last token for
    the token-level estimators, GRPO with process supervision in place of any group estimator."""
    mask = b.rollout.response_mask
    if cfg.advantage in ("gae", "reinforce_plus_plus"):
        token_rewards = task_token_rewards(scores, steps, mask) + (
            kl_reward if kl_reward is not None else 0.0
        )
        if cfg.advantage == "reinforce_plus_plus":
            advantages, _ = get_advantage_estimator("reinforce_plus_plus")(
                token_rewards, mask, gamma=cfg.gamma
            )
            return advantages, None, {}
        lam = (
            length_adaptive_lambda(b.rollout.lengths, cfg.length_adaptive_alpha)
            if cfg.length_adaptive_alpha
            else cfg.lam
        )
        advantages, _ = gae_advantages(token_rewards, values, mask, gamma=cfg.gamma, lam=lam)
        _, returns = gae_advantages(token_rewards, values, mask, gamma=cfg.gamma, lam=cfg.lam_critic)
        return (
            advantages,
            returns,
            {"value_explained_variance": float(explained_variance(values, returns, mask))},
        )
    if steps is not None:
        advantages, _ = get_advantage_estimator("grpo_process")(
            steps.rewards, steps.end, steps.mask, response_mask=mask, group_ids=b.group_ids
        )
        return advantages, None, {}
    seq_scores = scores + (masked_sum(kl_reward, mask, dim=-1) if kl_reward is not None else 0.0)
    extra = (
        {"baseline_scores": greedy_baseline(worker, cfg, b, reward_fn)} if cfg.advantage == "remax" else {}
    )
    advantages, _ = get_advantage_estimator(cfg.advantage)(
        scores=seq_scores, response_mask=mask, group_ids=b.group_ids, **extra
    )
    return advantages, None, {}


def greedy_baseline(worker: LMWorker, cfg: RLConfig, b: Collected, reward_fn: RewardFn) -> torch.Tensor:
    """ReMax's baseline: the reward of a greedy decode of each prompt, repeated over its group."""
    greedy = worker.generate([p.prompt for p in b.problems], max_new_tokens=cfg.max_new_tokens, greedy=True)
    baseline = Scored(*reward_fn(b.problems, greedy)).rewards
    return baseline.repeat_interleave(cfg.group_size)


def value_pretrain_step(
    worker: LMWorker,
    pad_id: int,
    cfg: RLConfig,
    source: ProblemSource,
    reward_fn: RewardFn,
    seed: int,
) -> dict[str, float]:
    """VAPO value pretraining: fit the critic to Monte-Carlo returns (λ = 1) of the fixed policy."""
    b = collect(worker, pad_id, dataclasses.replace(cfg, dynamic_sampling=False), source, reward_fn, seed)
    mask = b.rollout.response_mask
    values = worker.values(b.rollout)
    token_rewards = task_token_rewards(b.rewards, b.steps, mask)
    _, returns = gae_advantages(token_rewards, values, mask, gamma=cfg.gamma, lam=1.0)
    m = worker.update_critic(b.rollout, old_values=values, returns=returns, cfg=cfg)
    return m | {"value_explained_variance": float(explained_variance(values, returns, mask))}
