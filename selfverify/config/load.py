"""Loading the run configuration: YAML presets and dotted command-line overrides into the schema.

Resolution order (later wins): schema defaults < the config file (configs/default.yaml unless
``--config``) < the objective preset ``configs/objectives/<objective>.yaml`` < command-line overrides.
OmegaConf checks every key and type against the schema, so a typo or a wrong type fails before any
work starts, with the key named; ``check_choices`` then checks the values against the registries.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfverify.algos import ADVANTAGE_ESTIMATORS, AGG_MODES, KL_KINDS, POLICY_LOSSES
from selfverify.config.schema import SOLVE_METHODS, Config
from selfverify.judges.generative import FORMATS
from selfverify.runtime.models import AUTOCAST_DTYPES, DEVICES, DTYPES
from selfverify.tasks.arithmetic import CORRUPTIONS
from selfverify.tasks.registry import TASKS


class ConfigError(ValueError):
    """A configuration problem, with the offending key in the message."""


def config_dir() -> Path:
    """configs/ of the installed package (the repository's top-level configs/)."""
    return Path(str(resources.files("selfverify.configs")))


def objective_names() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "objectives").glob("*.yaml"))


def _describe(err: OmegaConfBaseException) -> str:
    key = getattr(err, "full_key", None)
    msg = next(iter((getattr(err, "msg", None) or str(err)).splitlines()), type(err).__name__)
    return f"config key '{key}': {msg}" if key else msg


def _yaml_problem(err: yaml.YAMLError) -> str:
    return getattr(err, "problem", None) or next(iter(str(err).splitlines()), type(err).__name__)


def _read_yaml(path: Path, what: str) -> DictConfig:
    """A YAML mapping from ``path``; bad YAML, bad encoding or a non-mapping raise ConfigError."""
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{what} {path}{where}: not valid YAML: {_yaml_problem(err)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None
    except OSError as err:  # OmegaConf's word for a top-level scalar or list, or an unreadable file
        raise ConfigError(f"{what} {path}: {err}; expected a mapping of keys to values") from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"{what} {path}: {_describe(err)}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{what} {path}: expected a mapping of keys to values at the top level")
    return loaded


# Whole-section shorthands on the command line: task=gsm8k, model=<path or hub name>, backend=ray,
# train=deepspeed, rollout=vllm.
SHORTHANDS = {
    "task": "task.name",
    "model": "model.path",
    "backend": "backend.name",
    "train": "train.engine",
    "rollout": "rollout.engine",
}


