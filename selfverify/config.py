"""The run configuration: a typed schema, YAML presets and dotted command-line overrides.

Resolution order (later wins): schema defaults < the config file (configs/default.yaml unless
``--config``) < the objective preset ``configs/objectives/<objective>.yaml`` < command-line overrides.
OmegaConf checks every key and type against the schema, so a typo or a wrong type fails before any
work starts, with the key named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfverify.algos import ADVANTAGE_ESTIMATORS, AGG_MODES, KL_KINDS, POLICY_LOSSES
from selfverify.models import AUTOCAST_DTYPES, DEVICES, DTYPES, ModelSpec
from selfverify.rewards import SELF_VERIFY_ALPHA, SELF_VERIFY_BETA
from selfverify.tasks import TASKS, TaskSpec
from selfverify.tasks.arithmetic import CORRUPTIONS
from verifiers.generative import FORMATS


@dataclass
class TaskConfig(TaskSpec):
    """The task (``task=<name>`` selects; selfverify.tasks) and its difficulty or data."""

    name: str = "embedded"  # embedded | arithmetic_nl | gsm8k | math
    n_heldout: int = 256
    # gsm8k / math: a hub name (e.g. openai/gsm8k) or a local .jsonl/.json/.parquet file; None: the
    # small sample the package ships. Held-out problems come from heldout_source when given, else
    # from a fixed slice of the training records.
    source: str | None = None
    split: str = "train"
    heldout_source: str | None = None
    heldout_split: str = "test"


@dataclass
class SFTConfig:
    """Cold start: supervised fine-tuning on reference solutions."""

    steps: int = 400
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 20
    # Share of demonstrations that state only the answer, as a hurried teacher would: the cold-started
    # model then sometimes shows its working and sometimes guesses, and RL can learn which pays.
    direct_answer_fraction: float = 0.0


@dataclass
class RLConfig:
    """On-policy RL of the generator (DESIGN §3)."""

    steps: int = 200
    prompts_per_step: int = 16
    group_size: int = 8
    # RL moves a cold-started model in small steps: at 5e-5 Adam's normalised steps on noisy policy
    # gradients undo the cold start faster than the reward teaches (docs/RESULTS.md).
    lr: float = 5e-6
    warmup_steps: int = 0
    # constant after the warm-up, or cosine: down to 10% of lr over each generator RL phase (the RL-only
    # job's rl.steps, a loop round's share of them). Both schedules advance once per RL step.
    lr_schedule: str = "constant"
    temperature: float = 1.0
    max_new_tokens: int = 48
    epochs: int = 1  # passes over each rollout batch
    mini_batches: int = 1  # optimizer steps per pass
    micro_batch_size: int = 64  # gradient accumulation; results don't depend on it
    # A group's samples share their prompt's forward pass (rollout.response_logits): the same gradient up
    # to float rounding, at (P + G·T)/(G·(P + T)) of the tokens. It pays where prompts are long against
    # responses (chat templates, the judge's prompts); the embedded default keeps the plain forward.
    share_prompts: bool = False
    advantage: str = "grpo"
    policy_loss: str = "ppo_clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    agg_mode: str = "token-mean"
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    kl_in_reward: bool = False
    entropy_coef: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 20
    dual_clip_c: float | None = None  # dual-clip PPO bound for negative advantages (e.g. 3.0)
    # Critic (advantage=gae): PPO and VAPO.
    gamma: float = 1.0
    lam: float = 0.95  # λ for the policy's advantages
    lam_critic: float = 1.0  # λ for the value targets (VAPO's decoupled GAE; set equal to lam for PPO)
    length_adaptive_alpha: float | None = None  # VAPO: λ_policy = 1 − 1/(α·|y|) per response
    critic_lr: float = 1e-4
    # The critic's own model (its backbone, with a value head); path unset: a copy of the policy.
    critic_model: ModelSpec = field(default_factory=ModelSpec)
    value_clip: float = 0.2
    value_pretrain_steps: int = 0  # VAPO: train the critic alone on Monte-Carlo returns first
    # DAPO.
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal, refill with new prompts
    max_gen_rounds: int = 3  # cap on sampling rounds per step under dynamic sampling
    overlong_buffer: int = 0  # L_cache of the soft overlong penalty (0 = off); L_max = max_new_tokens
    overlong_filter: bool = False  # mask truncated responses out of the loss
    # VAPO.
    pos_lm_coef: float = 0.0  # μ of the positive-example LM loss


@dataclass
class RewardConfig:
    """What the generator is rewarded for (DESIGN §4)."""

    # outcome: the true final answer (1/0). process: per-step judgments (GRPO with process
    # supervision, or step rewards on step ends for GAE): the judge's in pipeline=selfverify, the task's
    # exact step labels in pipeline=rl. self_verify: R_format·(α·R_Y + β·R_Z)
    # with the generator's own analysis after its solution. mix: process_weight × process +
    # outcome_weight × outcome (on the last step).
    mode: str = "outcome"
    process_weight: float = 0.5
    outcome_weight: float = 0.5
    alpha: float = SELF_VERIFY_ALPHA
    beta: float = SELF_VERIFY_BETA


@dataclass
class RoundsConfig:
    """The self-verification loop: verifier and meta-verifier training, generator RL against the
    verifier, scaled verification of fresh samples into the next round's verifier data."""

    rounds: int = 2
    # The judge (one model: verifier and meta-verifier) cold start: SFT from the cold-started generator.
    judge_sft_steps: int = 2000
    judge_sft_batch_size: int = 64
    judge_sft_lr: float = 1e-3
    judge_pool: int = 2048  # generator samples labelled for the judge's cold start
    judge_synthetic_fraction: float = 0.5  # of each batch: fresh references with or without an error
    judge_meta_fraction: float = 0.5  # of each batch: meta-verifier examples (the rest: verifier)
    # The kinds of error injected into the synthetic solutions, by weight (tasks.arithmetic.CORRUPTIONS).
    # A slip (a step's result off by a little) is found only by recomputing the step and comparing; most
    # other kinds leave a trace a judge spots without arithmetic, and equal weights taught it just that.
    judge_error_weights: dict[str, float] = field(
        default_factory=lambda: {"offset": 6.0, "operand": 1.0, "skip": 1.0, "no_answer": 1.0, "final": 1.0}
    )
    # The judge cold start's check: the verifier's earliest-error F1 on judge_val_samples fresh generator
    # samples (training problems, labelled by the checker as the pool is; where they are all right or all
    # wrong, its accuracy on them). Below judge_val_f1 the cold start goes on for judge_extend_steps more
    # steps (a fresh schedule at a quarter of judge_sft_lr), at most judge_max_extends times: learning to
    # compare a derived step with the given one is a phase change that some draws reach late. None: no check.
    judge_val_f1: float | None = None
    judge_val_samples: int = 256
    judge_extend_steps: int = 200
    judge_max_extends: int = 2
    judge_max_new_tokens: int = 112  # an analysis; the meta-verifier writes one and its verdict
    # The judge's text format: compact (the embedded world's) or prose (DeepSeekMath-V2 style, for
    # natural-language solutions); None: compact for task=embedded, prose otherwise.
    judge_format: str | None = None
    judge_batch_size: int = 256  # prompts per judge generation batch
    # The judge's own model (verifier and meta-verifier); path unset: a copy of the cold-started generator.
    judge_model: ModelSpec = field(default_factory=ModelSpec)
    # The meta-verifier's own model; path unset: the judge model meta-verifies too (DeepSeekMath-V2).
    meta_model: ModelSpec = field(default_factory=ModelSpec)
    # The meta-verifier a second whole judge: its own copy of the judge's start (or loop.meta_model), trained
    # on its own draw of the whole judge mix, verifier and meta examples alike, so that its check of a step
    # is not the verifier's own check run twice (docs/RESULTS.md, "The meta-verifier as an auditor").
    # It is held to the cold start's check (judge_val_f1) as a verifier, as the verifier is; it doubles
    # the judge cold start.
    meta_apart: bool = False
    # How the meta-verifier audits an analysis: prompted (shown its verdict, DeepSeekMath-V2) or blind (it
    # analyses the solution itself, unshown, and the analysis scores by agreeing with its own; its RL then
    # rewards its own analysis agreeing with the labels), or auto: blind where the meta-verifier apart
    # passes the cold start's check (judge_val_f1) as a verifier, prompted where it does not. Blind and
    # auto need loop.meta_apart: the verifier's own model would confirm every analysis it writes greedily.
    meta_audit: str = "prompted"
    # A ProcessBench-format file ({"problem", "steps", "label"} per line): labelled solutions that join
    # the judge's cold-start pool beside the generator's own rule-labelled samples.
    judge_seed: str | None = None
    # Per round (the generator's rl.steps are split evenly over the rounds).
    verifier_rl_steps: int = 10
    meta_rl_steps: int = 10
    judge_prompts_per_step: int = 16
    judge_group_size: int = 4
    judge_rl_lr: float = 1e-5
    # Scaled verification (DeepSeekMath-V2): n analyses per sample, m meta-verifications per analysis
    # that reports an issue, k valid analyses must agree on the lowest score.
    scaled_samples: int = 256
    scaled_n: int = 4
    scaled_m: int = 3
    scaled_k: int = 2
    # Judge SFT before each later round: a share auto_sft_fraction of each batch is the previous round's
    # auto-labels, the rest the cold start's mix; gentler than the cold start (auto_sft_lr).
    auto_sft_steps: int = 100
    auto_sft_fraction: float = 0.5
    auto_sft_lr: float = 3e-4
    # Labels of each round's fresh samples for the next round's judge: auto (scaled verification) or truth
    # (ground-truth analyses, the upper bound); either way beside the cold start's labelled data.
    labels: str = "auto"
    eval_samples: int = 256  # held-out generator samples for verifier F1 / meta accuracy


