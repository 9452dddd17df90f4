"""Advantage estimators: hand-computed cases and invariants
(docs/guides/architecture.md, 'The algorithm contract')."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from selfverify.algos import (
    ADVANTAGE_ESTIMATORS,
    gae_advantages,
    get_advantage_estimator,
    grpo_advantages,
    grpo_process_advantages,
    length_adaptive_lambda,
    step_rewards_to_token_rewards,
)


def lengths_to_mask(lengths: list[int], T: int) -> torch.Tensor:
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).float()


# Three groups with non-contiguous, interleaved ids: 7 -> scores (1, 0, 1), 3 -> (2, 4), 5 -> (0.5,).
SCORES = torch.tensor([1.0, 2.0, 0.0, 0.5, 4.0, 1.0])
GROUP_IDS = torch.tensor([7, 3, 7, 5, 3, 7])
MASK = lengths_to_mask([3, 2, 4, 1, 3, 2], T=4)


def test_registry_and_unknown_name():
    assert set(ADVANTAGE_ESTIMATORS) >= {"grpo", "drgrpo", "rloo", "remax", "gae", "grpo_process"}
    assert get_advantage_estimator("grpo") is grpo_advantages
    with pytest.raises(ValueError, match="grpo"):
        get_advantage_estimator("no-such-estimator")


def test_grpo_hand_case():
    # group 7: mean 2/3, deviations (1/3, -2/3, 1/3), unbiased var (1/9+4/9+1/9)/2 = 1/3, std 0.577350
    #   -> A = 0.577350, -1.154701, 0.577350
    # group 3: mean 3, deviations (-1, 1), std sqrt(2) -> A = -0.707107, 0.707107
    # group 5: a single response -> 0
    expected = torch.tensor([0.577350, -0.707107, -1.154701, 0.0, 0.707107, 0.577350])
    adv, ret = get_advantage_estimator("grpo")(SCORES, MASK, GROUP_IDS, eps=1e-6)
    assert_close(adv, expected[:, None] * MASK, atol=1e-5, rtol=0)
    assert_close(ret, adv)


def test_grpo_sums_to_zero_within_group():
    torch.manual_seed(0)
    scores = torch.rand(24)
    group_ids = torch.arange(24) % 4
    adv, _ = grpo_advantages(scores, torch.ones(24, 1), group_ids)
    for g in range(4):
        assert abs(adv[group_ids == g].sum().item()) < 1e-5
        # and the within-group (unbiased) std of the advantages is 1
        assert abs(adv[group_ids == g].std().item() - 1) < 1e-4


def test_drgrpo_hand_case():
    # r - group mean: group 7 mean 2/3 -> (1/3, -2/3, 1/3); group 3 mean 3 -> (-1, 1); group 5 -> 0
    expected = torch.tensor([1 / 3, -1.0, -2 / 3, 0.0, 1.0, 1 / 3])
    adv, _ = get_advantage_estimator("drgrpo")(SCORES, MASK, GROUP_IDS)
    assert_close(adv, expected[:, None] * MASK)


def test_rloo_hand_case():
    # group 7: 1 - mean(0, 1) = 0.5; 0 - mean(1, 1) = -1; 1 - mean(1, 0) = 0.5
    # group 3: 2 - 4 = -2; 4 - 2 = 2;  group 5 (size 1): 0
    expected = torch.tensor([0.5, -2.0, -1.0, 0.0, 2.0, 0.5])
    adv, _ = get_advantage_estimator("rloo")(SCORES, MASK, GROUP_IDS)
    assert_close(adv, expected[:, None] * MASK)


def test_rloo_equals_leave_one_out_loop():
    torch.manual_seed(1)
    scores = torch.randn(15)
    group_ids = torch.tensor([0, 1, 2] * 5)
    adv, _ = get_advantage_estimator("rloo")(scores, torch.ones(15, 1), group_ids)
    for i in range(15):
        others = [scores[j].item() for j in range(15) if j != i and group_ids[j] == group_ids[i]]
        assert adv[i, 0].item() == pytest.approx(scores[i].item() - sum(others) / len(others), abs=1e-5)


def test_remax_hand_case():
    scores = torch.tensor([1.0, 0.0, 0.5])
    baseline = torch.tensor([0.5, 0.5, 0.5])  # greedy-decode rewards
    mask = lengths_to_mask([2, 1, 3], T=3)
    adv, ret = get_advantage_estimator("remax")(scores, mask, torch.arange(3), baseline_scores=baseline)
    assert_close(adv, torch.tensor([[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert_close(ret, adv)


def test_reinforce_plus_plus_hand_case():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])
    mask = lengths_to_mask([3, 2], T=3)
    estimator = get_advantage_estimator("reinforce_plus_plus")
    # gamma = 1: returns-to-go (1, 1, 1) and (0.5, 0.5); over the 5 tokens mean 0.8, deviations
    # (0.2, 0.2, 0.2, -0.3, -0.3), unbiased var (3*0.04 + 2*0.09)/4 = 0.075, std 0.273861
    # -> whitened 0.2/0.273861 = 0.730297 and -0.3/0.273861 = -1.095445
    adv, ret = estimator(rewards, mask, gamma=1.0)
    assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.0]]))
    a, b = 0.730297, -1.095445
    assert_close(adv, torch.tensor([[a, a, a], [b, b, 0.0]]), atol=1e-5, rtol=0)
    # gamma = 0.5: (0.25, 0.5, 1) and (0.25, 0.5)
    _, ret = estimator(rewards, mask, gamma=0.5)
    assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [0.25, 0.5, 0.0]]))


def test_gae_hand_case_with_padding_and_per_sequence_lambda():
    nan = float("nan")  # garbage on padded positions must not leak into the result
    rewards = torch.tensor([[0.0, 0.0, 1.0, nan], [0.0, 1.0, nan, nan]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.6, 0.8, nan], [0.2, 0.4, nan, nan]], dtype=torch.float64)
    mask = lengths_to_mask([3, 2], T=4).double()
    # seq 0, gamma 0.9, lambda 0.5 (gamma*lambda = 0.45):
    #   d2 = 1 - 0.8 = 0.2; d1 = 0.9*0.8 - 0.6 = 0.12; d0 = 0.9*0.6 - 0.5 = 0.04
    #   A2 = 0.2; A1 = 0.12 + 0.45*0.2 = 0.21; A0 = 0.04 + 0.45*0.21 = 0.1345
    #   returns = A + V = (0.6345, 0.81, 1.0)
    # seq 1, gamma 0.9, lambda 1.0: d1 = 1 - 0.4 = 0.6; d0 = 0.9*0.4 - 0.2 = 0.16
    #   A1 = 0.6; A0 = 0.16 + 0.9*0.6 = 0.70; returns = (0.9, 1.0)
    adv, ret = get_advantage_estimator("gae")(
        rewards, values, mask, gamma=0.9, lam=torch.tensor([0.5, 1.0], dtype=torch.float64)
    )
    assert_close(adv, torch.tensor([[0.1345, 0.21, 0.2, 0.0], [0.70, 0.6, 0.0, 0.0]], dtype=torch.float64))
    assert_close(ret, torch.tensor([[0.6345, 0.81, 1.0, 0.0], [0.9, 1.0, 0.0, 0.0]], dtype=torch.float64))


def test_gae_lambda_one_gamma_one_is_return_to_go_minus_value():
    torch.manual_seed(2)
    rewards, values = torch.randn(5, 7), torch.randn(5, 7)
    lengths = [7, 3, 1, 5, 6]
    mask = lengths_to_mask(lengths, T=7)
    adv, ret = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    for i, n in enumerate(lengths):
        for t in range(n):
            assert adv[i, t].item() == pytest.approx(
                rewards[i, t:n].sum().item() - values[i, t].item(), abs=1e-5
            )
            assert ret[i, t].item() == pytest.approx(rewards[i, t:n].sum().item(), abs=1e-5)
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()


def test_gae_per_sequence_lambda_matches_scalar_runs():
    torch.manual_seed(3)
    rewards, values = torch.randn(3, 6), torch.randn(3, 6)
    mask = lengths_to_mask([6, 4, 2], T=6)
    lams = torch.tensor([0.3, 0.9, 1.0])
    adv, _ = gae_advantages(rewards, values, mask, gamma=0.95, lam=lams)
    for i in range(3):
        row, _ = gae_advantages(
            rewards[i : i + 1], values[i : i + 1], mask[i : i + 1], gamma=0.95, lam=lams[i].item()
        )
        assert_close(adv[i : i + 1], row)


def test_gae_does_not_backprop_into_values():
    values = torch.randn(2, 3, requires_grad=True)
    adv, ret = gae_advantages(torch.randn(2, 3), values, torch.ones(2, 3), gamma=1.0, lam=0.9)
    assert not adv.requires_grad and not ret.requires_grad


def test_length_adaptive_lambda():
    # lambda = 1 - 1/(0.05 * l): l=100 -> 0.8; l=1000 -> 0.98; l=20 -> 0; l=10 -> -1 and l=0 -> -inf,
    # both clamped to 0
    lam = length_adaptive_lambda(torch.tensor([100, 1000, 20, 10, 0]), alpha=0.05)
    assert_close(lam, torch.tensor([0.8, 0.98, 0.0, 0.0, 0.0]))


def test_step_rewards_to_token_rewards():
    step_rewards = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 99.0]])
    step_end = torch.tensor([[1, 3, 5], [1, 3, -1]])  # the padded step's end index is garbage
    step_mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    out = step_rewards_to_token_rewards(step_rewards, step_end, step_mask, 6)
    assert_close(out, torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]]))


def test_grpo_process_hand_case():
    # group 0: response 0 (6 tokens) has steps ending at tokens 1, 3, 5 with rewards 1, 0, 1;
    #          response 1 (4 tokens) has steps ending at 1, 3 with rewards 1, 1 (third step padded).
    #   R = {1, 0, 1, 1, 1}: mean 0.8, unbiased var (4*0.04 + 0.64)/4 = 0.2, std 0.447214
    #   r~(1) = 0.2/0.447214 = 0.447214, r~(0) = -0.8/0.447214 = -1.788854
    #   response 0: tokens 0-1 sum all three = -0.894427; tokens 2-3 = -1.341641; tokens 4-5 = 0.447214
    #   response 1: tokens 0-1 = 0.894427; tokens 2-3 = 0.447214; padding 0
    # group 1: response 2 (3 tokens) one step ending at 2 with reward 0.5;
    #          response 3 (3 tokens) steps ending at 0, 2 with rewards 0, 1.
    #   R = {0.5, 0, 1}: mean 0.5, var 0.5/2 = 0.25, std 0.5 -> r~ = 0, -1, 1
    #   response 2: tokens 0-2 = 0; response 3: token 0 = -1 + 1 = 0, tokens 1-2 = 1
    step_rewards = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 99.0], [0.5, 0.0, 0.0], [0.0, 1.0, 0.0]])
    step_end = torch.tensor([[1, 3, 5], [1, 3, -1], [2, -1, -1], [0, 2, -1]])
    step_mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]])
    mask = lengths_to_mask([6, 4, 3, 3], T=6)
    adv, ret = get_advantage_estimator("grpo_process")(
        step_rewards, step_end, step_mask, mask, torch.tensor([0, 0, 1, 1]), eps=1e-6
    )
    a, b, c, d, e = -0.894427, -1.341641, 0.447214, 0.894427, 0.447214
    expected = torch.tensor(
        [
            [a, a, b, b, c, c],
            [d, d, e, e, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        ]
    )
    assert_close(adv, expected, atol=1e-5, rtol=0)
    assert_close(ret, adv)


def test_grpo_process_one_step_per_response_equals_outcome_grpo():
    # With a single step ending at the last token, process supervision reduces to outcome GRPO.
    lengths = [3, 2, 4, 1, 3, 2]
    step_end = torch.tensor(lengths)[:, None] - 1
    adv, _ = grpo_process_advantages(SCORES[:, None], step_end, torch.ones(6, 1), MASK, GROUP_IDS)
    expected, _ = grpo_advantages(SCORES, MASK, GROUP_IDS)
    assert_close(adv, expected)


def test_scalar_estimators_zero_outside_mask():
    for name in ("grpo", "drgrpo", "rloo"):
        adv, ret = get_advantage_estimator(name)(SCORES, MASK, GROUP_IDS)
        assert (adv[MASK == 0] == 0).all() and (ret[MASK == 0] == 0).all(), name


# Exact zeros for groups without signal: any equal reward value, any group size, float32 and bfloat16.
_EQUAL_GROUPS = dict(
    value=st.floats(-10.0, 10.0, allow_nan=False, width=32),
    size=st.integers(1, 64),
    n_groups=st.integers(1, 4),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
@given(**_EQUAL_GROUPS)
def test_group_estimators_give_exact_zero_to_equal_rewards(name, value, size, n_groups, dtype):
    """Groups of equal rewards get advantage exactly 0, beside a group that has signal."""
    scores = torch.cat([torch.full((size * n_groups,), value), torch.tensor([0.0, 1.0])]).to(dtype)
    group_ids = torch.cat([torch.arange(n_groups).repeat_interleave(size), torch.tensor([99, 99])])
    adv, _ = get_advantage_estimator(name)(scores, torch.ones(len(scores), 3), group_ids)
    assert adv.dtype == torch.float32
    assert (adv[:-2] == 0).all()
    assert (adv[-2:, 0] != 0).all()


@given(**_EQUAL_GROUPS, steps=st.integers(1, 5))
def test_process_supervision_gives_exact_zero_to_equal_step_rewards(value, size, n_groups, dtype, steps):
    B = size * n_groups
    step_rewards = torch.full((B, steps), value).to(dtype)
    step_end = torch.arange(steps).repeat(B, 1) * 2
    adv, _ = grpo_process_advantages(
        step_rewards, step_end, torch.ones(B, steps), torch.ones(B, 2 * steps),
        torch.arange(n_groups).repeat_interleave(size),
    )  # fmt: skip
    assert (adv == 0).all()


def test_self_verification_rewards_of_the_issue_give_zero():
    """The reported cases: eight rewards of 0.88 (0.76 + 0.24·0.5) and sixteen of 0.76."""
    for value, size in ((0.76 + 0.24 * 0.5, 8), (0.76, 16)):
        adv, _ = grpo_advantages(torch.full((size,), value), torch.ones(size, 4), torch.zeros(size))
        assert (adv == 0).all()


@given(value=st.floats(-10.0, 10.0, allow_nan=False, width=32), B=st.integers(1, 64))
def test_batch_whitening_gives_exact_zero_to_equal_returns(value, B):
    token_rewards = torch.zeros(B, 3)
    token_rewards[:, -1] = value
    # Every token's return-to-go is the value (γ = 1): nothing to whiten.
    adv, returns = get_advantage_estimator("reinforce_plus_plus")(token_rewards, torch.ones(B, 3))
    assert (returns == value).all() and (adv == 0).all()
