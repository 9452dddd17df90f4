"""Masked tensor statistics and logit helpers shared by the RL objectives.

Shapes: B = batch (responses), T = response tokens, V = vocabulary. ``mask`` is a float tensor of the
same shape as ``x`` (or broadcastable to it) with 1 on response tokens and 0 on padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over the positions where ``mask`` is 1 (all of them, or along ``dim``)."""
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the masked positions; 0 where the mask is empty (instead of NaN)."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over all masked positions (Bessel-corrected when ``unbiased``)."""
    centered = x - masked_mean(x, mask)
    var = masked_mean(centered**2, mask)
    if unbiased:
        n = mask.sum()
        var = var * n / (n - 1).clamp(min=1)
    return var


def dense_group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Each element's group as a dense id in [0, num_groups), and num_groups (ids may be any integers)."""
    _, group_index = torch.unique(group_ids, return_inverse=True)
    return group_index, int(group_index.max()) + 1


def group_min_max(values: Tensor, group_index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """Per-group minimum and maximum of ``values`` ([num_groups] each); ``group_index`` holds each
    element's dense group id in [0, num_groups)."""
    empty = values.new_zeros(num_groups)
    return (
        empty.scatter_reduce(0, group_index, values, "amin", include_self=False),
        empty.scatter_reduce(0, group_index, values, "amax", include_self=False),
    )


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """Normalise ``x`` to unit variance over the masked positions; zero outside the mask.

    ``shift_mean=False`` keeps the original mean (only rescales), as in PPO-style reward whitening.
    Equal values whiten to exactly 0: their float mean misses them by an ulp, which the division by a
    near-zero spread would blow up into a spurious signal.
    """
    mean = masked_mean(x, mask)
    valid = mask.bool().expand_as(x)
    spread = torch.where(valid, x, -torch.inf).amax() - torch.where(valid, x, torch.inf).amin()
    centred = torch.where(spread > 0, x - mean, 0.0)
    whitened = centred * torch.rsqrt(masked_var(x, mask) + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """Critic diagnostic 1 − Var[returns − values] / Var[returns] over the masked tokens.

    1 = perfect value predictions, 0 = no better than a constant, < 0 = worse than a constant.
    """
    var_returns = masked_var(returns, mask)
    return 1 - masked_var(returns - values, mask) / var_returns.clamp(min=1e-8)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy H = logsumexp(z) − Σ_v softmax(z)_v·z_v of each token's distribution: [B,T,V] -> [B,T]."""
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def logprobs_from_logits(logits: Tensor, tokens: Tensor) -> Tensor:
    """log π(token) from logits [B,T,V] and token ids [B,T] -> [B,T].

    Half-precision logits are upcast first: bf16 log_softmax loses too much precision for the ratio
    exp(logπ − logπ_old) that every policy loss depends on.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
