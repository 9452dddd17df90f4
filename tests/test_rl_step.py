"""The RL step's wiring: micro-batch invariance of the update, dynamic sampling, reward placement."""

import copy
import dataclasses
import functools
import itertools
import random

import pytest
import torch

import selfverify.recipes.rl_step as rl_module
from selfverify.algos import AGG_MODES, gae_advantages, get_advantage_estimator
from selfverify.config.schema import ModelSpec, RLConfig
from selfverify.recipes.rl_step import (
    Scored,
    StepRewards,
    collect,
    concat_step_rewards,
    rl_step,
    step_rewards,
    terminal_token_rewards,
)
from selfverify.runtime.engines import TorchEngine
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.rollout import (
    encode_by_length,
    encode_pairs,
    length_groups,
    line_end_tokens,
    response_logprobs,
    sample,
)
from selfverify.runtime.trainer import policy_update, sft_step
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Problem, split_steps
from selfverify.utils.seeds import stream_seed

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PROBLEMS = [Problem(i + 1, (("+", 2), ("-", 3))) for i in range(6)]


def _updated_params(
    micro_batch_size: int, agg_mode: str, group_size: int = 1, **rl: object
) -> list[torch.Tensor]:
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    prompts = [p.prompt for p in PROBLEMS for _ in range(group_size)]
    rollout = sample(model, tok, prompts, max_new_tokens=10, seed=0)
    noise = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        old = response_logprobs(model, rollout) + 0.05 * noise  # ratios away from 1, so clipping is exercised
    adv = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(2))
    cfg = RLConfig(micro_batch_size=micro_batch_size, agg_mode=agg_mode, max_new_tokens=10, lr=1e-2, **rl)
    model = copy.deepcopy(model)
    engine = TorchEngine(model, cfg.lr, grad_clip=cfg.grad_clip)
    policy_update(engine, rollout, old_logprobs=old, advantages=adv, ref_logprobs=None, cfg=cfg, seed=0)
    return [p.detach().clone() for p in model.parameters()]


def test_update_does_not_depend_on_micro_batch_size():
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        whole, pieces = _updated_params(6, mode), _updated_params(4, mode)
        for a, b in zip(whole, pieces, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_shared_prompts_update_as_the_plain_forward_over_shuffled_mini_batches():
    """rl.share_prompts: groups of 3 samples, two shuffled mini-batches of micro-batches of 4."""
    start = torch.cat([p.flatten() for p in build_model(SPEC, build_char_tokenizer(), seed=0).parameters()])
    plain, shared = (
        torch.cat([p.flatten() for p in _updated_params(4, "token-mean", 3, mini_batches=2, **share)]) - start
        for share in ({"share_prompts": False}, {"share_prompts": True})
    )
    # Adam's two steps blow a rounding-sized gradient up to a whole step now and then: compare the updates.
    assert (shared - plain).norm() <= 1e-3 * plain.norm()


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

    batch = collect(LMWorker(model, tok), tok.pad_token_id, cfg, source, reward_fn, seed=0)
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
        LMWorker(model, tok), tok.pad_token_id, cfg, lambda r: PROBLEMS[:3],
        lambda ps, ro: (torch.zeros(len(ps)), torch.zeros(len(ps), dtype=torch.bool)), seed=0,
    )  # fmt: skip
    assert batch.rounds == 2 and len(batch.problems) == 3  # nothing informative: the last round is kept


def test_terminal_rewards_sit_on_the_last_response_token():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    out = terminal_token_rewards(torch.tensor([2.0, -1.0]), mask)
    assert out.tolist() == [[0.0, 0.0, 2.0, 0.0], [-1.0, 0.0, 0.0, 0.0]]


# --- process rewards: steps are response lines, each step's reward on its last token ------------------


