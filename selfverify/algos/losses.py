"""Policy, value, KL and auxiliary losses, as pure functions over padded tensors
(docs/guides/architecture.md, 'The algorithm contract').

Per-token losses [B,T] are reduced to a scalar by ``aggregate``. Pass the *global* token/sequence
counts of the whole mini-batch to every micro-batch call: the micro-batch losses then add up to the
mini-batch loss, so gradient accumulation gives the same gradient as one big batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from selfverify.algos.utils import masked_mean, masked_sum

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "k2", "k3")
K3_LOG_RATIO_BOUND, K3_VALUE_BOUND = 20.0, 10.0  # verl's low_var_kl: see kl_penalty


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_constant: float | None = None,
) -> Tensor:
    """Reduce a per-token loss [B,T] to a scalar.

    - ``token-mean``:              Σ_i Σ_t loss_it / num_tokens   (DAPO token-level loss, arXiv 2503.14476)
    - ``seq-mean-token-mean``:     Σ_i mean_t loss_it / num_seqs  (original GRPO, arXiv 2402.03300)
    - ``seq-mean-token-sum``:      Σ_i Σ_t loss_it / num_seqs
    - ``seq-mean-token-sum-norm``: Σ_i Σ_t loss_it / (num_seqs · norm_constant)  (Dr.GRPO, arXiv 2503.20783;
      norm_constant = a constant such as the generation budget / max response length)

    Sums run over masked tokens only. ``num_tokens`` / ``num_seqs`` default to this call's own counts:
    mask.sum() and the number of sequences with at least one masked token (a fully masked sequence,
    e.g. an overlong-filtered one, is not counted). For micro-batching, pass the counts of the whole
    mini-batch, computed the same way.
    """
    if mode == "token-mean":
        if num_tokens is None:
            num_tokens = mask.sum().clamp(min=1)
        return masked_sum(loss_mat, mask) / num_tokens
    if num_seqs is None:
        num_seqs = (mask.sum(-1) > 0).sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        return masked_mean(loss_mat, mask, dim=-1).sum() / num_seqs
    if mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, mask) / num_seqs
    if mode == "seq-mean-token-sum-norm":
        if norm_constant is None:
            raise ValueError(
                "agg mode 'seq-mean-token-sum-norm' needs norm_constant (e.g. max response length)"
            )
        return masked_sum(loss_mat, mask) / (num_seqs * norm_constant)
    raise ValueError(f"unknown aggregation mode {mode!r}; known: {list(AGG_MODES)}")


PolicyLossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator adding a policy loss to ``POLICY_LOSSES`` under ``name``."""

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLossFn:
    """Look up a policy loss by name; unknown names raise ``ValueError`` listing the known ones."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; known: {sorted(POLICY_LOSSES)}")
    return POLICY_LOSSES[name]


def _clipped_surrogate(ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """Per-token −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A), written as a max of the negated terms."""
    return torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_low, 1 + clip_high))


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    agg_mode: str,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_constant: float | None = None,
    dual_clip_c: float | None = None,
    **_other_losses_options: object,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (arXiv 1707.06347) with decoupled clip ranges (Clip-Higher, DAPO 2503.14476).

    ρ_t = π_θ(y_t)/π_old(y_t);  loss_t = −min(ρ_t·A_t, clip(ρ_t, 1−ε_low, 1+ε_high)·A_t).
    Symmetric PPO: ε_low = ε_high = 0.2; Clip-Higher: ε_low = 0.2, ε_high = 0.28, which lets
    low-probability tokens with A > 0 grow further and keeps entropy from collapsing.
    Dual-clip (arXiv 1912.09729), if ``dual_clip_c`` (> 1) is set: for A_t < 0,
    loss_t = min(loss_t, −c·A_t), bounding the loss of tokens whose ratio has exploded.
    Unknown keyword options (meant for other losses) are ignored so every loss can be called alike.

    Metrics: ``clipfrac_low`` (A<0 and ρ<1−ε_low), ``clipfrac_high`` (A>0 and ρ>1+ε_high),
    ``ppo_kl`` = masked mean of log π_old − log π, and ``clipfrac_dual`` when dual-clip is on.
    """
    log_ratio = logprob - old_logprob
    # Clamp before exp: a log-ratio of a few hundred (stale or garbage old logprobs) would overflow to inf.
    ratio = torch.exp(log_ratio.clamp(-20.0, 20.0))
    loss_mat = _clipped_surrogate(ratio, advantages, clip_low, clip_high)
    metrics = {
        "clipfrac_low": masked_mean(((advantages < 0) & (ratio < 1 - clip_low)).float(), response_mask),
        "clipfrac_high": masked_mean(((advantages > 0) & (ratio > 1 + clip_high)).float(), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
    }
    if dual_clip_c is not None:
        if dual_clip_c <= 1:
            raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
        dual_bound = -dual_clip_c * advantages
        dual_active = (advantages < 0) & (loss_mat > dual_bound)
        loss_mat = torch.where(dual_active, dual_bound, loss_mat)
        metrics["clipfrac_dual"] = masked_mean(dual_active.float(), response_mask)
    loss = aggregate(
        loss_mat,
        response_mask,
        agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        norm_constant=norm_constant,
    )
    return loss, {k: v.detach() for k, v in metrics.items()}


@register_policy_loss("gspo")
def gspo_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    agg_mode: str,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_constant: float | None = None,
    **_other_losses_options: object,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Group Sequence Policy Optimization, GSPO-token form (arXiv 2507.18071).

    s_i = exp(mean_t (log π_θ(y_t) − log π_old(y_t))), the geometric-mean sequence ratio.
    Per token s_i,t = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]: its value is s_i, its gradient s_i·∇log π_θ(y_t).
    loss_t = −min(s_i,t·A_t, clip(s_i,t, 1−ε_low, 1+ε_high)·A_t), so the whole sequence is clipped
    together. ε are small (paper: 3e-4 / 4e-4) and come from the config. The paper's objective is
    agg_mode ``seq-mean-token-mean``. Unknown keyword options are ignored.

    Metrics: ``clipfrac_low`` / ``clipfrac_high`` as fractions of sequences (sequence advantage = mean
    token advantage), ``ppo_kl`` = masked mean of log π_old − log π over tokens.
    """
    log_ratio = logprob - old_logprob
    seq_log_ratio = masked_mean(log_ratio, response_mask, dim=-1)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + logprob - logprob.detach()
    # Cap the log-ratio (as verl's GSPO does) so exp cannot overflow for a sequence that drifted far.
    ratio = torch.exp(token_log_ratio.clamp(max=10.0))
    loss_mat = _clipped_surrogate(ratio, advantages, clip_low, clip_high)

    seq_ratio = torch.exp(seq_log_ratio.detach())
    seq_advantages = masked_mean(advantages, response_mask, dim=-1)
    has_tokens = (response_mask.sum(-1) > 0).float()
    metrics = {
        "clipfrac_low": masked_mean(((seq_advantages < 0) & (seq_ratio < 1 - clip_low)).float(), has_tokens),
        "clipfrac_high": masked_mean(
            ((seq_advantages > 0) & (seq_ratio > 1 + clip_high)).float(), has_tokens
        ),
        "ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
    }
    loss = aggregate(
        loss_mat,
        response_mask,
        agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        norm_constant=norm_constant,
    )
    return loss, metrics


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, kind: str) -> Tensor:
    """Per-token estimator of KL(π_θ ‖ π_ref) from sampled tokens (Schulman, "Approximating KL
    Divergence", 2020; k3 as used by GRPO, arXiv 2402.03300 eq. 4). Returns [B,T]; the caller masks.

    - ``k1`` = log π − log π_ref                       (unbiased, high variance, can be negative)
    - ``k2`` = ½ (log π − log π_ref)²                  (biased, low variance, ≥ 0)
    - ``k3`` = π_ref/π − log(π_ref/π) − 1              (unbiased, low variance, ≥ 0)
    k3 is bounded as verl's ``low_var_kl`` is: the log ratio clamped to [−20, 20] so exp stays finite,
    then the value itself clamped to at most 10. Clamping the log ratio alone left one token that π
    nearly rules out (π_ref/π huge) worth up to e^10 ≈ 22,000, outweighing the whole batch's KL term;
    bounded, it adds at most 10 and no gradient.
    """
    log_ratio = logprob - ref_logprob
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        ref_log_ratio = (-log_ratio).clamp(-K3_LOG_RATIO_BOUND, K3_LOG_RATIO_BOUND)
        return (torch.exp(ref_log_ratio) - ref_log_ratio - 1).clamp(max=K3_VALUE_BOUND)
    raise ValueError(f"unknown KL estimator {kind!r}; known: {list(KL_KINDS)}")


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    *,
    clip_range: float,
    agg_mode: str,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_constant: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped critic loss (PPO, arXiv 1707.06347; OpenAI baselines' value clipping).

    loss_t = ½ · max((V_t − R_t)², (clip(V_t, V_old,t − ε, V_old,t + ε) − R_t)²).
    The pessimistic max keeps the critic from moving more than ε away from its rollout-time values
    in a way that would lower the loss. Metric ``vf_clipfrac``: fraction of tokens where the clipped
    term is the larger one (the gradient through V_t is then cut).
    """
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    unclipped_loss = (values - returns) ** 2
    clipped_loss = (clipped - returns) ** 2
    loss_mat = 0.5 * torch.maximum(unclipped_loss, clipped_loss)
    loss = aggregate(
        loss_mat,
        response_mask,
        agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        norm_constant=norm_constant,
    )
    vf_clipfrac = masked_mean((clipped_loss > unclipped_loss).float(), response_mask)
    return loss, {"vf_clipfrac": vf_clipfrac.detach()}


def positive_lm_loss(
    logprob: Tensor,
    response_mask: Tensor,
    is_positive: Tensor,
    *,
    agg_mode: str = "token-mean",
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_constant: float | None = None,
) -> Tensor:
    """VAPO positive-example LM loss (arXiv 2504.05118 §5, eq. 10): NLL on correct samples only.

    L = −(1 / Σ_{i∈P} |y_i|) Σ_{i∈P} Σ_t log π_θ(y_t),  P = responses with ``is_positive``.
    Normaliser: with the default ``token-mean``, the number of response tokens of the *positive*
    samples (as in the paper), not of the whole batch — so the loss scale does not depend on the
    accuracy of the batch. For micro-batching pass ``num_tokens`` = the positive-sample token count of
    the whole mini-batch (``num_seqs`` = the number of positive samples for seq-* modes). A batch
    without positive samples gives 0. The trainer adds μ·L (μ ≈ 0.1) to the policy loss.
    """
    positive_mask = response_mask * is_positive.unsqueeze(-1).to(response_mask.dtype)
    return aggregate(
        -logprob,
        positive_mask,
        agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        norm_constant=norm_constant,
    )
