"""Reward shaping and loss masking for over-long responses (DAPO, arXiv 2503.14476 §3.4)."""

from __future__ import annotations

from torch import Tensor


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO soft overlong punishment, added to the task reward: [B] -> [B].

    With L_max = ``max_len`` and the buffer L_cache = ``cache_len``:
        0                              if |y| ≤ L_max − L_cache
        ((L_max − L_cache) − |y|) / L_cache   if L_max − L_cache < |y| ≤ L_max
        −1                             if |y| > L_max
    The penalty grows linearly inside the buffer (reaching −1 at |y| = L_max), so the model learns to
    stop before truncation instead of being hit by a cliff.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    # One clamp covers all three cases: positive (short) -> 0, below −1 (past L_max) -> −1.
    return (((max_len - cache_len) - lengths.float()) / cache_len).clamp(-1.0, 0.0)


def overlong_filter_mask(truncated: Tensor, response_mask: Tensor) -> Tensor:
    """DAPO overlong filtering: zero the loss mask of truncated samples ([B] bool, [B,T] -> [B,T]).

    A truncated answer is not necessarily wrong, so its (typically negative) reward is noise; masking it
    out of the loss keeps that noise out of the gradient.
    """
    return response_mask * (~truncated.bool()).unsqueeze(-1).to(response_mask.dtype)