def test_line_end_tokens_on_encoded_pairs():
    tok = build_char_tokenizer()
    responses = ["1+2=3\nA:3", "ab\n\ncd\n", "", "  \nx", " a \n", "A:1"]
    rollout = encode_pairs(tok, ["Q:1+2\n"] * len(responses), responses)
    # One token per character, then end-of-sequence: "1+2=3" 0-4, "\n" 5, "A:3" 6-8, eos 9.
    assert line_end_tokens(tok, rollout) == [[5, 9], [2, 6], [], [4], [3], [3]]
    for ends, text in zip(line_end_tokens(tok, rollout), responses, strict=True):
        assert len(ends) == len(split_steps(text))


def test_line_end_tokens_without_eos_end_at_the_last_token():
    tok = build_char_tokenizer()
    rollout = encode_pairs(tok, ["Q:1\n", "Q:1\n"], ["a\nbc", "a\n"])
    rollout.response_mask[0, -1] = 0.0  # drop the eos: as if truncated after "bc"
    rollout.response_mask[1, 2:] = 0.0  # ... and after "a\n"
    assert line_end_tokens(tok, rollout) == [[1, 3], [1]]


def test_step_rewards_placement():
    tok = build_char_tokenizer()
    rollout = encode_pairs(tok, ["Q:1+2\n"] * 3, ["1+2=3\nA:3", "", "xy"])
    out = step_rewards(tok, rollout, [[1.0, 0.5], [0.75], [0.0]])
    assert out.rewards.tolist() == [[1.0, 0.5], [0.75, 0.0], [0.0, 0.0]]
    assert out.end.tolist() == [[5, 9], [0, 0], [2, 0]]  # "" is its eos alone; "xy" ends at its eos
    assert out.mask.tolist() == [[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]]
    no_steps = step_rewards(tok, rollout.select(slice(1, 2)), [[]])
    assert (no_steps.rewards.tolist(), no_steps.end.tolist(), no_steps.mask.tolist()) == (
        [[0.0]],
        [[0]],
        [[1.0]],
    )


def test_concat_step_rewards_pads():
    a = StepRewards(torch.tensor([[1.0]]), torch.tensor([[4]]), torch.tensor([[1.0]]))
    b = StepRewards(
        torch.tensor([[0.5, 0.25, 2.0], [1.0, 0.0, 0.0]]),
        torch.tensor([[1, 3, 6], [2, 0, 0]]),
        torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
    )
    out = concat_step_rewards([a, b])
    assert out.rewards.tolist() == [[1.0, 0.0, 0.0], [0.5, 0.25, 2.0], [1.0, 0.0, 0.0]]
    assert out.end.tolist() == [[4, 0, 0], [1, 3, 6], [2, 0, 0]] and out.end.dtype == torch.long
    assert out.mask.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert all(torch.equal(x, y) for x, y in zip(concat_step_rewards([a]), a, strict=True))