def _read_override(item: str) -> DictConfig:
    """One ``key=value`` override (the value is YAML); a malformed one raises ConfigError naming it."""
    key, sep, value = item.partition("=")
    if key.strip() in SHORTHANDS:
        item = f"{SHORTHANDS[key.strip()]}={value}"
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r}: expected key=value, e.g. rl.lr=1e-5")
    try:
        return OmegaConf.from_dotlist([item])
    except yaml.YAMLError as err:
        raise ConfigError(f"config key '{key}': value is not valid YAML: {_yaml_problem(err)}") from None
    except (OmegaConfBaseException, ValueError) as err:
        problem = next(iter(str(err).splitlines()), type(err).__name__)
        raise ConfigError(f"override {item!r}: {problem}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Resolve the configuration (see the module docstring) into a typed ``Config``."""
    path = Path(path) if path is not None else config_dir() / "default.yaml"
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    file_cfg = _read_yaml(path, "config file")
    cli = [(item, _read_override(item)) for item in overrides or []]
    try:
        cfg: DictConfig = OmegaConf.merge(OmegaConf.structured(Config), file_cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"config file {path}: {_describe(err)}") from None
    objective = next((c.objective for _, c in reversed(cli) if "objective" in c), cfg.objective)
    if objective is not None:
        if str(objective) not in objective_names():
            raise ConfigError(
                f"config key 'objective': unknown objective {objective!r}; known: {objective_names()}"
            )
        cfg = OmegaConf.merge(cfg, _read_yaml(config_dir() / "objectives" / f"{objective}.yaml", "preset"))
    for item, override in cli:
        try:
            cfg = OmegaConf.merge(cfg, override)
        except OmegaConfBaseException as err:
            raise ConfigError(f"override {item!r}: {_describe(err)}") from None
    try:
        config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        raise ConfigError(_describe(err)) from None
    check_choices(config)
    return config


REWARD_MODES = ("outcome", "process", "self_verify", "mix")
PIPELINES = ("rl", "selfverify")
# grpo_process is not a choice: it replaces the group estimators whenever there are step rewards.
ADVANTAGES = tuple(sorted(set(ADVANTAGE_ESTIMATORS) - {"grpo_process"}))
# The judges' RL has no critic, so no gae; their rewards are per response, so any group estimator fits.
JUDGE_ADVANTAGES = tuple(a for a in ADVANTAGES if a != "gae")
# Group estimators that have a process-supervision form (the rest would be silently replaced by it).
PROCESS_ADVANTAGES = ("grpo", "gae", "reinforce_plus_plus")
# Tasks whose rule labels every step exactly: their step labels can be the rl pipeline's process rewards.
EXACT_STEP_TASKS = ("embedded", "arithmetic_nl")
# Every ModelSpec in the schema, by its dotted key.
MODEL_KEYS = ("model", "loop.judge_model", "loop.meta_model", "rl.critic_model")

# The values the schema's types cannot restrict, by dotted key: what check_choices validates and what
# --help and the configuration reference (selfverify.config.reference) print.
CHOICES: dict[str, tuple] = {
    "pipeline": PIPELINES,
    "task.name": TASKS,
    **{f"{m}.dtype": tuple(DTYPES) for m in MODEL_KEYS},
    **{f"{m}.device": DEVICES for m in MODEL_KEYS},
    **{f"{m}.autocast": (None, *AUTOCAST_DTYPES) for m in MODEL_KEYS},
    "rl.advantage": ADVANTAGES,
    "rl.policy_loss": tuple(sorted(POLICY_LOSSES)),
    "rl.agg_mode": AGG_MODES,
    "rl.kl_kind": KL_KINDS,
    "rl.lr_schedule": ("constant", "cosine"),
    "reward.mode": REWARD_MODES,
    "loop.judge_advantage": JUDGE_ADVANTAGES,
    "loop.judge_policy_loss": tuple(sorted(POLICY_LOSSES)),
    "loop.labels": ("auto", "truth"),
    "loop.judge_format": (None, *FORMATS),
    "loop.meta_audit": ("prompted", "blind", "auto"),
    "wandb.mode": ("offline", "online", "disabled"),
    "backend.name": ("local", "ray"),
    "backend.placement": ("pack", "spread"),
    "train.engine": ("torch", "deepspeed"),
    "train.zero_stage": (1, 2, 3),
    "rollout.engine": ("hf", "vllm"),
    "solve.method": SOLVE_METHODS,
}


class Limit(NamedTuple):
    """A numeric key's allowed range: in words (for the help), as a test, and what an error says."""

    words: str
    ok: Callable[[Any], bool]
    error: str


AT_LEAST_ONE = Limit(">= 1", lambda v: v >= 1, "must be at least 1")
NON_NEGATIVE = Limit(">= 0", lambda v: v >= 0, "is negative")
FRACTION = Limit("in [0, 1]", lambda v: v is None or 0.0 <= v <= 1.0, "is not a fraction in [0, 1]")

# Numeric ranges by dotted key, validated by check_choices and printed like CHOICES.
LIMITS: dict[str, Limit] = {
    **dict.fromkeys(
        (
            "rl.prompts_per_step",
            "rl.group_size",
            "rl.epochs",
            "rl.mini_batches",
            "rl.micro_batch_size",
            "rl.max_gen_rounds",
            "loop.judge_prompts_per_step",
            "loop.judge_group_size",
            "loop.judge_batch_size",
            "loop.judge_val_samples",
            "loop.judge_extend_steps",
            "eval_batch_size",
            "train.ranks",
            "solve.candidates",
            "solve.verifications",
            "solve.batch_problems",
            "solve.concurrency",
        ),
        AT_LEAST_ONE,
    ),
    **dict.fromkeys(
        (
            "solve.meta_verifications",
            "solve.refine_top",
            "solve.analyses_per_refine",
            "solve.rounds",
            "solve.retries",
        ),
        NON_NEGATIVE,
    ),
    "sft.refine_fraction": NON_NEGATIVE,
    "rl.dual_clip_c": Limit("> 1, or null: off", lambda v: v is None or v > 1, "must be > 1 (or null: off)"),
    "rl.kl_coef": NON_NEGATIVE,
    "loop.judge_max_extends": NON_NEGATIVE,
    **dict.fromkeys(
        (
            "sft.direct_answer_fraction",
            "loop.judge_synthetic_fraction",
            "loop.judge_meta_fraction",
            "loop.auto_sft_fraction",
            "loop.judge_val_f1",
            "loop.refine_rl_fraction",
        ),
        FRACTION,
    ),
}
# Mapping keys whose own keys are restricted (their values are weights >= 0, at least one positive).
WEIGHT_KEYS: dict[str, tuple[str, ...]] = {"loop.judge_error_weights": CORRUPTIONS}


def _yaml_word(value: Any) -> str:
    return "null" if value is None else str(value)


def allowed_values(key: str) -> str | None:
    """What the loader allows at the dotted ``key``, in words; None where its type says it all."""
    if key == "objective":
        return ", ".join(["null", *objective_names()])
    if key in CHOICES:
        return ", ".join(_yaml_word(v) for v in CHOICES[key])
    if key in LIMITS:
        return LIMITS[key].words
    if key in WEIGHT_KEYS:
        return f"weights >= 0, at least one positive, of {', '.join(WEIGHT_KEYS[key])}"
    return None


def value_at(cfg: Any, key: str) -> Any:
    """The value at a dotted key of a configuration."""
    return reduce(getattr, key.split("."), cfg)


def check_choices(cfg: Config) -> None:
    """Values the schema's types cannot restrict (CHOICES, LIMITS, WEIGHT_KEYS) and combinations that
    cannot run, each error naming its key and what is allowed."""
    for key, allowed in CHOICES.items():
        value = value_at(cfg, key)
        if value not in allowed:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(allowed)}")
    for key, limit in LIMITS.items():
        value = value_at(cfg, key)
        if not limit.ok(value):
            raise ConfigError(f"config key '{key}': {value!r} {limit.error}")
    for key, kinds in WEIGHT_KEYS.items():
        weights = value_at(cfg, key)
        for kind, weight in weights.items():
            if kind not in kinds:
                raise ConfigError(f"config key '{key}.{kind}': not one of {list(kinds)}")
            if weight < 0:
                raise ConfigError(f"config key '{key}.{kind}': {weight!r} is negative")
        if sum(weights.values()) <= 0:
            raise ConfigError(f"config key '{key}': no kind of error has a positive weight")
    if cfg.task.max_value is not None and (
        cfg.task.max_value < cfg.task.max_operand or not set(cfg.task.ops) & set("+-")
    ):
        raise ConfigError(
            f"config key 'task.max_value': {cfg.task.max_value} needs task.ops to hold + or - and to be at "
            f"least task.max_operand ({cfg.task.max_operand}), or every draw could run out of operations"
        )
    if cfg.train.ranks > 1 and (cfg.train.engine != "deepspeed" or cfg.backend.name != "ray"):
        raise ConfigError(
            f"config key 'train.ranks': {cfg.train.ranks} data-parallel ranks need train.engine=deepspeed "
            "and backend=ray (which starts one process per rank)"
        )
    if cfg.loop.judge_seed is not None and cfg.task.name not in ("gsm8k", "math"):
        raise ConfigError(
            f"config key 'loop.judge_seed': seed data is read for task=gsm8k or task=math, not "
            f"{cfg.task.name!r} (whose own samples the rule labels exactly)"
        )
    if cfg.loop.meta_audit != "prompted" and not cfg.loop.meta_apart:
        raise ConfigError(
            f"config key 'loop.meta_audit': {cfg.loop.meta_audit!r} needs loop.meta_apart=true, a "
            "meta-verifier trained as a judge of its own (auditing blind, the verifier's own model confirms "
            "each analysis it writes)"
        )
    if cfg.loop.meta_audit == "auto" and cfg.loop.judge_val_f1 is None:
        raise ConfigError(
            "config key 'loop.meta_audit': 'auto' needs loop.judge_val_f1, the check whose bar the "
            "meta-verifier apart must pass to audit blind"
        )
    if cfg.reward.mode in ("process", "mix") and cfg.rl.advantage not in PROCESS_ADVANTAGES:
        raise ConfigError(
            f"config key 'rl.advantage': {cfg.rl.advantage!r} has no process-supervision form for "
            f"reward.mode={cfg.reward.mode!r}; use one of {list(PROCESS_ADVANTAGES)} or reward.mode=outcome"
        )
    if cfg.pipeline == "rl" and cfg.reward.mode == "self_verify":
        raise ConfigError(
            "config key 'reward.mode': 'self_verify' needs a verifier and a meta-verifier "
            "(pipeline=selfverify)"
        )
    if cfg.pipeline == "rl" and cfg.reward.mode != "outcome" and cfg.task.name not in EXACT_STEP_TASKS:
        raise ConfigError(
            f"config key 'reward.mode': {cfg.reward.mode!r} in the rl pipeline takes its step rewards from "
            f"the task's exact step labels (task={'|'.join(EXACT_STEP_TASKS)}); task={cfg.task.name} has "
            "none, so use pipeline=selfverify (the judge's step verdicts) or reward.mode=outcome"
        )


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Config) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg))  # type: ignore[return-value]
