"""Benchmark selfverify's GRPO step against TRL's ``GRPOTrainer`` on one workload, in one command.

    python scripts/bench_trl.py --init runs/<run>/checkpoints/cold_start --steps 6
    python scripts/bench_trl.py --config configs/smollm2_rl.yaml --init <dir> --steps 4 rl.micro_batch_size=16
    python scripts/bench_trl.py --steps 3 sft.steps=60       # no --init: a short cold start first
    python scripts/bench_trl.py --init <dir> --profile        # and selfverify's step by part (torch.profiler)

Needs TRL (``pip install -e ".[trl]"``). Both systems train the same cold-started generator (``--init``, an
ordinary Hugging Face directory such as a run's ``checkpoints/cold_start``; without it the script first runs
``python -m selfverify.loop ... pipeline=rl rl.steps=0`` and uses its ``checkpoints/cold_start``) for
``--steps`` optimizer steps on one workload: the config (``--config``, default configs/rl.yaml) with
``key=value`` overrides, over ``WORKLOAD``: 16 prompts x 8 samples, at most 48 new tokens, temperature 1, no
KL, one optimizer step per batch, the whole batch in one forward and backward (``rl.micro_batch_size`` splits
it on both sides: SmolLM2's 128 responses at once want more memory than a laptop has).

What is the same on both sides:

- weights and tokenizer (each system loads its own copy of ``--init``, in ``model.dtype``); prompts: the
  task's training problems of RL step k (keyed ``rl-<k>``, held-out problems excluded, as ``recipes/rl.py``
  draws them) through the same chat prompter, given to TRL as plain text in step order
  (``shuffle_dataset=False``); the script checks that TRL's tokenization of them (with special tokens) is
  selfverify's (without);
- sampling: ``group_size`` samples per prompt, ``temperature``, full distribution (top_k 0, top_p 1), stop at
  the generation config's or the tokenizer's end token, ``max_new_tokens``, one batched call per step
  (selfverify's ``rollout.decode``, whose finished rows leave the batch; TRL's ``model.generate``);
- reward: ``task.check(problem, text).correct`` (selfverify's outcome reward; TRL's reward function maps each
  completion back to its problem by a dataset column);
- update: group-normalised advantages (unbiased std; ``rl.advantage=drgrpo``: ``scale_rewards="none"``),
  PPO-clip with ``clip_low``/``clip_high`` (TRL's ``epsilon``/``epsilon_high``), token losses aggregated as
  ``rl.agg_mode`` (token-mean = TRL's ``loss_type="dapo"``, seq-mean-token-mean = ``"grpo"``,
  seq-mean-token-sum-norm = ``"dr_grpo"``), no KL and no reference model (``beta=0``), one optimizer step
  per batch (``num_iterations=1``, ``steps_per_generation`` = ``gradient_accumulation_steps`` = batch /
  ``rl.micro_batch_size``), AdamW (betas 0.9/0.95, no weight decay, eps 1e-8) at a constant ``rl.lr``,
  gradient norm clipped at ``rl.grad_clip``; ``model.autocast=bfloat16`` is TRL's ``bf16=True``; no gradient
  checkpointing (TRL's default turns it on); deterministic kernels and ``threads`` torch threads on both.

What differs, and is left as each system does it: the random streams (the samples, and so the response
lengths, differ: throughputs are per token for that reason); the advantage's epsilon (1e-6 vs TRL's 1e-4);
TRL scores log-probs with its fused, chunked LM head, selfverify with full logits; ``rl.share_prompts`` (on in
configs/smollm2_rl.yaml) lets selfverify forward a group's prompt once, a speed-up of its own that TRL lacks.
Settings TRL has no counterpart for here (another policy loss, KL, VAPO's positive LM loss, dynamic sampling,
a warm-up or cosine schedule, several optimizer steps per batch, DeepSpeed, vLLM) stop the script, named.

How it is measured: each system runs in a process of its own, and the two take turns, one optimizer step
at a time, the order swapped every step, so the load of a shared machine falls on both alike. A step's
seconds run from the signal to start it to the end of its optimizer step (for TRL to ``on_step_end``, so
fetching its batch and logging count, as selfverify's drawing of problems does); the first step is a
warm-up and is left out. Generation seconds are those of selfverify's ``LMWorker.generate`` and of TRL's
``_generate`` (tokenize, generate, decode on both). Rollout tokens/s: response tokens (through the end
token) / generation seconds; training tokens/s: prompt + response tokens, without padding / the rest of the
step (rewards, advantages, forward, backward, optimizer). Peak memory: each process's peak RSS (imports and
loading included), and on a GPU ``torch.cuda.max_memory_allocated``. Ratios are selfverify / TRL.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from transformers import PreTrainedTokenizerBase, PrinterCallback, TrainerCallback

from selfverify.config.load import ConfigError, config_dir, load_config
from selfverify.config.schema import Config
from selfverify.recipes.generator import problem_source
from selfverify.recipes.rewards import task_rewards
from selfverify.recipes.rl_step import rl_step
from selfverify.runtime.engines import POLICY_ADAM, configure_torch
from selfverify.runtime.models import chat_prompter, load_pretrained, resolve_device
from selfverify.runtime.rollout import Rollout
from selfverify.runtime.workers import build
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.tasks.registry import make_task
from selfverify.utils.seeds import stream_seed

# The fixed workload, applied over the config file and under the command line's overrides.
WORKLOAD = [
    "rl.prompts_per_step=16",
    "rl.group_size=8",
    "rl.max_new_tokens=48",
    "rl.temperature=1.0",
    "rl.kl_coef=0",
    "rl.epochs=1",
    "rl.mini_batches=1",
    "rl.micro_batch_size=128",
    "rl.pos_lm_coef=0",
]
WARMUP = 1  # steps left out of the figures
LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
SCALE_REWARDS = {"grpo": "group", "drgrpo": "none"}
SIDES = ("selfverify", "trl")


def trl_arguments(cfg: Config) -> dict[str, Any]:
    """``GRPOConfig``'s arguments for the update ``cfg.rl`` makes; ConfigError naming what it cannot match."""
    rl = cfg.rl
    batch = rl.prompts_per_step * rl.group_size
    micro = min(rl.micro_batch_size, batch)
    unmatched = {
        f"rl.advantage={rl.advantage} (grpo, drgrpo)": rl.advantage not in SCALE_REWARDS,
        f"rl.agg_mode={rl.agg_mode} ({', '.join(LOSS_TYPES)})": rl.agg_mode not in LOSS_TYPES,
        f"rl.policy_loss={rl.policy_loss} (ppo_clip)": rl.policy_loss != "ppo_clip",
        f"rl.kl_coef={rl.kl_coef} (0)": rl.kl_coef != 0,
        "rl.epochs, rl.mini_batches (1, 1)": (rl.epochs, rl.mini_batches) != (1, 1),
        "rl.dynamic_sampling (false)": rl.dynamic_sampling,
        "rl.overlong_buffer (0)": rl.overlong_buffer != 0,
        "rl.pos_lm_coef (0)": rl.pos_lm_coef != 0,
        "rl.entropy_coef (0)": rl.entropy_coef != 0,
        "rl.dual_clip_c (null)": rl.dual_clip_c is not None,
        "rl.lr_schedule, rl.warmup_steps (constant, 0)": (rl.lr_schedule, rl.warmup_steps) != ("constant", 0),
        f"reward.mode={cfg.reward.mode} (outcome)": cfg.reward.mode != "outcome",
        f"train.engine={cfg.train.engine} (torch)": cfg.train.engine != "torch",
        f"rollout.engine={cfg.rollout.engine} (hf)": cfg.rollout.engine != "hf",
        f"rl.micro_batch_size={micro} (a divisor of the batch, {batch})": batch % micro != 0,
    }
    if any(unmatched.values()):
        names = "; ".join(name for name, bad in unmatched.items() if bad)
        raise ConfigError(f"TRL's GRPOTrainer has no counterpart of: {names}")
    beta1, beta2 = POLICY_ADAM["betas"]
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": batch // micro,
        "steps_per_generation": batch // micro,
        "num_generations": rl.group_size,
        "num_iterations": 1,
        "max_completion_length": rl.max_new_tokens,
        "temperature": rl.temperature,
        "top_k": 0,
        "top_p": 1.0,
        "beta": 0.0,
        "loss_type": LOSS_TYPES[rl.agg_mode],
        "scale_rewards": SCALE_REWARDS[rl.advantage],
        "epsilon": rl.clip_low,
        "epsilon_high": rl.clip_high,
        "mask_truncated_completions": rl.overlong_filter,
        "learning_rate": rl.lr,
        "optim": "adamw_torch",
        "adam_beta1": beta1,
        "adam_beta2": beta2,
        "adam_epsilon": 1e-8,
        "weight_decay": POLICY_ADAM["weight_decay"],
        "lr_scheduler_type": "constant",
        "max_grad_norm": rl.grad_clip,
        "bf16": cfg.model.autocast == "bfloat16",
        "gradient_checkpointing": False,
        "use_cpu": resolve_device(cfg.model.device).type == "cpu",
        "shuffle_dataset": False,
        "seed": cfg.seed,
        "report_to": "none",
        "logging_strategy": "no",
        "save_strategy": "no",
        "disable_tqdm": True,
    }