@functools.cache
def _multiline_state() -> dict[str, torch.Tensor]:
    """A tiny model briefly fitted to reference solutions, so its samples have several lines."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    engine = TorchEngine(model, 1e-2, grad_clip=1.0)
    batch = encode_pairs(tok, [p.prompt for p in PROBLEMS], [p.reference_solution() for p in PROBLEMS])
    for _ in range(40):
        sft_step(engine, batch)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _multiline_model(tok):
    model = build_model(SPEC, tok, seed=0)
    model.load_state_dict(_multiline_state())
    return model


class _Spy:
    """Records what rl_step hands the advantage estimators; the real estimators do the work."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __call__(self, name):
        real = get_advantage_estimator(name)

        def run(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return real(*args, **kwargs)

        return run


def _process_reward_fn(tok, seen):
    """Step k of response i scores (i + k) % 2, so a group's step rewards vary."""

    def reward_fn(problems, rollout):
        lines = [split_steps(t) for t in rollout.texts]
        scores = [[float((i + k) % 2) for k in range(len(s))] for i, s in enumerate(lines)]
        steps = step_rewards(tok, rollout, scores)
        seen.append((rollout, steps))
        rewards = torch.tensor([sum(s) for s in scores])
        return Scored(rewards, rewards > 0, steps)

    return reward_fn


def _process_step(monkeypatch, **overrides):
    tok = build_char_tokenizer()
    model = _multiline_model(tok)
    cfg = RLConfig(prompts_per_step=2, group_size=4, max_new_tokens=16, lr=1e-2, **overrides)
    worker = LMWorker(model, tok)
    worker.start_rl(cfg.lr, critic=ModelSpec() if cfg.advantage == "gae" else None, critic_lr=1e-2)
    critic = worker.learner.critic.module if worker.learner.critic else None
    spy, seen = _Spy(), []
    monkeypatch.setattr(rl_module, "get_advantage_estimator", spy)
    before = [p.detach().clone() for p in model.parameters()]
    critic_before = [p.detach().clone() for p in critic.parameters()] if critic else []
    metrics = rl_step(worker, tok.pad_token_id, cfg, lambda r: PROBLEMS[:2], _process_reward_fn(tok, seen), 0)
    assert len(seen) == 1
    rollout, steps = seen[0]
    assert int(steps.mask.sum(-1).max()) > 1  # some response has several steps
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert changed
    if critic is not None:
        assert any(not torch.equal(a, b) for a, b in zip(critic_before, critic.parameters(), strict=True))
    return metrics, spy.calls, rollout, steps


def test_rl_step_process_rewards_use_grpo_process(monkeypatch):
    metrics, calls, rollout, steps = _process_step(monkeypatch, advantage="grpo")
    assert [name for name, _, _ in calls] == ["grpo_process"]
    _, args, kwargs = calls[0]
    for got, want in zip(args, steps, strict=True):
        assert torch.equal(got, want)
    assert torch.equal(kwargs["response_mask"], rollout.response_mask)
    assert kwargs["group_ids"].tolist() == [0] * 4 + [1] * 4
    assert metrics["reward"] == pytest.approx(steps.rewards.sum(-1).mean().item())


def test_rl_step_process_rewards_with_a_critic(monkeypatch):
    gae_calls = []

    def gae_spy(token_rewards, values, mask, **kwargs):
        gae_calls.append(token_rewards.clone())
        return gae_advantages(token_rewards, values, mask, **kwargs)

    monkeypatch.setattr(rl_module, "gae_advantages", gae_spy)
    metrics, calls, rollout, steps = _process_step(monkeypatch, advantage="gae")
    assert calls == []  # GAE reads the step rewards as token rewards: no group estimator
    assert {"value_explained_variance", "value_loss"} <= set(metrics)
    expected = torch.zeros_like(rollout.response_mask)
    for i in range(len(rollout.texts)):
        for k in range(int(steps.mask[i].sum())):
            expected[i, steps.end[i, k]] += steps.rewards[i, k]
    assert len(gae_calls) == 2  # the policy's advantages and the critic's returns
    for token_rewards in gae_calls:
        torch.testing.assert_close(token_rewards, expected)


def test_rl_step_overlong_penalty_lands_on_the_last_step(monkeypatch):
    max_new, buffer = 16, 8
    _, calls, rollout, steps = _process_step(monkeypatch, advantage="grpo", overlong_buffer=buffer)
    ((name, args, _),) = calls
    assert name == "grpo_process"
    shaped, end, mask = args
    lengths = rollout.response_mask.sum(-1).tolist()
    penalty = [min(0.0, max(-1.0, ((max_new - buffer) - n) / buffer)) for n in lengths]
    assert any(p < 0 for p in penalty)
    expected = steps.rewards.clone()
    for i, n_steps in enumerate(steps.mask.sum(-1).long().tolist()):
        expected[i, n_steps - 1] += penalty[i]
    torch.testing.assert_close(shaped, expected)
    assert torch.equal(end, steps.end) and torch.equal(mask, steps.mask)


def test_sft_step_over_length_groups_equals_one_batch() -> None:
    """encode_by_length only saves padding: the step's loss and update are those of the whole batch."""
    tok = build_char_tokenizer()
    prompts = [p.prompt for p in PROBLEMS] + ["Q:1+2+3+4+5\n"]
    responses = [p.reference_solution() for p in PROBLEMS] + ["A:15"]
    groups = encode_by_length(tok, prompts, responses, parts=3)
    assert len(groups) == 3 and sum(len(g.texts) for g in groups) == len(prompts)
    assert sorted(t for g in groups for t in g.texts) == sorted(responses)
    results = []
    for batch in (encode_pairs(tok, prompts, responses), groups):
        model = build_model(SPEC, tok, seed=0)
        engine = TorchEngine(model, 1e-2, grad_clip=1.0)
        m = sft_step(engine, batch)
        results.append((m["loss"], m["grad_norm"], [p.detach().clone() for p in model.parameters()]))
    (loss_a, norm_a, params_a), (loss_b, norm_b, params_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5) and norm_a == pytest.approx(norm_b, rel=1e-4)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(params_a, params_b, strict=True))


