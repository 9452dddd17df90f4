"""Overlong shaping (DAPO), dynamic-sampling group statistics and the masked/logit utilities."""

import math

import pytest
import torch
from torch.testing import assert_close

from selfverify.algos import (
    entropy_from_logits,
    explained_variance,
    group_has_variance,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    overlong_filter_mask,
    overlong_penalty,
    zero_variance_fraction,
)


def test_overlong_penalty_boundaries():
    # L_max = 20, L_cache = 4 -> free up to 16; (16 - l)/4 in (16, 20]; -1 beyond 20
    lengths = torch.tensor([5, 16, 17, 18, 20, 21, 100])
    expected = torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])
    assert_close(overlong_penalty(lengths, max_len=20, cache_len=4), expected)
    with pytest.raises(ValueError):
        overlong_penalty(lengths, max_len=20, cache_len=0)


def test_overlong_filter_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    out = overlong_filter_mask(torch.tensor([False, True, False]), mask)
    assert_close(out, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))


def test_dynamic_sampling_group_statistics():
    # group 0: (1, 1, 0) varies; group 1: a single response; group 2: (0.5, 0.5) all equal; group 9: single
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 2.0])
    group_ids = torch.tensor([0, 0, 0, 1, 2, 2, 9])
    keep = group_has_variance(scores, group_ids)
    assert keep.tolist() == [True, True, True, False, False, False, False]
    assert zero_variance_fraction(scores, group_ids) == pytest.approx(3 / 4)


def test_masked_statistics():
    x = torch.tensor([[1.0, 3.0], [5.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # masked values 1, 3, 5: mean 3, unbiased var (4 + 0 + 4)/2 = 4, std 2
    assert masked_mean(x, mask).item() == pytest.approx(3.0)
    assert_close(masked_mean(x, mask, dim=-1), torch.tensor([2.0, 5.0]))
    assert masked_var(x, mask).item() == pytest.approx(4.0)
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(8 / 3)
    assert_close(masked_whiten(x, mask), torch.tensor([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6, rtol=0)
    # shift_mean=False only rescales: (x - 3)/2 + 3
    assert_close(masked_whiten(x, mask, shift_mean=False), torch.tensor([[2.0, 3.0], [4.0, 0.0]]))
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0  # empty mask gives 0, not NaN


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 50.0]])
    mask = torch.tensor([[1.0, 1, 1, 1, 0]])
    assert explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    assert explained_variance(returns + 1, returns, mask).item() == pytest.approx(
        1.0
    )  # offset: Var[diff] = 0
    assert explained_variance(torch.zeros_like(returns), returns, mask).item() == pytest.approx(0.0)
    # values (4, 3, 2, 1): diff (-3, -1, 1, 3), Var 20/3; Var[returns] = 5/3 -> 1 - 4 = -3
    values = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    assert explained_variance(values, returns, mask).item() == pytest.approx(-3.0)


def test_entropy_and_logprobs_from_logits():
    # row 0: uniform over 2 -> H = ln 2; row 1: probs (1/4, 3/4) -> H = 0.25 ln 4 + 0.75 ln(4/3) = 0.562335
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    assert_close(entropy_from_logits(logits), torch.tensor([[math.log(2), 0.562335]]))
    assert_close(
        logprobs_from_logits(logits, torch.tensor([[0, 1]])), torch.tensor([[-math.log(2), math.log(0.75)]])
    )
    # large logits stay finite and exact
    big = torch.tensor([[[1000.0, 0.0]]])
    assert_close(logprobs_from_logits(big, torch.tensor([[1]])), torch.tensor([[-1000.0]]))
    assert entropy_from_logits(big).item() == pytest.approx(0.0, abs=1e-6)
    # bf16 logits are upcast: the result is float32
    assert logprobs_from_logits(logits.bfloat16(), torch.tensor([[0, 1]])).dtype == torch.float32
