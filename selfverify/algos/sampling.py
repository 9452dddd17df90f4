"""Group statistics for DAPO Dynamic Sampling (arXiv 2503.14476 §3.2).

Groups whose rewards are all equal give zero advantage under GRPO-style estimators, so they waste the
batch; Dynamic Sampling drops them and samples more prompts until the batch is full.
"""

from __future__ import annotations

from torch import Tensor

from selfverify.algos.utils import dense_group_index, group_min_max


def _group_min_max(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group minimum and maximum of ``scores``, and each response's dense group index."""
    group_index, num_groups = dense_group_index(group_ids)
    scores = scores if scores.is_floating_point() else scores.float()
    return *group_min_max(scores, group_index, num_groups), group_index


def group_has_variance(scores: Tensor, group_ids: Tensor) -> Tensor:
    """True [B] where the response's group has non-identical rewards (those Dynamic Sampling keeps)."""
    group_min, group_max, group_index = _group_min_max(scores, group_ids)
    return (group_max > group_min)[group_index]


def zero_variance_fraction(scores: Tensor, group_ids: Tensor) -> float:
    """Fraction of groups whose rewards are all equal (a group of one response counts as such)."""
    group_min, group_max, _ = _group_min_max(scores, group_ids)
    return (group_max == group_min).float().mean().item()