@dataclass
class BackendConfig:
    """Where the workers live (selfverify.backends): ``local`` (in this process) or ``ray`` (actors)."""

    name: str = "local"  # local | ray
    # ray: a running cluster to join ("auto", or "ray://host:10001"); None: start a local instance
    # bound to loopback.
    address: str | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    placement: str = "pack"  # pack: the workers on as few nodes as fit (colocated); spread: apart
    dashboard: bool = False  # a local instance's dashboard (on 127.0.0.1)
    start_timeout: float = 120.0  # seconds to wait for the workers' resources


@dataclass
class TrainConfig:
    """What turns losses into optimizer steps, for every model a run trains (selfverify.engines)."""

    engine: str = "torch"  # torch | deepspeed
    zero_stage: int = 2  # deepspeed: ZeRO stage 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)
    offload: bool = False  # deepspeed: keep the optimizer state in CPU memory
    # Data-parallel ranks per trained model (deepspeed), one process each: more than one needs
    # backend=ray, which places them (backend.cpus_per_worker / gpus_per_worker apply to each rank).
    ranks: int = 1


@dataclass
class RolloutConfig:
    """What samples the models' responses (selfverify.vllm_engine for vllm)."""

    engine: str = "hf"  # hf (transformers' generate) | vllm
    # vllm: the Python of an environment with vLLM (its CPU build pins its own torch and
    # transformers); None: this process's Python.
    vllm_python: str | None = None
    memory_fraction: float = 0.1  # vLLM's gpu_memory_utilization (on the CPU backend: of CPU memory)
    enforce_eager: bool = True  # no CUDA graphs / compilation: quicker start-up, slower decoding
    max_model_len: int = 2048  # prompt + response tokens vLLM reserves its KV cache for (at most the model's)
    # One vLLM scheduling step's budget: a call's prompts go in groups of at most max_num_seqs requests
    # and max_batch_tokens prompt tokens, so no prefill is split (seeded requests whose prefill is
    # split crash vLLM's CPU build).
    max_num_seqs: int = 256
    max_batch_tokens: int = 65536
    # The largest |vLLM − trainer| log-prob of the check sequence a weight sync may leave; None: by
    # the precision vLLM serves in (selfverify.vllm_engine.LOGPROB_TOLERANCE).
    logprob_tolerance: float | None = None


