"""Advantage estimators, as pure functions over padded tensors
(docs/guides/architecture.md, 'The algorithm contract').

Every estimator returns ``(advantages [B,T], returns [B,T])``, zero outside ``response_mask``.
Scalar-reward estimators share the call ``fn(scores [B], response_mask [B,T], group_ids [B], **kw)``
(responses with equal group id were sampled for the same prompt); token-reward estimators take
``token_rewards [B,T]`` instead. Advantages are regression/policy-gradient *targets*, so every
estimator runs under ``torch.no_grad()``: no gradient may flow back into the critic or the rewards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from selfverify.algos.utils import dense_group_index, group_min_max, masked_whiten

AdvantageFn = Callable[..., tuple[Tensor, Tensor]]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator adding an estimator to ``ADVANTAGE_ESTIMATORS`` under ``name``."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageFn:
    """Look up an estimator by name; unknown names raise ``ValueError`` listing the known ones."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]


def _as_float(x: Tensor) -> Tensor:
    """Integers and half precision to float32: group statistics in bfloat16 lose the ratio's precision."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _group_stats(values: Tensor, group_index: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per element: its deviation from its group's mean, the group's unbiased std and its size.

    ``group_index`` holds dense ids in [0, num_groups). A group whose values are all equal gets deviation
    and std exactly 0, whatever the value: a float mean is not exact (eight float32 0.88s average to
    0.88 plus an ulp), and that residue divided by (std + eps) would be a spurious advantage of about
    −0.06 on a prompt that carries no signal. A group of one element is such a group.
    """
    zeros = values.new_zeros(num_groups)
    counts = zeros.index_add(0, group_index, torch.ones_like(values))
    mean = (zeros.index_add(0, group_index, values) / counts)[group_index]
    low, high = group_min_max(values, group_index, num_groups)
    deviation = torch.where((low == high)[group_index], 0.0, values - mean)
    n = counts[group_index]
    # Two passes (mean, then squared deviations) for numerical stability.
    sq_dev = zeros.index_add(0, group_index, deviation**2)[group_index]
    return deviation, (sq_dev / (n - 1).clamp(min=1)).sqrt(), n


