"""Every objective preset runs end to end through `python -m selfverify.loop objective=NAME`, and its
update schedule lets its clipping act."""

import pytest
import torch

from selfverify.config.load import config_dir, load_config, objective_names
from selfverify.config.schema import ModelSpec
from selfverify.loop import main
from selfverify.runtime.engines import TorchEngine
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.rollout import response_logprobs, sample
from selfverify.runtime.trainer import policy_update
from selfverify.tasks import Problem
from selfverify.utils.tracking import read_metrics

EXPECTED = {
    "grpo": {"kl", "kl_loss"},
    "drgrpo": set(),
    "rloo": set(),
    "remax": set(),
    "gspo": set(),
    "ppo": {"value_loss", "value_explained_variance", "vf_clipfrac"},
    "dapo": {"gen_rounds"},
    "vapo": {"value_loss", "value_explained_variance", "pos_lm_loss"},
}


def test_all_eight_presets_exist():
    assert set(objective_names()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_objective_runs(tmp_path, tiny_overrides, name):
    run = tmp_path / name
    overrides = [*tiny_overrides, f"objective={name}", "rl.value_pretrain_steps=2"]
    assert main(["--run-dir", str(run), "--no-progress", *overrides]) == 0
    records = read_metrics(run)
    rl = [r for r in records if r["phase"] == "rl"]
    assert len(rl) == 4
    common = {"reward", "entropy", "clipfrac_low", "clipfrac_high", "grad_norm", "zero_variance_groups",
              "gen_rounds", "response_length", "truncation_rate"}  # fmt: skip
    assert common | EXPECTED[name] <= set(rl[0])
    if name == "vapo":
        assert [r["phase"] for r in records].count("value_pretrain") == 2


def test_presets_set_what_their_papers_define():
    dapo = load_config(overrides=["objective=dapo"]).rl
    assert (dapo.clip_low, dapo.clip_high, dapo.agg_mode, dapo.dynamic_sampling) == (
        0.2,
        0.28,
        "token-mean",
        True,
    )
    vapo = load_config(overrides=["objective=vapo"]).rl
    assert (vapo.lam_critic, vapo.length_adaptive_alpha, vapo.pos_lm_coef) == (1.0, 0.05, 0.1)
    rl_job = config_dir() / "rl.yaml"  # outcome rewards: every estimator applies
    assert load_config(rl_job, ["objective=drgrpo"]).rl.agg_mode == "seq-mean-token-sum-norm"
    assert load_config(overrides=["objective=gspo", "rl.clip_high=5e-4"]).rl.clip_high == 5e-4  # CLI wins


def _clip_fractions(rl) -> dict[str, float]:
    """One policy update of a fixed rollout with the preset's schedule (epochs x mini-batches) and
    clip ranges, at a learning rate that moves the ratio within a few optimizer steps."""
    tok = build_char_tokenizer()
    model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, 0)
    problems = [Problem(i + 1, (("+", 2), ("-", 3))) for i in range(16)]
    rollout = sample(model, tok, [p.prompt for p in problems], max_new_tokens=12, seed=0)
    with torch.no_grad():
        old = response_logprobs(model, rollout)
    advantages = torch.randn(rollout.response_mask.shape, generator=torch.Generator().manual_seed(0))
    engine = TorchEngine(model, 3e-2, grad_clip=1.0)
    metrics = policy_update(engine, rollout, old_logprobs=old, advantages=advantages, ref_logprobs=None,
        cfg=rl, seed=0,
    )  # fmt: skip
    return {k: v for k, v in metrics.items() if k.startswith("clipfrac")}


@pytest.mark.parametrize("name", ["dapo", "vapo"])
def test_clip_higher_and_dual_clip_act_under_the_preset_schedule(name):
    """DAPO and VAPO take several mini-batch steps per rollout batch, so after the first step the ratio
    leaves 1: Clip-Higher's upper bound (and dual-clip, when set) clip tokens. One step per batch (the
    schedule the dapo preset had) leaves the ratio at exactly 1 and nothing ever clips."""
    rl = load_config(config_dir() / "rl.yaml", [f"objective={name}", "rl.dual_clip_c=1.5"]).rl
    assert rl.mini_batches * rl.epochs > 1 and rl.clip_high > rl.clip_low
    clipped = _clip_fractions(rl)
    assert clipped["clipfrac_high"] > 0 and clipped["clipfrac_low"] > 0 and clipped["clipfrac_dual"] > 0
    one_step = load_config(config_dir() / "rl.yaml", [f"objective={name}", "rl.dual_clip_c=1.5",
                                                      "rl.mini_batches=1", "rl.epochs=1"]).rl  # fmt: skip
    assert set(_clip_fractions(one_step).values()) == {0.0}
