"""Rewards: from ground-truth checks or verifier verdicts to the scores the estimators read.

DeepSeekMath-V2 (2025) rewards, each a pure function of parsed judgments (docs/guides/architecture.md,
'Rewards').
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from selfverify.config.schema import SELF_VERIFY_ALPHA, SELF_VERIFY_BETA
from selfverify.tasks import StepCheck

# DeepSeekMath-V2's weights of the solution's and the self-evaluation's reward.


def outcome_rewards(checks: list[StepCheck]) -> torch.Tensor:
    """1 for a correct final answer, 0 otherwise."""
    return torch.tensor([float(c.correct) for c in checks])


def score_reward(predicted: float, label: float) -> float:
    """R_score(s′, s) = 1 − |s′ − s|."""
    return 1.0 - abs(predicted - label)


def verifier_reward(parsed: bool, predicted: float, label: float, meta: float) -> float:
    """R_V = R_format · R_score(s′, s) · R_meta: the analysis must parse, score the solution as its
    label does, and convince the meta-verifier that the issues it names are real."""
    return float(parsed) * score_reward(predicted, label) * meta


def meta_verifier_reward(parsed: bool, predicted: float, label: float) -> float:
    """R_MV = R_format · R_score(s′, s) against the meta label."""
    return float(parsed) * score_reward(predicted, label)


def shows_working(steps: Sequence[str]) -> bool:
    """Whether a solution Y shows its working: more than the answer line alone. A bare answer is not a
    proof, so :func:`self_verify_reward` gives it R_format = 0."""
    return len(steps) > 1


def self_verify_reward(
    formatted: bool,
    solution_score: float,
    self_score: float,
    meta: float,
    alpha: float = SELF_VERIFY_ALPHA,
    beta: float = SELF_VERIFY_BETA,
) -> float:
    """R = R_format(Y, Z) · (α·R_Y + β·R_Z), R_Z = R_score(s′, R_Y) · R_meta(Z): the verifier's score of
    the solution Y, plus a reward for the generator's own evaluation Z scoring Y as the verifier does
    with an analysis the meta-verifier finds faithful (DeepSeekMath-V2, arXiv:2511.22570, the proof
    generator's reward with self-verification; α = 0.76, β = 0.24).

    ``formatted`` is R_format(Y, Z): Z parses **and Y shows its working** (:func:`shows_working`). The
    paper's Y is a complete proof; with R_format read as Z's format alone, a bare answer honestly
    self-scored 0 earns β every time, and a generator collapses onto bare answers, whose groups have no
    variance to climb out with (docs/results/rewards.md)."""
    r_z = score_reward(self_score, solution_score) * meta
    return float(formatted) * (alpha * solution_score + beta * r_z)


def mix_step_rewards(
    step_scores: Sequence[Sequence[float]],
    outcome: Sequence[float],
    process_weight: float,
    outcome_weight: float,
) -> list[list[float]]:
    """Per-step rewards of a weighted mix: ``process_weight`` × the verifier's score of each step, plus
    ``outcome_weight`` × the outcome reward on the last step (a response without steps gets one step
    holding the outcome part)."""
    out = []
    for scores, reward in zip(step_scores, outcome, strict=True):
        steps = [process_weight * s for s in scores] or [0.0]
        steps[-1] += outcome_weight * reward
        out.append(steps)
    return out
