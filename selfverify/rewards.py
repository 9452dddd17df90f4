"""Rewards: from ground-truth checks or verifier verdicts to the scores the estimators read."""

from __future__ import annotations

import torch

from selfverify.tasks import StepCheck


def outcome_rewards(checks: list[StepCheck]) -> torch.Tensor:
    """1 for a correct final answer, 0 otherwise."""
    return torch.tensor([float(c.correct) for c in checks])
