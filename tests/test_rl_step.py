"""The RL step's wiring: micro-batch invariance of the update, dynamic sampling, reward placement."""

import copy

import torch

from selfverify.config import RLConfig
from selfverify.models import ModelSpec, build_char_tokenizer, build_model
from selfverify.rl import Learner, collect, terminal_token_rewards
from selfverify.rollout import response_logprobs, sample
from selfverify.tasks import Problem
from selfverify.trainer import make_optimizer, policy_update

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PROBLEMS = [Problem(i + 1, (("+", 2), ("-", 3))) for i in range(6)]


def _updated_params(micro_batch_size: int, agg_mode: str) -> list[torch.Tensor]:
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    rollout = sample(model, tok, [p.prompt for p in PROBLEMS], max_new_tokens=10, seed=0)
    noise = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        old = response_logprobs(model, rollout) + 0.05 * noise  # ratios away from 1, so clipping is exercised
    adv = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(2))
    cfg = RLConfig(micro_batch_size=micro_batch_size, agg_mode=agg_mode, max_new_tokens=10, lr=1e-2)
    model = copy.deepcopy(model)
    opt, sched = make_optimizer(model, cfg.lr)
    policy_update(
        model, opt, sched, rollout, old_logprobs=old, advantages=adv, ref_logprobs=None, cfg=cfg, seed=0
    )
    return [p.detach().clone() for p in model.parameters()]


def test_update_does_not_depend_on_micro_batch_size():
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        whole, pieces = _updated_params(6, mode), _updated_params(4, mode)
        for a, b in zip(whole, pieces, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_dynamic_sampling_keeps_only_informative_groups_and_refills():
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    cfg = RLConfig(
        prompts_per_step=3, group_size=4, max_new_tokens=6, dynamic_sampling=True, max_gen_rounds=4
    )
    calls = []

    def source(r: int) -> list[Problem]:
        calls.append(r)
        return PROBLEMS[:3] if r == 0 else PROBLEMS[3:]

    def reward_fn(problems, rollout):
        # Problems with an odd start get rewards 0,1,0,1 (informative); even starts get all zeros.
        r = torch.tensor([float(p.start % 2 == 1 and i % 2 == 1) for i, p in enumerate(problems)])
        return r, r > 0

    batch = collect(Learner(model, *make_optimizer(model, 1e-3)), tok, cfg, source, reward_fn, seed=0)
    assert [p.start for p in batch.problems] == [1, 3, 5]
    assert batch.rounds == 2 and calls == [0, 1]
    assert len(batch.rollout.texts) == 12 and batch.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    for g in range(3):
        assert batch.rewards[g * 4 : g * 4 + 4].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_dynamic_sampling_stops_at_the_round_cap():
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    cfg = RLConfig(
        prompts_per_step=3, group_size=2, max_new_tokens=4, dynamic_sampling=True, max_gen_rounds=2
    )
    batch = collect(
        Learner(model, *make_optimizer(model, 1e-3)), tok, cfg, lambda r: PROBLEMS[:3],
        lambda ps, ro: (torch.zeros(len(ps)), torch.zeros(len(ps), dtype=torch.bool)), seed=0,
    )  # fmt: skip
    assert batch.rounds == 2 and len(batch.problems) == 3  # nothing informative: the last round is kept


def test_terminal_rewards_sit_on_the_last_response_token():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    out = terminal_token_rewards(torch.tensor([2.0, -1.0]), mask)
    assert out.tolist() == [[0.0, 0.0, 2.0, 0.0], [-1.0, 0.0, 0.0, 0.0]]