@dataclass
class Meter:
    """What one step generated: its generation seconds, response tokens and prompt + response tokens."""

    seconds: float = 0.0
    generated: int = 0
    tokens: int = 0
    responses: int = 0
    reward: float = 0.0
    start: float = 0.0

    def begin(self) -> None:
        self.seconds, self.generated, self.tokens, self.responses = 0.0, 0, 0, 0
        self.start = time.perf_counter()

    def record(self) -> dict[str, float]:
        if torch.cuda.is_available():  # the step's kernels done: none of its work runs into the other's turn
            torch.cuda.synchronize()
        return {
            "seconds": time.perf_counter() - self.start,
            "generation_seconds": self.seconds,
            "generated_tokens": self.generated,
            "tokens": self.tokens,
            "responses": self.responses,
            "reward": self.reward,
        }

    def timed(
        self, generate: Callable[..., Any], lengths: Callable[[Any], tuple[list[int], list[int]]]
    ) -> Callable[..., Any]:
        """``generate`` timed into this meter; ``lengths``: its output's prompt and response lengths."""

        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = generate(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            prompts, responses = lengths(out)
            self.generated += sum(responses)
            self.tokens += sum(prompts) + sum(responses)
            self.responses += len(responses)
            return out

        return run


def rollout_lengths(rollout: Rollout) -> tuple[list[int], list[int]]:
    responses = rollout.lengths.long().tolist()
    total = rollout.attention_mask.sum(-1).tolist()
    return [t - r for t, r in zip(total, responses, strict=True)], responses


def trl_lengths(out: tuple) -> tuple[list[int], list[int]]:
    """Lengths of ``GRPOTrainer._generate``'s prompt ids and completion ids (its first two outputs)."""
    return [len(p) for p in out[0]], [len(c) for c in out[1]]


def peak_memory() -> dict[str, float | None]:
    """This process's peak RSS in MiB, and its CUDA peak. On Linux VmHWM: ru_maxrss would count the parent's
    pages a spawned process held between its fork and its exec."""
    status = Path("/proc/self/status")
    if status.exists():
        hwm = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
        rss = int(hwm.split()[1]) / 2**10  # kB
    else:  # macOS: ru_maxrss in bytes
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    cuda = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    return {"peak_rss_mib": rss, "cuda_peak_mib": cuda}


def task_and_heldout(cfg: Config, tok: PreTrainedTokenizerBase) -> tuple[Task, set[TaskProblem]]:
    """The task through the generator's chat prompter, and its held-out problems (never trained on)."""
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    return task, set(task.heldout(cfg.task.n_heldout, cfg.seed))


def step_parts(prof: torch.profiler.profile) -> dict[str, float]:
    """Seconds of each named part of an RL step (``rl_step/*``, ``update/*``: summed over its calls)."""
    return {
        e.key: e.cpu_time_total / 1e6
        for e in prof.key_averages()
        if e.key.startswith(("rl_step/", "update/"))
    }


def run_selfverify(conn: Connection, cfg: Config, init: str, steps: int, profile: bool) -> None:
    """selfverify's side: ``rl_step`` on an ``LMWorker``, as ``recipes/rl.py`` drives it; ``profile``: each
    step under ``torch.profiler``, its named parts' seconds in the record."""
    worker = build(cfg.model, cfg.seed, path=init, train=cfg.train, rollout=cfg.rollout)
    tok = worker.get_tokenizer()
    task, exclude = task_and_heldout(cfg, tok)
    worker.start_rl(cfg.rl.lr, grad_clip=cfg.rl.grad_clip, seed=cfg.seed)
    reward_fn = task_rewards(task, tok, cfg.reward)
    meter = Meter()
    worker.generate = meter.timed(worker.generate, rollout_lengths)
    conn.send("ready")
    for step in range(steps):
        conn.recv()
        meter.begin()
        seed = stream_seed(cfg.seed, "generator_rl", 0, step)
        source = problem_source(cfg, task, exclude, f"rl-{step}")
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        with profiler if profile else contextlib.nullcontext():
            meter.reward = rl_step(worker, tok.pad_token_id, cfg.rl, source, reward_fn, seed)["reward"]
        record = meter.record()
        if profile:
            parts = step_parts(profiler)
            # the step outside its named parts: drawing problems, advantages, metrics
            parts["rl_step/rest"] = record["seconds"] - sum(
                v for k, v in parts.items() if k.startswith("rl_step/")
            )
            record["parts"] = parts
        conn.send(record)
    conn.recv()  # "finish": idle until the other side's last step is done too


class Lockstep(TrainerCallback):
    """Runs TRL's steps one at a time on the parent's signals, and sends each one's measurements. After its
    last step it waits for "finish", so that the end of its training never runs beside the other side's."""

    def __init__(self, conn: Connection, meter: Meter) -> None:
        self.conn, self.meter = conn, meter

    def _wait(self) -> None:
        self.conn.recv()  # "go", or "finish" after the last step
        self.meter.begin()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.conn.send("ready")
        self._wait()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.conn.send(self.meter.record())
        self._wait()


def run_trl(conn: Connection, cfg: Config, init: str, steps: int, profile: bool) -> None:
    """TRL's side: ``GRPOTrainer`` on the same weights, prompts, reward and update."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_pretrained(init, cfg.model)
    task, exclude = task_and_heldout(cfg, tok)
    problems = [p for step in range(steps) for p in problem_source(cfg, task, exclude, f"rl-{step}")(0)]
    prompts = [p.prompt for p in problems]
    if tok(prompts)["input_ids"] != tok(prompts, add_special_tokens=False)["input_ids"]:
        raise RuntimeError("TRL's tokenization of the prompts adds special tokens that selfverify's does not")
    meter = Meter()

    def correct(completions: list[str], problem: list[int], **_: Any) -> list[float]:
        pairs = zip(problem, completions, strict=True)
        rewards = [float(task.check(problems[i], text).correct) for i, text in pairs]
        meter.reward = sum(rewards) / len(rewards)
        return rewards

    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=correct,
            args=GRPOConfig(output_dir=out, max_steps=steps, **trl_arguments(cfg)),
            train_dataset=Dataset.from_dict({"prompt": prompts, "problem": list(range(len(problems)))}),
            processing_class=tok,
            callbacks=[Lockstep(conn, meter)],
        )
        trainer.remove_callback(PrinterCallback)  # its dict of training figures at the end: noise here
        trainer._generate = meter.timed(trainer._generate, trl_lengths)
        trainer.train()


RUNNERS = {"selfverify": run_selfverify, "trl": run_trl}


def child(
    side: str, conn: Connection, config: str, overrides: list[str], init: str, steps: int, profile: bool
) -> None:
    """One system's process: its steps on the parent's signals, then its peak memory; or its error."""
    try:
        cfg = load_config(config, overrides)
        configure_torch(cfg.threads)
        RUNNERS[side](conn, cfg, init, steps, profile and side == "selfverify")
        conn.send(peak_memory())
    except BaseException:
        conn.send({"error": traceback.format_exc()})
        sys.exit(1)


def receive(conn: Connection, side: str) -> Any:
    try:
        message = conn.recv()
    except EOFError:
        raise SystemExit(f"{side}'s process ended without a word") from None
    if isinstance(message, dict) and "error" in message:
        raise SystemExit(f"{side} failed:\n{message['error']}")
    return message


def cold_start(config: str, overrides: list[str]) -> str:
    """A cold-started generator made by the RL-only job with no RL steps: its ``checkpoints/cold_start``."""
    run_dir = Path("runs") / f"bench-trl-init-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [sys.executable, "-m", "selfverify.loop", "--config", config, "--run-dir", str(run_dir)]
    cmd += [*overrides, "pipeline=rl", "rl.steps=0"]
    print(f"no --init: cold start with `{' '.join(cmd)}`", file=sys.stderr)
    if subprocess.run(cmd, check=False).returncode != 0:
        raise SystemExit("the cold start failed")
    init = run_dir / "checkpoints" / "cold_start"
    print(f"cold start done: pass --init {init} to reuse it", file=sys.stderr)
    return str(init)


def summarise(records: list[dict[str, float]], memory: dict[str, float | None]) -> dict[str, Any]:
    """A system's figures over its steps after the warm-up (reward and length over all steps)."""
    timed = records[WARMUP:]
    seconds = sum(r["seconds"] for r in timed)
    generation = sum(r["generation_seconds"] for r in timed)
    parts = {}
    if "parts" in timed[0]:  # the median of each part
        parts = {
            "parts_median": {
                k: statistics.median(r["parts"].get(k, 0.0) for r in timed) for k in timed[0]["parts"]
            }
        }
    return {
        "step_seconds_median": statistics.median(r["seconds"] for r in timed),
        "rollout_tokens_per_s": sum(r["generated_tokens"] for r in timed) / generation,
        "training_tokens_per_s": sum(r["tokens"] for r in timed) / (seconds - generation),
        **memory,
        "mean_reward": statistics.fmean(r["reward"] for r in records),
        "mean_response_tokens": sum(r["generated_tokens"] for r in records)
        / sum(r["responses"] for r in records),
        **parts,
        "steps": records,
    }


LABELS = {
    "step_seconds_median": "seconds per optimizer step (median)",
    "rollout_tokens_per_s": "rollout tokens/s",
    "training_tokens_per_s": "training tokens/s",
    "peak_rss_mib": "peak RSS (MiB)",
    "cuda_peak_mib": "CUDA peak allocated (MiB)",
    "mean_reward": "mean reward (all steps)",
    "mean_response_tokens": "mean response tokens (all steps)",
}


def table(results: dict[str, Any]) -> Table:
    out = Table(title=f"selfverify vs TRL {results['trl_version']}: {results['steps']} steps, first left out")
    for column in ("figure", "selfverify", "TRL", "selfverify / TRL"):
        out.add_column(column, justify="left" if column == "figure" else "right")
    for key, label in LABELS.items():
        sv, trl = results["selfverify"][key], results["trl"][key]
        if sv is not None:
            ratio = results["ratio"][key]
            out.add_row(label, f"{sv:.4g}", f"{trl:.4g}", "—" if ratio is None else f"{ratio:.3f}")
    return out


# The parts of a step in order: its named ranges (rl_step.py, trainer.py); "update/*" are within "update".
PARTS = (
    "rl_step/generate",
    "rl_step/reward",
    "rl_step/logprobs",
    "rl_step/update",
    "update/forward",
    "update/backward",
    "update/optimizer",
    "rl_step/rest",
)


def parts_table(parts: dict[str, float], step: float) -> Table:
    """selfverify's step by part: the median seconds of each and its share of the median step."""
    out = Table(title="selfverify's RL step by part (median over the timed steps)")
    for column in ("part", "seconds", "share of the step"):
        out.add_column(column, justify="left" if column == "part" else "right")
    for name in PARTS:
        if name in parts:
            label = name.split("/")[1] if name.startswith("rl_step/") else f"  {name.split('/')[1]}"
            out.add_row(label, f"{parts[name]:.3f}", f"{parts[name] / step:.1%}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--config", default=str(config_dir() / "rl.yaml"), help="selfverify YAML config")
    parser.add_argument("--init", default=None, help="cold-started generator (a Hugging Face directory)")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps each, warm-up included")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_trl.json"), help="the JSON results")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="selfverify's steps under torch.profiler: the seconds of each part of its step (its step times "
        "then carry the profiler's overhead)",
    )
    parser.add_argument("overrides", nargs="*", help="dotted config overrides key=value, e.g. rl.lr=1e-5")
    args = parser.parse_args(argv)
    if args.steps <= WARMUP:
        parser.error(f"--steps must be more than the {WARMUP} warm-up step")
    if importlib.util.find_spec("trl") is None:
        print('error: TRL is not installed: pip install -e ".[trl]"', file=sys.stderr)
        return 2
    overrides = [*WORKLOAD, *args.overrides]
    try:
        cfg = load_config(args.config, overrides)
        trl_arguments(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    init = args.init or cold_start(args.config, args.overrides)

    context = multiprocessing.get_context("spawn")
    conns: dict[str, Connection] = {}
    processes = []
    for side in SIDES:
        conns[side], theirs = context.Pipe()
        process = context.Process(  # daemons: a failure on one side ends the other with this process
            target=child,
            args=(side, theirs, args.config, overrides, init, args.steps, args.profile),
            name=side,
            daemon=True,
        )
        process.start()
        theirs.close()  # their end closes with them: a dead child is an EOF here, not a hang
        processes.append(process)
    for side in SIDES:
        receive(conns[side], side)  # loaded: no step starts while the other side is still loading
    records: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for step in range(args.steps):
        for side in SIDES if step % 2 == 0 else SIDES[::-1]:
            conns[side].send("go")
            records[side].append(receive(conns[side], side))
            seconds = records[side][-1]["seconds"]
            print(f"step {step + 1}/{args.steps} {side}: {seconds:.2f}s", file=sys.stderr)
    for side in SIDES:
        conns[side].send("finish")
    summaries = {side: summarise(records[side], receive(conns[side], side)) for side in SIDES}
    for process in processes:
        process.join()

    sv, other = summaries["selfverify"], summaries["trl"]
    results = {
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "config": args.config,
        "overrides": overrides,
        "init": init,
        "steps": args.steps,
        "warmup_steps": WARMUP,
        "trl_arguments": trl_arguments(cfg),
        "trl_version": version("trl"),
        "torch_version": torch.__version__,
        "device": str(resolve_device(cfg.model.device)),
        "threads": cfg.threads,
        **summaries,
        "ratio": {k: None if sv[k] is None or not other[k] else sv[k] / other[k] for k in LABELS},
    }
    Console().print(table(results))
    if args.profile:
        Console().print(parts_table(sv["parts_median"], sv["step_seconds_median"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
