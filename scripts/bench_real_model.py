"""Throughput of a real model on this machine: generation and training tokens/s, and its zero-shot
held-out accuracy on a task, as the loop runs them (HF generate with the KV cache, an SFT step, one
GRPO step).

    python scripts/bench_real_model.py --model smollm2 --task arithmetic_nl --out bench.json
    python scripts/bench_real_model.py --vllm-python .venv-vllm/bin/python   # and vLLM's generation
    python scripts/bench_real_model.py --config configs/smollm2_rl.yaml model.autocast=null   # overrides

With ``--vllm-python`` the same batch is also sampled by the vLLM rollout engine (after one call that
starts it), and its tokens/s is set against HF generate's.

Run it alone: on two cores anything else running skews a timing several-fold.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from selfverify.config.load import load_config
from selfverify.recipes.evaluate import evaluate_generator
from selfverify.recipes.rl_step import rl_step
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.rollout import encode_by_length
from selfverify.runtime.trainer import on_policy
from selfverify.runtime.workers import build
from selfverify.tasks import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model.path")
    parser.add_argument("--task", default="arithmetic_nl")
    parser.add_argument("--config", default=None, help="a recipe to take the other settings from")
    parser.add_argument("--batch", type=int, default=32, help="responses per generation / RL batch")
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--heldout", type=int, default=128, help="problems for the zero-shot accuracy")
    parser.add_argument("--vllm-python", default=None, help="also time vLLM's generation (its Python)")
    parser.add_argument("--vllm-compile", action="store_true", help="let vLLM compile (enforce_eager off)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value) after the recipe's")
    args = parser.parse_args()
    cfg = load_config(args.config, [f"model.path={args.model}", f"task.name={args.task}", *args.overrides])
    torch.set_num_threads(cfg.threads)
    worker = build(cfg.model, cfg.seed)  # in the recipe's precision (model.autocast)
    tok = worker.tokenizer
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    heldout = task.heldout(args.heldout, cfg.seed)
    problems = task.train_problems(args.batch, seed=cfg.seed, tag="bench", exclude=set(heldout))
    prompts = [p.prompt for p in problems]

    start = time.perf_counter()
    zero_shot = evaluate_generator(
        worker, task, heldout, max_new_tokens=args.new_tokens, batch_size=cfg.eval_batch_size
    )
    eval_s = time.perf_counter() - start

    # Each timing is of a second call: the first builds the CPU kernels (oneDNN) for these shapes.
    worker.generate(prompts, max_new_tokens=args.new_tokens, seed=0)
    start = time.perf_counter()
    out = worker.generate(prompts, max_new_tokens=args.new_tokens, seed=0)
    gen_s = time.perf_counter() - start
    generated = int(out.lengths.sum())

    # Training: one SFT step on demonstrations (every token of prompt and response goes through the
    # forward and backward pass; the loss reads the response tokens).
    worker.start_sft(1e-12, warmup_steps=0, total_steps=2)
    demos = [task.demonstration(p, direct=False) for p in problems]
    worker.sft_step(prompts, demos)
    start = time.perf_counter()
    worker.sft_step(prompts, demos)
    train_s = time.perf_counter() - start
    trained = sum(int(b.attention_mask.sum()) for b in encode_by_length(tok, prompts, demos))

    rl = cfg.rl
    rl.prompts_per_step, rl.group_size, rl.max_new_tokens = args.batch // 4, 4, args.new_tokens
    worker.start_rl(1e-12)

    def reward(ps: list, rollout: object) -> tuple[torch.Tensor, torch.Tensor]:
        correct = torch.tensor([task.check(p, t).correct for p, t in zip(ps, rollout.texts, strict=True)])
        return correct.float(), correct

    rl_step(worker, tok.pad_token_id, rl, lambda _r: problems[: rl.prompts_per_step], reward, seed=1)
    start = time.perf_counter()
    rl_step(worker, tok.pad_token_id, rl, lambda _r: problems[: rl.prompts_per_step], reward, seed=1)
    step_s = time.perf_counter() - start
    result = {
        "model": args.model,
        "task": args.task,
        "threads": cfg.threads,
        "autocast": cfg.model.autocast,
        "parameters": sum(p.numel() for p in worker.model.parameters()),
        "zero_shot_heldout": {**zero_shot, "problems": len(heldout), "seconds": round(eval_s, 1)},
        "generation": {
            "responses": len(prompts),
            "generated_tokens": generated,
            "seconds": round(gen_s, 2),
            "tokens_per_s": round(generated / gen_s, 1),
        },
        "training": {
            "tokens": trained,
            "seconds": round(train_s, 2),
            "tokens_per_s": round(trained / train_s, 1),
        },
        "rl_step": {
            "responses": rl.prompts_per_step * rl.group_size,
            "seconds": round(step_s, 2),
            "what": "sampling and one PPO update"
            + ("" if on_policy(rl) else ", after a forward for the old log-probs"),
        },
    }
    if args.vllm_python:
        result["vllm_generation"] = time_vllm(cfg, args, prompts, result["generation"]["tokens_per_s"])
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


def time_vllm(cfg, args: argparse.Namespace, prompts: list[str], hf_tokens_per_s: float) -> dict:
    """The same batch sampled by the vLLM rollout engine, after one call that starts it."""
    rollout = replace(
        cfg.rollout, engine="vllm", vllm_python=args.vllm_python, enforce_eager=not args.vllm_compile
    )
    served = build(cfg.model, cfg.seed, rollout=rollout)
    start = time.perf_counter()
    served.generate(prompts[:1], max_new_tokens=args.new_tokens, seed=0)
    startup_s = time.perf_counter() - start
    start = time.perf_counter()
    out = served.generate(prompts, max_new_tokens=args.new_tokens, seed=0)
    gen_s = time.perf_counter() - start
    served.vllm.close()
    generated = int(out.lengths.sum())
    return {
        "responses": len(prompts),
        "generated_tokens": generated,
        "seconds": round(gen_s, 2),
        "tokens_per_s": round(generated / gen_s, 1),
        "vs_hf_generate": round(generated / gen_s / hf_tokens_per_s, 2),
        "startup_seconds": round(startup_s, 1),
        "enforce_eager": rollout.enforce_eager,
        **served.rollout_engine_stats(),
    }


if __name__ == "__main__":
    main()