def test_length_groups_are_the_split_that_computes_the_fewest_tokens() -> None:
    """Every row once, in at most ``parts`` passes of rows sorted by length, as cheap as the best split any
    enumeration finds (a pass costs its rows x its longest); a bimodal batch gets its short rows apart."""

    def cost(lengths: list[int], groups: list[torch.Tensor]) -> int:
        return sum(len(g) * max(lengths[i] for i in g.tolist()) for g in groups)

    rng = random.Random(0)
    for _ in range(200):
        lengths, parts = [rng.randint(1, 6) for _ in range(rng.randint(1, 9))], rng.randint(1, 4)
        groups = length_groups(torch.tensor(lengths, dtype=torch.float), parts)
        assert len(groups) <= parts and sorted(torch.cat(groups).tolist()) == list(range(len(lengths)))
        ordered, n = sorted(lengths), len(lengths)
        best = min(
            sum((b - a) * ordered[b - 1] for a, b in itertools.pairwise([0, *cuts, n]))
            for k in range(min(parts, n))
            for cuts in itertools.combinations(range(1, n), k)
        )
        assert cost(lengths, groups) == best
    assert length_groups(torch.tensor([]), 4) == []
    bimodal = [6] * 10 + [30] * 6  # the short rows in passes of their own: none padded to 30
    groups = length_groups(torch.tensor(bimodal, dtype=torch.float), 4)
    assert cost(bimodal, groups) == 10 * 6 + 6 * 30


