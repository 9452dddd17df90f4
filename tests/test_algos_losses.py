"""Losses and aggregation: hand-computed cases, clipping semantics, micro-batch invariance
(docs/guides/architecture.md, 'The algorithm contract')."""

import math

import pytest
import torch
from torch.testing import assert_close

from selfverify.algos import (
    AGG_MODES,
    POLICY_LOSSES,
    aggregate,
    get_policy_loss,
    gspo_loss,
    kl_penalty,
    positive_lm_loss,
    ppo_clip_loss,
    value_loss,
)

LN = math.log


def lengths_to_mask(lengths: list[int], T: int) -> torch.Tensor:
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).double()


def global_counts(mask: torch.Tensor) -> dict:
    return {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}


# --- aggregate


def test_aggregate_hand_case():
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # masked row sums 3 (2 tokens) and 15 (3 tokens)
    assert aggregate(loss_mat, mask, "token-mean").item() == pytest.approx(18 / 5)
    assert aggregate(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 5.0) / 2)
    assert aggregate(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx(18 / 2)
    assert aggregate(loss_mat, mask, "seq-mean-token-sum-norm", norm_constant=4).item() == pytest.approx(
        18 / 8
    )
    # explicit global counts replace the local ones
    assert aggregate(loss_mat, mask, "token-mean", num_tokens=10).item() == pytest.approx(1.8)
    assert aggregate(loss_mat, mask, "seq-mean-token-sum", num_seqs=6).item() == pytest.approx(3.0)
    # a fully masked sequence is not counted in the default num_seqs
    assert aggregate(loss_mat, torch.tensor([[0.0, 0, 0], [1, 1, 1]]), "seq-mean-token-sum").item() == 15.0


def test_aggregate_errors():
    x, m = torch.ones(1, 2), torch.ones(1, 2)
    with pytest.raises(ValueError, match="norm_constant"):
        aggregate(x, m, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(x, m, "mean")


# --- ppo_clip


def test_registry():
    assert get_policy_loss("ppo_clip") is ppo_clip_loss and get_policy_loss("gspo") is gspo_loss
    assert set(POLICY_LOSSES) >= {"ppo_clip", "gspo"}
    with pytest.raises(ValueError, match="ppo_clip"):
        get_policy_loss("nope")


def _ppo_case():
    # five response tokens + one pad; ratios and advantages:
    #   t0: rho 1.5,  A +1 -> min(1.5, 1.28)   = 1.28  -> loss -1.28 (upper clip, A > 0)
    #   t1: rho 0.5,  A +1 -> min(0.5, 0.8)    = 0.5   -> loss -0.5  (unclipped: A > 0 on the low side)
    #   t2: rho 0.5,  A -1 -> min(-0.5, -0.8)  = -0.8  -> loss  0.8  (lower clip, A < 0)
    #   t3: rho 1.5,  A -1 -> min(-1.5, -1.28) = -1.5  -> loss  1.5  (unclipped: A < 0 on the high side)
    #   t4: rho 1.25, A +2 -> 1.25 < 1.28, unclipped   -> loss -2.5
    ratios = [1.5, 0.5, 0.5, 1.5, 1.25, 1.0]
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.5, -2.0]], dtype=torch.float64)
    logprob = (old + torch.tensor([[LN(r) for r in ratios]], dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 2.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 1, 1, 1, 0]], dtype=torch.float64)
    return logprob, old, adv, mask


def test_ppo_clip_hand_case_clip_higher():
    logprob, old, adv, mask = _ppo_case()
    loss, metrics = ppo_clip_loss(
        logprob, old, adv, mask, clip_low=0.2, clip_high=0.28, agg_mode="token-mean"
    )
    # token-mean: (-1.28 - 0.5 + 0.8 + 1.5 - 2.5) / 5 = -1.98 / 5
    assert loss.item() == pytest.approx(-0.396)
    assert metrics["clipfrac_low"].item() == pytest.approx(0.2)  # t2
    assert metrics["clipfrac_high"].item() == pytest.approx(0.2)  # t0
    # ppo_kl = -mean(log rho) = -(2 ln1.5 + 2 ln0.5 + ln1.25) / 5 = 0.070444
    assert metrics["ppo_kl"].item() == pytest.approx(0.070444, abs=1e-6)
    # d loss / d logprob_t = -A_t * rho_t / 5 on unclipped tokens, 0 on clipped ones and padding
    loss.backward()
    expected = torch.tensor([[0.0, -0.5 / 5, 0.0, 1.5 / 5, -2.5 / 5, 0.0]], dtype=torch.float64)
    assert_close(logprob.grad, expected)