def _scalar_group_stats(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return _group_stats(scores, *dense_group_index(group_ids))


def _broadcast(seq_advantages: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Spread one advantage per sequence over its response tokens; returns = advantages."""
    advantages = seq_advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_advantage("grpo")
@torch.no_grad()
def grpo_advantages(
    scores: Tensor, response_mask: Tensor, group_ids: Tensor, *, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """GRPO outcome advantage (DeepSeekMath, arXiv 2402.03300 §4.1.2).

    A_i = (r_i − mean_group r) / (std_group r + eps), std unbiased (torch.std default), broadcast over
    the response tokens. A group whose rewards are all equal (a group of size 1 among them) gets
    advantage exactly 0.
    """
    deviation, std, _ = _scalar_group_stats(_as_float(scores), group_ids)
    return _broadcast(deviation / (std + eps), response_mask)


@register_advantage("drgrpo")
@torch.no_grad()
def drgrpo_advantages(scores: Tensor, response_mask: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Dr.GRPO advantage (Understanding R1-Zero-Like Training, arXiv 2503.20783).

    A_i = r_i − mean_group r. Dropping GRPO's std division removes its question-difficulty bias; pair
    with agg_mode ``seq-mean-token-sum-norm`` to also remove the length bias.
    """
    deviation, _, _ = _scalar_group_stats(_as_float(scores), group_ids)
    return _broadcast(deviation, response_mask)


@register_advantage("rloo")
@torch.no_grad()
def rloo_advantages(scores: Tensor, response_mask: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """RLOO advantage (Back to Basics: REINFORCE-style optimisation, arXiv 2402.14740).

    A_i = r_i − mean_{j≠i} r_j = G/(G−1)·(r_i − mean_group r): the leave-one-out baseline does not
    depend on r_i, so the estimator is unbiased. A group of size 1 gets advantage 0.
    """
    deviation, _, n = _scalar_group_stats(_as_float(scores), group_ids)
    seq_advantages = n / (n - 1).clamp(min=1) * deviation
    return _broadcast(seq_advantages, response_mask)


@register_advantage("remax")
@torch.no_grad()
def remax_advantages(
    scores: Tensor, response_mask: Tensor, group_ids: Tensor | None = None, *, baseline_scores: Tensor
) -> tuple[Tensor, Tensor]:
    """ReMax advantage (arXiv 2310.10505): A_i = r_i − b_i.

    b_i = ``baseline_scores[i]``, the reward of a greedy decode of the same prompt. ``group_ids`` is
    accepted (and unused) so every scalar-reward estimator can be called the same way.
    """
    return _broadcast(_as_float(scores) - baseline_scores, response_mask)


def _discounted_returns(token_rewards: Tensor, response_mask: Tensor, gamma: float) -> Tensor:
    """Return-to-go G_t = Σ_l γ^l r_{t+l} over response tokens; masked positions are skipped."""
    valid = response_mask.bool()
    returns = torch.zeros_like(token_rewards)
    running = token_rewards.new_zeros(token_rewards.shape[0])
    for t in reversed(range(token_rewards.shape[1])):
        running = torch.where(valid[:, t], token_rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return returns * response_mask


@register_advantage("reinforce_plus_plus")
@torch.no_grad()
def reinforce_plus_plus_advantages(
    token_rewards: Tensor, response_mask: Tensor, *, gamma: float = 1.0
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ advantage (arXiv 2501.03262).

    G_t = Σ_l γ^l r_{t+l} (return-to-go of the token rewards, KL penalty already folded in by the
    caller); A = whiten(G) over all response tokens of the batch. Returns = G.
    """
    returns = _discounted_returns(token_rewards, response_mask, gamma)
    return masked_whiten(returns, response_mask), returns


@register_advantage("gae")
@torch.no_grad()
def gae_advantages(
    token_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float | Tensor = 1.0,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al., arXiv 1506.02438), used by PPO and VAPO.

    δ_t = r_t + γ·V_{t+1} − V_t,  A_t = Σ_l (γλ)^l δ_{t+l},  returns = A + V,
    with V = 0 after the last response token. ``lam`` is a float or a per-sequence tensor [B] (VAPO's
    length-adaptive λ, see ``length_adaptive_lambda``). Padded positions are skipped, not treated as
    steps, so right padding (or a masked span inside the response) does not change the result. No
    whitening here: use ``utils.masked_whiten`` on the advantages if wanted.
    """
    valid = response_mask.bool()
    lam = torch.as_tensor(lam, dtype=values.dtype, device=values.device)
    advantages = torch.zeros_like(values)
    next_value = values.new_zeros(values.shape[0])
    next_advantage = values.new_zeros(values.shape[0])
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        # torch.where (not multiplication by the mask) so garbage/NaN values on padding cannot leak.
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        next_advantage = torch.where(valid[:, t], advantage, next_advantage)
        advantages[:, t] = next_advantage
    advantages = torch.where(valid, advantages, 0.0)
    returns = torch.where(valid, advantages + values, 0.0)
    return advantages, returns


def length_adaptive_lambda(lengths: Tensor, alpha: float = 0.05) -> Tensor:
    """VAPO length-adaptive GAE λ (arXiv 2504.05118 §4.2): λ = 1 − 1/(α·l), clamped to [0, 1].

    Long responses get λ close to 1 so the terminal reward reaches their early tokens without being
    discounted away; short ones get a lower-variance, more bootstrapped estimate.
    """
    return (1 - 1 / (alpha * _as_float(lengths))).clamp(0.0, 1.0)


def step_rewards_to_token_rewards(
    step_rewards: Tensor, step_end: Tensor, step_mask: Tensor, T: int
) -> Tensor:
    """Place each step's reward on the step's last token: [B,S] -> [B,T] (for GAE-type estimators).

    ``step_end[b, k]`` is the index (within the response) of the last token of step k; padded steps
    (``step_mask`` 0) contribute nothing and their ``step_end`` may be anything.
    """
    valid = step_mask.bool()
    index = torch.where(valid, step_end, 0)
    rewards = torch.where(valid, _as_float(step_rewards), 0.0)
    return rewards.new_zeros(step_rewards.shape[0], T).scatter_add(1, index, rewards)


@register_advantage("grpo_process")
@torch.no_grad()
def grpo_process_advantages(
    step_rewards: Tensor,
    step_end: Tensor,
    step_mask: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GRPO with process supervision (DeepSeekMath, arXiv 2402.03300 §4.1.3).

    Step k of response i has reward r_i^k. All step rewards of a group form one set R:
    r̃ = (r − mean R) / (std R + eps) (unbiased std); the advantage of token t is the sum of r̃ over the
    steps that end at or after t:  A_t = Σ_{k: end_k ≥ t} r̃^k.  Returns = advantages.
    Tokens after the last step's end get 0; a group whose step rewards are all equal gets exactly 0.
    """
    valid = step_mask.bool()
    group_index, num_groups = dense_group_index(group_ids)
    step_group = group_index.unsqueeze(-1).expand_as(step_end)[valid]
    rewards = _as_float(step_rewards)[valid]
    deviation, std, _ = _group_stats(rewards, step_group, num_groups)
    normalised = torch.zeros_like(_as_float(step_rewards))
    normalised[valid] = deviation / (std + eps)
    # Sum over steps ending at or after t = reverse cumulative sum of the rewards placed on end tokens.
    token_rewards = step_rewards_to_token_rewards(normalised, step_end, step_mask, response_mask.shape[1])
    advantages = token_rewards.flip(-1).cumsum(-1).flip(-1) * response_mask
    return advantages, advantages
