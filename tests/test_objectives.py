"""Every objective preset runs end to end through `python -m selfverify.loop objective=NAME`."""

import pytest

from selfverify.config import load_config, objective_names
from selfverify.loop import main
from selfverify.tracking import read_metrics

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
    assert load_config(overrides=["objective=drgrpo"]).rl.agg_mode == "seq-mean-token-sum-norm"
    assert load_config(overrides=["objective=gspo", "rl.clip_high=5e-4"]).rl.clip_high == 5e-4  # CLI wins