def test_clip_higher_only_widens_the_upper_bound():
    logprob, old, adv, mask = _ppo_case()
    sym_loss, _ = ppo_clip_loss(logprob, old, adv, mask, clip_low=0.2, clip_high=0.2, agg_mode="token-mean")
    (grad_sym,) = torch.autograd.grad(sym_loss, logprob)
    higher_loss, _ = ppo_clip_loss(
        logprob, old, adv, mask, clip_low=0.2, clip_high=0.28, agg_mode="token-mean"
    )
    (grad_higher,) = torch.autograd.grad(higher_loss, logprob)
    # t4 (A>0, rho 1.25) is clipped at 1.2 (loss -2.4, no gradient) but not at 1.28 (gradient -2.5/5)
    assert sym_loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 1.5 - 2.4) / 5)
    assert grad_sym[0, 4].item() == 0.0 and grad_higher[0, 4].item() == pytest.approx(-0.5)
    # every other token behaves identically: the lower bound and the A<0 side are untouched
    keep = [0, 1, 2, 3, 5]
    assert_close(grad_sym[0, keep], torch.tensor([0.0, -0.1, 0.0, 0.3, 0.0], dtype=torch.float64))
    assert_close(grad_higher[0, keep], grad_sym[0, keep])


def test_ppo_dual_clip():
    # A=-1, rho=5: standard loss -min(-5, -1.28) = 5, dual-clip bound -c*A = 3 -> 3 (no gradient)
    # A=-1, rho=2: loss 2 < 3, unchanged;   A=+1, rho=5: upper clip -1.28, dual-clip does not apply
    old = torch.zeros(1, 3, dtype=torch.float64)
    logprob = torch.tensor([[LN(5.0), LN(2.0), LN(5.0)]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[-1.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    loss, metrics = ppo_clip_loss(
        logprob, old, adv, mask, clip_low=0.2, clip_high=0.28, agg_mode="token-mean", dual_clip_c=3.0
    )
    assert loss.item() == pytest.approx((3.0 + 2.0 - 1.28) / 3)
    assert metrics["clipfrac_dual"].item() == pytest.approx(1 / 3)
    loss.backward()
    assert_close(logprob.grad, torch.tensor([[0.0, 2.0 / 3, 0.0]], dtype=torch.float64))
    with pytest.raises(ValueError):
        ppo_clip_loss(
            logprob, old, adv, mask, clip_low=0.2, clip_high=0.2, agg_mode="token-mean", dual_clip_c=1
        )


@pytest.mark.parametrize("agg_mode", AGG_MODES)
def test_ppo_ratio_one_is_plain_policy_gradient(agg_mode):
    torch.manual_seed(0)
    mask = lengths_to_mask([5, 2, 4], T=5)
    old = torch.randn(3, 5, dtype=torch.float64)
    adv = torch.randn(3, 5, dtype=torch.float64)
    logprob = old.clone().requires_grad_()
    loss, metrics = ppo_clip_loss(
        logprob, old, adv, mask, clip_low=0.2, clip_high=0.28, agg_mode=agg_mode, norm_constant=8
    )
    (grad,) = torch.autograd.grad(loss, logprob)
    # the plain policy gradient -A * grad log pi, aggregated the same way
    plain = aggregate(-adv * logprob, mask, agg_mode, norm_constant=8)
    (expected,) = torch.autograd.grad(plain, logprob)
    assert_close(grad, expected)
    assert_close(loss, aggregate(-adv, mask, agg_mode, norm_constant=8))
    assert metrics["clipfrac_low"].item() == metrics["clipfrac_high"].item() == metrics["ppo_kl"].item() == 0


# --- gspo


def _gspo_case():
    # four sequences, clip_low 3e-4, clip_high 4e-4 (1 - 3e-4 = 0.9997, 1 + 4e-4 = 1.0004):
    #   seq 0: log ratios (0.001, -0.001) -> s = 1            A +1 -> unclipped, token loss -1
    #   seq 1: log ratios (0.002, 0)      -> s = e^0.001      A +1 -> clipped at 1.0004, loss -1.0004
    #   seq 2: log ratios (-0.001 x 3)    -> s = e^-0.001     A -1 -> clipped at 0.9997, loss 0.9997
    #   seq 3: log ratio  (0.001)         -> s = e^0.001      A -1 -> unclipped, loss e^0.001 = 1.0010005
    log_ratio = torch.tensor(
        [[0.001, -0.001, 0.0], [0.002, 0.0, 0.0], [-0.001, -0.001, -0.001], [0.001, 0.0, 0.0]],
        dtype=torch.float64,
    )
    mask = lengths_to_mask([2, 2, 3, 1], T=3)
    old = -torch.rand(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logprob = (old + log_ratio * mask).requires_grad_()
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)[:, None] * mask
    return logprob, old, adv, mask


def test_gspo_hand_case():
    logprob, old, adv, mask = _gspo_case()
    loss, metrics = gspo_loss(
        logprob, old, adv, mask, clip_low=3e-4, clip_high=4e-4, agg_mode="seq-mean-token-mean"
    )
    e = math.exp(0.001)  # 1.0010005
    assert loss.item() == pytest.approx((-1.0 - 1.0004 + 0.9997 + e) / 4, abs=1e-12)
    assert metrics["clipfrac_high"].item() == pytest.approx(0.25)  # seq 1
    assert metrics["clipfrac_low"].item() == pytest.approx(0.25)  # seq 2
    # gradient per token: -A * s / |y_i| / 4 on unclipped sequences, 0 on clipped ones
    loss.backward()
    expected = torch.tensor(
        [[-1 / 8, -1 / 8, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [e / 4, 0.0, 0.0]], dtype=torch.float64
    )
    assert_close(logprob.grad, expected)


def test_gspo_token_form_matches_sequence_objective():
    # GSPO paper: J = 1/G sum_i min(s_i A_i, clip(s_i) A_i) with s_i = exp(mean_t log rho_t).
    torch.manual_seed(4)
    mask = lengths_to_mask([4, 2, 5, 3], T=5)
    old = -torch.rand(4, 5, dtype=torch.float64)
    logprob = (old + 0.002 * torch.randn(4, 5, dtype=torch.float64)).requires_grad_()
    seq_adv = torch.randn(4, dtype=torch.float64)
    loss, _ = gspo_loss(
        logprob,
        old,
        seq_adv[:, None] * mask,
        mask,
        clip_low=3e-4,
        clip_high=4e-4,
        agg_mode="seq-mean-token-mean",
    )
    (grad,) = torch.autograd.grad(loss, logprob)
    s = torch.exp(((logprob - old) * mask).sum(-1) / mask.sum(-1))
    reference = -torch.minimum(s * seq_adv, s.clamp(1 - 3e-4, 1 + 4e-4) * seq_adv).mean()
    (expected,) = torch.autograd.grad(reference, logprob)
    assert_close(loss, reference)
    assert_close(grad, expected)


# --- invariance


@pytest.mark.parametrize("agg_mode", AGG_MODES)
@pytest.mark.parametrize("loss_name", ["ppo_clip", "gspo"])
def test_micro_batch_gradient_equals_full_batch(loss_name, agg_mode):
    torch.manual_seed(5)
    B, T = 7, 9
    mask = lengths_to_mask([9, 3, 0, 6, 1, 8, 5], T)  # uneven lengths and one empty (filtered) sequence
    old = -torch.rand(B, T, dtype=torch.float64)
    logprob = (old + 0.3 * torch.randn(B, T, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(B, T, dtype=torch.float64) * mask
    loss_fn = get_policy_loss(loss_name)
    eps = {"ppo_clip": (0.2, 0.28), "gspo": (0.05, 0.06)}[
        loss_name
    ]  # gspo: wide enough to clip some, not all
    kw = {"clip_low": eps[0], "clip_high": eps[1], "agg_mode": agg_mode, "norm_constant": T}

    full, _ = loss_fn(logprob, old, adv, mask, **kw)
    (full_grad,) = torch.autograd.grad(full, logprob)

    counts = global_counts(mask)
    total, micro_grad = 0.0, torch.zeros_like(logprob)
    for lo, hi in [(0, 2), (2, 3), (3, 7)]:
        part, _ = loss_fn(logprob[lo:hi], old[lo:hi], adv[lo:hi], mask[lo:hi], **kw, **counts)
        (g,) = torch.autograd.grad(part, logprob)
        micro_grad += g
        total += part.item()
    assert total == pytest.approx(full.item(), abs=1e-12)
    assert_close(micro_grad, full_grad)
    assert full_grad.abs().sum() > 0


@pytest.mark.parametrize("agg_mode", AGG_MODES)
def test_value_and_positive_lm_loss_micro_batch_invariance(agg_mode):
    torch.manual_seed(6)
    B, T = 6, 5
    mask = lengths_to_mask([5, 2, 4, 1, 3, 5], T)
    values = torch.randn(B, T, dtype=torch.float64, requires_grad=True)
    old_values, returns = torch.randn(B, T, dtype=torch.float64), torch.randn(B, T, dtype=torch.float64)
    is_positive = torch.tensor([True, False, True, True, False, True])
    pos_mask = mask * is_positive[:, None]

    def both(sl, counts, pos_counts):
        kw = {"agg_mode": agg_mode, "norm_constant": T}
        v, _ = value_loss(values[sl], old_values[sl], returns[sl], mask[sl], clip_range=0.2, **kw, **counts)
        p = positive_lm_loss(values[sl], mask[sl], is_positive[sl], **kw, **pos_counts)
        return torch.stack([v, p])

    full = both(slice(0, B), {}, {})
    parts = sum(
        both(slice(lo, hi), global_counts(mask), global_counts(pos_mask))
        for lo, hi in [(0, 1), (1, 4), (4, 6)]
    )
    assert_close(parts, full)
    for k in range(2):
        (g_full,) = torch.autograd.grad(full[k], values, retain_graph=True)
        (g_parts,) = torch.autograd.grad(parts[k], values, retain_graph=True)
        assert_close(g_parts, g_full)


# --- KL, value, NLL


def test_kl_penalty_hand_case():
    # token 0: pi = 0.5, pi_ref = 0.25 -> log ratio ln 2
    #   k1 = ln 2 = 0.693147; k2 = (ln 2)^2 / 2 = 0.240227; k3 = 0.5 - ln 0.5 - 1 = 0.193147
    # token 1: pi = 0.25, pi_ref = 0.5 -> log ratio -ln 2
    #   k1 = -0.693147; k2 = 0.240227; k3 = 2 - ln 2 - 1 = 0.306853
    logprob = torch.tensor([[LN(0.5), LN(0.25)]])
    ref = torch.tensor([[LN(0.25), LN(0.5)]])
    assert_close(kl_penalty(logprob, ref, "k1"), torch.tensor([[0.693147, -0.693147]]))
    assert_close(kl_penalty(logprob, ref, "k2"), torch.tensor([[0.240227, 0.240227]]))
    assert_close(kl_penalty(logprob, ref, "k3"), torch.tensor([[0.193147, 0.306853]]))
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(logprob, ref, "k4")


def test_k3_is_non_negative_and_finite():
    torch.manual_seed(7)
    logprob = torch.cat([-10 * torch.rand(200), torch.tensor([-80.0, 0.0])])
    ref = torch.cat([-10 * torch.rand(200), torch.tensor([0.0, -80.0])])
    k3 = kl_penalty(logprob, ref, "k3")
    assert (k3 >= 0).all() and torch.isfinite(k3).all()
    assert k3.max().item() <= 10.0  # verl's bound on the value (see the outlier test below)


def test_k3_bounds_an_outlier_token_at_ten():
    """One token the policy gives far less mass than π_ref (log π − log π_ref = −30, say a rare token
    sampled at a high temperature) would add π_ref/π ≈ e^30 (e^10 ≈ 22,000 with the log ratio clamped
    at ±10) to the KL term. verl's low_var_kl bounds the value at 10, and so does k3 here: the outlier
    adds at most 10, and pushes no gradient beyond the bound."""
    logprob = torch.full((1, 100), LN(0.5))
    ref = torch.full((1, 100), LN(0.5))
    logprob[0, 37] = -30.0  # the outlier; every other token agrees with π_ref (k3 = 0)
    logprob.requires_grad_(True)
    k3 = kl_penalty(logprob, ref, "k3")
    assert k3[0, 37].item() == 10.0
    assert (k3[0, :37] == 0).all() and (k3[0, 38:] == 0).all()
    mean = k3.mean()
    assert mean.item() == pytest.approx(10 / 100)  # was (e^10 - 11) / 100 ≈ 220
    mean.backward()
    assert logprob.grad[0, 37].item() == 0.0
    # Below the bound k3 is the estimator itself: log ratio ln 8 -> 8 - ln 8 - 1 = 4.920558
    near = kl_penalty(torch.tensor([[LN(1 / 16)]]), torch.tensor([[LN(0.5)]]), "k3")
    assert_close(near, torch.tensor([[8 - LN(8) - 1]]))
    # π far above π_ref: π_ref/π -> 0, k3 -> |log ratio| - 1, bounded at 10 as well
    above = kl_penalty(torch.tensor([[0.0]]), torch.tensor([[-30.0]]), "k3")
    assert above.item() == 10.0


def test_value_loss_hand_case():
    # clip_range 0.2:
    #   t0: V 1.0, V_old 0.5, R 1.0 -> clipped V 0.7: max(0, 0.09) = 0.09 -> 0.045 (clipped term wins)
    #   t1: V 0.6, V_old 0.5, R 1.0 -> inside the range: 0.16 -> 0.08
    #   t2: V 0.0, V_old 0.5, R 1.0 -> clipped V 0.3: max(1.0, 0.49) -> 0.5
    #   t3: V 1.5, V_old 0.5, R 0.0 -> clipped V 0.7: max(2.25, 0.49) -> 1.125
    values = torch.tensor([[1.0, 0.6, 0.0, 1.5, 7.0]], dtype=torch.float64, requires_grad=True)
    old_values = torch.tensor([[0.5, 0.5, 0.5, 0.5, 0.0]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 1, 1, 0]], dtype=torch.float64)
    loss, metrics = value_loss(values, old_values, returns, mask, clip_range=0.2, agg_mode="token-mean")
    assert loss.item() == pytest.approx((0.045 + 0.08 + 0.5 + 1.125) / 4)
    assert metrics["vf_clipfrac"].item() == pytest.approx(0.25)
    loss.backward()
    # d/dV of (V - R)^2 / 2 / 4 where the unclipped term wins; 0 at t0 and on padding
    assert_close(values.grad, torch.tensor([[0.0, -0.4 / 4, -1.0 / 4, 1.5 / 4, 0.0]], dtype=torch.float64))


def test_positive_lm_loss_hand_case():
    logprob = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -4.0, -5.0], [-6.0, -9.0, -9.0]])
    mask = lengths_to_mask([2, 3, 1], T=3).float()
    # positives are responses 0 and 2: NLL (1 + 2 + 6) over their 3 tokens = 3
    loss = positive_lm_loss(logprob, mask, torch.tensor([True, False, True]))
    assert loss.item() == pytest.approx(3.0)
    assert positive_lm_loss(logprob, mask, torch.tensor([False, False, False])).item() == 0.0
