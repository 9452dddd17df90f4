"""Configuration: presets, dotted overrides, and errors that name the key before any work."""

import dataclasses
import subprocess
import sys
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfverify.config import reference
from selfverify.config.load import CHOICES, LIMITS, ConfigError, config_dir, load_config, objective_names
from selfverify.config.schema import Config
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


def test_cli_refuses_a_run_dir_another_process_is_writing(tmp_path, capsys, tiny_overrides):
    run_dir = tmp_path / "run"
    assert main(["--run-dir", str(run_dir), "--no-progress", *tiny_overrides]) == 0
    written = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    # Another process holds the run's lock, as a loop resuming this run would.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from filelock import FileLock; lock = FileLock({str(run_dir / '.lock')!r}); lock.acquire(); "
            "print('held', flush=True); import time; time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["--run-dir", str(run_dir), "--no-progress", *tiny_overrides]) == 2
        assert "is in use: another process" in " ".join(capsys.readouterr().err.split())
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == written
    finally:
        holder.kill()  # a killed holder leaves no lock behind
        holder.wait()
    assert main(["--run-dir", str(run_dir), "--no-progress", *tiny_overrides]) == 0


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["reward.mode=bogus"], "reward.mode"),
        (["pipeline=selfverify", "reward.mode=bogus"], "reward.mode"),
        (["loop.labels=x"], "loop.labels"),
        (["loop.judge_error_weights.typo=1"], "loop.judge_error_weights.typo"),
        (["loop.judge_error_weights.skip=-1"], "loop.judge_error_weights.skip"),
        ([f"loop.judge_error_weights.{kind}=0" for kind in CORRUPTIONS], "loop.judge_error_weights"),
        (["pipeline=rl", "task=gsm8k", "reward.mode=process"], "reward.mode"),
        (["pipeline=rl", "reward.mode=self_verify"], "reward.mode"),
    ],
)
def test_reward_mode_and_labels_are_checked(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, overrides)


def test_rl_pipeline_takes_process_rewards_on_exactly_labelled_tasks():
    for task in ("embedded", "arithmetic_nl"):
        for mode in ("process", "mix"):
            cfg = load_config(None, ["pipeline=rl", f"task={task}", f"reward.mode={mode}"])
            assert cfg.reward.mode == mode


def test_selfverify_pipeline_takes_verifier_reward_modes():
    for mode in ("outcome", "process", "self_verify", "mix"):
        cfg = load_config(None, ["pipeline=selfverify", f"reward.mode={mode}"])
        assert cfg.pipeline == "selfverify" and cfg.reward.mode == mode
    assert load_config(None, ["pipeline=selfverify", "loop.labels=truth"]).loop.labels == "truth"


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        ("rl.advantage=grpo_proces", "rl.advantage", "rloo"),
        ("rl.policy_loss=ppo", "rl.policy_loss", "ppo_clip"),
        ("rl.agg_mode=mean", "rl.agg_mode", "seq-mean-token-sum-norm"),
        ("rl.kl_kind=k4", "rl.kl_kind", "k3"),
        ("rl.lr_schedule=linear", "rl.lr_schedule", "cosine"),
        ("pipeline=sv", "pipeline", "selfverify"),
        ("wandb.mode=cloud", "wandb.mode", "offline"),
        ("loop.meta_audit=unshown", "loop.meta_audit", "blind"),
        ("loop.judge_advantage=ppo", "loop.judge_advantage", "rloo"),
        ("loop.judge_policy_loss=ppo", "loop.judge_policy_loss", "gspo"),
        # The judges' RL has no critic.
        ("loop.judge_advantage=gae", "loop.judge_advantage", "reinforce_plus_plus"),
    ],
)
def test_every_choice_is_checked_with_the_allowed_values(override, key, allowed):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        load_config(overrides=[override])
    assert allowed in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["rl.group_size=0"], "rl.group_size"),
        (["rl.mini_batches=0"], "rl.mini_batches"),
        (["rl.dual_clip_c=1.0"], "rl.dual_clip_c"),
        (["rl.kl_coef=-0.1"], "rl.kl_coef"),
        # The default loop rewards steps: an estimator without a process form would be replaced silently.
        (["objective=rloo"], "rl.advantage"),
        (["rl.advantage=drgrpo", "reward.mode=mix"], "rl.advantage"),
        # Auditing blind, the verifier's own model would confirm each analysis it writes.
        (["loop.meta_audit=blind"], "loop.meta_audit"),
        (["loop.meta_audit=auto"], "loop.meta_audit"),
        # Auto decides by the cold start's check: without one it has nothing to decide by.
        (["loop.meta_apart=true", "loop.meta_audit=auto", "loop.judge_val_f1=null"], "loop.meta_audit"),
        # A bound below an operand, or with nothing that can step back within it, leaves no draw.
        (["task.max_value=5"], "task.max_value"),
        (["task.ops='*'", "task.max_value=99"], "task.max_value"),
    ],
)
def test_values_that_cannot_run_are_refused(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides=overrides)