@dataclass
class WandbConfig:
    enabled: bool = False
    project: str = "selfverify"
    mode: str = "offline"  # offline | online | disabled
    name: str | None = None


@dataclass
class Config:
    seed: int = 0
    objective: str | None = None  # a preset in configs/objectives/, applied over the config file
    pipeline: str = "rl"
    threads: int = 2
    # A checkpoint directory whose policy stands in for the cold start (SFT is skipped); for
    # pipeline=selfverify also the checkpoints/latest of a loop.rounds=0 run (generator and judge after
    # their cold starts). Studies use it to share one cold start per seed across arms.
    init_from: str | None = None
    checkpoint_every: int = 20
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    loop: RoundsConfig = field(default_factory=RoundsConfig)
    eval_batch_size: int = 256
    backend: BackendConfig = field(default_factory=BackendConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


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
# Group estimators that have a process-supervision form (the rest would be silently replaced by it).
PROCESS_ADVANTAGES = ("grpo", "gae", "reinforce_plus_plus")
# Tasks whose rule labels every step exactly: their step labels can be the rl pipeline's process rewards.
EXACT_STEP_TASKS = ("embedded", "arithmetic_nl")


def check_choices(cfg: Config) -> None:
    """Values the schema's types cannot restrict, each error naming its key and the allowed values."""
    choices = {
        "pipeline": (cfg.pipeline, PIPELINES),
        "task.name": (cfg.task.name, TASKS),
        "model.dtype": (cfg.model.dtype, tuple(DTYPES)),
        "model.device": (cfg.model.device, DEVICES),
        "model.autocast": (cfg.model.autocast, (None, *AUTOCAST_DTYPES)),
        "loop.judge_model.autocast": (cfg.loop.judge_model.autocast, (None, *AUTOCAST_DTYPES)),
        "loop.meta_model.autocast": (cfg.loop.meta_model.autocast, (None, *AUTOCAST_DTYPES)),
        "rl.critic_model.autocast": (cfg.rl.critic_model.autocast, (None, *AUTOCAST_DTYPES)),
        "loop.judge_model.dtype": (cfg.loop.judge_model.dtype, tuple(DTYPES)),
        "loop.judge_model.device": (cfg.loop.judge_model.device, DEVICES),
        "loop.meta_model.dtype": (cfg.loop.meta_model.dtype, tuple(DTYPES)),
        "loop.meta_model.device": (cfg.loop.meta_model.device, DEVICES),
        "rl.critic_model.dtype": (cfg.rl.critic_model.dtype, tuple(DTYPES)),
        "rl.critic_model.device": (cfg.rl.critic_model.device, DEVICES),
        "rl.advantage": (cfg.rl.advantage, ADVANTAGES),
        "rl.policy_loss": (cfg.rl.policy_loss, tuple(sorted(POLICY_LOSSES))),
        "rl.agg_mode": (cfg.rl.agg_mode, AGG_MODES),
        "rl.kl_kind": (cfg.rl.kl_kind, KL_KINDS),
        "rl.lr_schedule": (cfg.rl.lr_schedule, ("constant", "cosine")),
        "reward.mode": (cfg.reward.mode, REWARD_MODES),
        "loop.labels": (cfg.loop.labels, ("auto", "truth")),
        "loop.judge_format": (cfg.loop.judge_format, (None, *FORMATS)),
        "loop.meta_audit": (cfg.loop.meta_audit, ("prompted", "blind", "auto")),
        "wandb.mode": (cfg.wandb.mode, ("offline", "online", "disabled")),
        "backend.name": (cfg.backend.name, ("local", "ray")),
        "backend.placement": (cfg.backend.placement, ("pack", "spread")),
        "train.engine": (cfg.train.engine, ("torch", "deepspeed")),
        "train.zero_stage": (cfg.train.zero_stage, (1, 2, 3)),
        "rollout.engine": (cfg.rollout.engine, ("hf", "vllm")),
    }
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(allowed)}")
    counts = {
        "rl.prompts_per_step": cfg.rl.prompts_per_step,
        "rl.group_size": cfg.rl.group_size,
        "rl.epochs": cfg.rl.epochs,
        "rl.mini_batches": cfg.rl.mini_batches,
        "rl.micro_batch_size": cfg.rl.micro_batch_size,
        "rl.max_gen_rounds": cfg.rl.max_gen_rounds,
        "loop.judge_prompts_per_step": cfg.loop.judge_prompts_per_step,
        "loop.judge_group_size": cfg.loop.judge_group_size,
        "loop.judge_batch_size": cfg.loop.judge_batch_size,
        "loop.judge_val_samples": cfg.loop.judge_val_samples,
        "loop.judge_extend_steps": cfg.loop.judge_extend_steps,
        "eval_batch_size": cfg.eval_batch_size,
        "train.ranks": cfg.train.ranks,
    }
    for key, value in counts.items():
        if value < 1:
            raise ConfigError(f"config key '{key}': {value!r} must be at least 1")
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
    if cfg.rl.dual_clip_c is not None and cfg.rl.dual_clip_c <= 1:
        raise ConfigError(f"config key 'rl.dual_clip_c': {cfg.rl.dual_clip_c!r} must be > 1 (or null: off)")
    if cfg.rl.kl_coef < 0:
        raise ConfigError(f"config key 'rl.kl_coef': {cfg.rl.kl_coef!r} is negative")
    if cfg.loop.judge_max_extends < 0:
        raise ConfigError(f"config key 'loop.judge_max_extends': {cfg.loop.judge_max_extends!r} is negative")
    fractions = {
        "sft.direct_answer_fraction": cfg.sft.direct_answer_fraction,
        "loop.judge_synthetic_fraction": cfg.loop.judge_synthetic_fraction,
        "loop.judge_meta_fraction": cfg.loop.judge_meta_fraction,
        "loop.auto_sft_fraction": cfg.loop.auto_sft_fraction,
    }
    if cfg.loop.judge_val_f1 is not None:
        fractions["loop.judge_val_f1"] = cfg.loop.judge_val_f1
    for key, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"config key '{key}': {value!r} is not a fraction in [0, 1]")
    weights = cfg.loop.judge_error_weights
    for kind, weight in weights.items():
        if kind not in CORRUPTIONS:
            raise ConfigError(f"config key 'loop.judge_error_weights.{kind}': not one of {list(CORRUPTIONS)}")
        if weight < 0:
            raise ConfigError(f"config key 'loop.judge_error_weights.{kind}': {weight!r} is negative")
    if sum(weights.values()) <= 0:
        raise ConfigError("config key 'loop.judge_error_weights': no kind of error has a positive weight")
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
