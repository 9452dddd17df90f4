"""Configuration: presets, dotted overrides, and errors that name the key before any work."""

import pytest

from selfverify.config import ConfigError, config_dir, load_config
from selfverify.loop import main
from selfverify.tasks.arithmetic import CORRUPTIONS


def test_default_config_is_packaged_and_loads():
    assert (config_dir() / "default.yaml").is_file()
    cfg = load_config()  # the self-verification loop on the process reward
    assert cfg.pipeline == "selfverify" and cfg.reward.mode == "process" and cfg.loop.rounds > 0
    rl = load_config(config_dir() / "rl.yaml")  # the RL-only job
    assert rl.pipeline == "rl" and rl.reward.mode == "outcome" and rl.rl.steps > 0 and rl.sft.steps > 0


def test_dotted_overrides_and_types():
    cfg = load_config(overrides=["rl.lr=1e-5", "seed=3", "task.ops=+-"])
    assert cfg.rl.lr == 1e-5 and cfg.seed == 3 and cfg.task.ops == "+-"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("rl.lrr=1", "rl.lrr"),
        ("rl.lr=fast", "rl.lr"),
        ("task.max_ops=three", "task.max_ops"),
        ("nonsense=1", "nonsense"),
        ("objective=nope", "objective"),
    ],
)
def test_bad_keys_and_types_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides=[override])


def test_config_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"rl\.stepz"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_cli_fails_before_any_work(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["--run-dir", str(run_dir), "rl.clip_low=wide"]) == 2
    assert "rl.clip_low" in capsys.readouterr().err
    assert not run_dir.exists()


def test_cli_refuses_to_mix_configs_in_one_run_dir(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 99\n")
    assert main(["--run-dir", str(run_dir), "seed=1"]) == 2
    assert "different configuration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["reward.mode=bogus"], "reward.mode"),
        (["pipeline=selfverify", "reward.mode=bogus"], "reward.mode"),
        (["loop.labels=x"], "loop.labels"),
        (["loop.judge_error_weights.typo=1"], "loop.judge_error_weights.typo"),
        (["loop.judge_error_weights.skip=-1"], "loop.judge_error_weights.skip"),
        ([f"loop.judge_error_weights.{kind}=0" for kind in CORRUPTIONS], "loop.judge_error_weights"),
        (["pipeline=rl", "reward.mode=process"], "reward.mode"),
        (["pipeline=rl", "reward.mode=self_verify"], "reward.mode"),
    ],
)
def test_reward_mode_and_labels_are_checked(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, overrides)


def test_selfverify_pipeline_takes_verifier_reward_modes():
    for mode in ("outcome", "process", "self_verify", "mix"):
        cfg = load_config(None, ["pipeline=selfverify", f"reward.mode={mode}"])
        assert cfg.pipeline == "selfverify" and cfg.reward.mode == mode
    assert load_config(None, ["pipeline=selfverify", "loop.labels=truth"]).loop.labels == "truth"