@pytest.mark.parametrize("override", ["rl.agg_mode=bogus", "rl.advantage=bogus", "pipeline=bogus"])
def test_a_bad_choice_fails_before_the_run_directory_exists(tmp_path, capsys, override):
    run_dir = tmp_path / "run"
    assert main(["--run-dir", str(run_dir), override]) == 2
    assert override.split("=")[0] in capsys.readouterr().err
    assert not run_dir.exists()


def test_every_objective_preset_loads_on_both_shipped_configs():
    for name in objective_names():
        assert load_config(config_dir() / "rl.yaml", [f"objective={name}"]).rl.advantage
        mode = "process" if name in ("grpo", "dapo", "gspo", "ppo", "vapo") else "outcome"
        assert load_config(None, [f"objective={name}", f"reward.mode={mode}"]).reward.mode == mode


# Fuzzing: whatever the text, loading a config either succeeds or raises ConfigError naming the problem.
_KEYS = ["seed", "rl.lr", "rl.agg_mode", "rl.group_size", "loop.judge_error_weights.offset", "task.ops",
         "objective", "rl", "nonsense", "rl.dual_clip_c", "model.hidden_size", "wandb.mode"]  # fmt: skip


@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(_KEYS), st.text(max_size=20)).map("=".join),
            st.text(max_size=40),
        ),
        max_size=4,
    )
)
def test_fuzzed_dotted_overrides_load_or_name_the_problem(overrides):
    try:
        load_config(overrides=overrides)
    except ConfigError as err:
        assert str(err)


@given(st.text(max_size=200))
def test_fuzzed_config_files_load_or_name_the_problem(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_config(path)
        except ConfigError as err:
            assert str(err)


def schema_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every dotted key of the schema, walking the nested dataclasses."""
    hints, keys = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys += schema_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def test_every_field_has_help_and_every_checked_key_exists():
    def fields(cls: type) -> list[dataclasses.Field]:
        hints = typing.get_type_hints(cls)
        return [
            g
            for f in dataclasses.fields(cls)
            for g in [f, *(fields(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else [])]
        ]

    assert all(f.metadata.get("help") for f in fields(Config))
    assert set(CHOICES) | set(LIMITS) <= set(schema_keys())


def test_judge_rl_objective_is_configuration():
    cfg = load_config()
    assert (cfg.loop.judge_advantage, cfg.loop.judge_policy_loss) == ("grpo", "ppo_clip")
    cfg = load_config(overrides=["loop.judge_advantage=rloo", "loop.judge_policy_loss=gspo"])
    assert (cfg.loop.judge_advantage, cfg.loop.judge_policy_loss) == ("rloo", "gspo")


def test_help_lists_every_key_with_type_default_allowed_values_and_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for key in schema_keys():
        assert any(line.startswith(f"  {key} (") for line in lines), key
    assert "  rl.clip_high (float) = 0.2" in lines
    assert "  pipeline (str) = rl  [default.yaml: selfverify]" in lines
    flat = " ".join(out.split())
    assert f"allowed: {', '.join(CHOICES['rl.advantage'])}" in flat
    assert "allowed: drgrpo, grpo, reinforce_plus_plus, remax, rloo" in flat  # loop.judge_advantage
    assert "ε_high: the ratio's upper clip at 1 + ε_high" in flat
    assert "drop groups whose rewards are all equal and refill with new prompts. Generator RL only" in flat
    assert "The judges' RL takes its other settings (clip, KL, aggregation, temperature" in flat


def test_configuration_reference_is_current():
    committed = Path(__file__).resolve().parents[1] / "docs" / "guides" / "configuration.md"
    assert committed.read_text(encoding="utf-8") == reference.markdown(), (
        f"docs/guides/configuration.md is stale: run {reference.DOC_COMMAND}"
    )
    for key in schema_keys():
        assert f"| `{key}` |" in committed.read_text(encoding="utf-8"), key


def test_the_hard_preset_fits_its_world_in_its_budgets():
    """configs/hard.yaml: long worked solutions with multiplication, every one within the generator's
    budget, and every reference analysis and meta-verification within the judge's budget and the
    model's context (the character model: a token per character)."""
    from selfverify.judges.compact_judge import (
        meta_prompt,
        meta_reference,
        reference_analysis,
        verifier_prompt,
    )
    from selfverify.tasks import train_problems

    cfg = load_config(config_dir() / "hard.yaml")
    assert cfg.pipeline == "selfverify" and "*" in cfg.task.ops
    problems = train_problems(cfg.task, 2000, seed=0, tag="budget", exclude=set())
    lengths = sorted(len(p.reference_solution()) for p in problems)
    assert 60 <= sum(lengths) / len(lengths) <= 200 and lengths[-1] < cfg.rl.max_new_tokens
    for p in problems[:300]:
        steps = p.reference_solution().splitlines()
        analysis = reference_analysis(p, steps)
        meta, _ = meta_reference(p, steps, analysis)
        assert max(len(analysis), len(meta)) < cfg.loop.judge_max_new_tokens
        longest_prompt = max(
            len(verifier_prompt(p.prompt, steps)), len(meta_prompt(p.prompt, steps, analysis))
        )
        assert longest_prompt + cfg.loop.judge_max_new_tokens <= cfg.model.max_positions