def _one_update(
    cfg: RLConfig, *, ref_seed: int | None = None, positive: bool = False, recompute_old: bool = True
) -> list[torch.Tensor]:
    """Parameters after one policy update of a fixed rollout (a reference model of another seed,
    every other response marked correct, and π_old left to the update's own forward, when asked)."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    rollout = sample(model, tok, [p.prompt for p in PROBLEMS], max_new_tokens=10, seed=0)
    adv = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        old = response_logprobs(model, rollout)
        ref = None if ref_seed is None else response_logprobs(build_model(SPEC, tok, seed=ref_seed), rollout)
    engine = TorchEngine(model, cfg.lr, grad_clip=cfg.grad_clip)
    metrics = policy_update(
        engine, rollout, old_logprobs=old if recompute_old else None, advantages=adv, ref_logprobs=ref,
        cfg=cfg, seed=0,
        positive=torch.arange(len(PROBLEMS)) % 2 == 0 if positive else None,
    )  # fmt: skip
    if ref is not None:
        assert metrics["kl"] > 0 and ("kl_loss" in metrics) != cfg.kl_in_reward
    return [p.detach().clone() for p in model.parameters()]


def _moved(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def test_on_policy_update_takes_pi_old_from_its_own_forward():
    cfg = RLConfig(max_new_tokens=10, lr=1e-2, micro_batch_size=4)
    assert _moved(_one_update(cfg), _one_update(cfg, recompute_old=False)) == 0.0
    with pytest.raises(ValueError, match="old_logprobs"):
        _one_update(dataclasses.replace(cfg, mini_batches=2), recompute_old=False)
    tok = build_char_tokenizer()
    worker = LMWorker(build_model(SPEC, tok, seed=0), tok)
    worker.start_rl(1e-3, reference=True)
    rollout = worker.generate([p.prompt for p in PROBLEMS], max_new_tokens=10, seed=0)
    old, ref, _ = worker.rollout_stats(rollout, cfg)
    assert old is None and ref is not None  # one optimizer step per batch: no separate forward
    for needs_old in (dataclasses.replace(cfg, mini_batches=2), dataclasses.replace(cfg, kl_in_reward=True)):
        assert worker.rollout_stats(rollout, needs_old)[0] is not None


def test_the_kl_term_is_in_the_loss_and_moves_the_update():
    base = RLConfig(max_new_tokens=10, lr=1e-2)
    without = _one_update(base)
    with_kl = _one_update(dataclasses.replace(base, kl_coef=0.5), ref_seed=1)
    assert _moved(without, with_kl) > 1e-4
    # kl_coef = 0 with a reference: the KL is measured, and the update is the plain one.
    measured_only = _one_update(dataclasses.replace(base, kl_coef=0.0), ref_seed=1)
    assert _moved(without, measured_only) == 0.0


@pytest.mark.parametrize("mode", AGG_MODES)
def test_positive_lm_loss_works_under_every_aggregation_mode(mode):
    base = RLConfig(max_new_tokens=10, lr=1e-2, agg_mode=mode)
    plain = _one_update(base, positive=True)
    with_lm = _one_update(dataclasses.replace(base, pos_lm_coef=0.1), positive=True)
    assert _moved(plain, with_lm) > 1e-5


def test_rl_pipeline_rewards_outcomes_or_the_tasks_step_labels():
    from selfverify.config.schema import RewardConfig, TaskConfig
    from selfverify.recipes.rewards import task_rewards
    from selfverify.tasks.registry import make_task

    tok = build_char_tokenizer()
    task = make_task(TaskConfig(name="embedded", min_ops=2, max_ops=2))
    problem = task.heldout(1, 0)[0]
    right = task.demonstration(problem, False)
    lines = right.split("\n")  # two steps, then the answer line
    wrong_second = "\n".join([lines[0], lines[1].rsplit("=", 1)[0] + "=99", "A:99"])
    rollout = encode_pairs(tok, [problem.prompt] * 2, [right, wrong_second])

    outcome = task_rewards(task, tok, RewardConfig(mode="outcome"))([problem] * 2, rollout)
    assert outcome.rewards.tolist() == [1.0, 0.0] and outcome.steps is None

    process = task_rewards(task, tok, RewardConfig(mode="process"))([problem] * 2, rollout)
    assert process.correct.tolist() == [True, False]
    assert process.steps.rewards.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert process.rewards.tolist() == [3.0, 1.0]
    assert process.steps.end.tolist() == line_end_tokens(tok, rollout)

    mix = task_rewards(task, tok, RewardConfig(mode="mix", process_weight=0.5, outcome_weight=1.0))(
        [problem] * 2, rollout
    )
    assert mix.steps.rewards.tolist() == [[0.5, 0.5, 1.5], [0.5, 0.0, 0.0]]


def test_stream_seeds_differ_by_phase_round_and_step() -> None:
    keys = [(p, r, s) for p in ("generator_rl", "verifier_rl", "meta_rl") for r in range(3) for s in range(5)]
    seeds = {stream_seed(0, *k) for k in keys}
    assert len(seeds) == len(keys) and stream_seed(0, "verifier_rl", 1, 2) == stream_seed(
        0, "verifier_rl", 1, 2
    )
    assert all(0 <= s < 2**63 for s in seeds) and stream_seed(1, "generator_rl") != stream_seed(
        0, "generator_rl"
    )
