"""How much a policy could gain by sharpening: of the held-out problems it gets wrong greedily, how
many it sometimes gets right when sampling (and of those it gets right, how many it sometimes gets
wrong), so the room RL has without teaching anything new.

    python scripts/sharpening_headroom.py runs/x/checkpoints/cold_start --config configs/smollm2_rl.yaml \\
        --problems 128 --samples 8 --temperatures 1.0,1.5

Prints one JSON line per temperature. Generation dominates: 128 × 8 samples of SmolLM2-135M take
about 7 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json

import torch

from selfverify.config.load import load_config
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import build
from selfverify.tasks import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a policy's checkpoint directory")
    parser.add_argument("--config", default=None, help="the recipe that trained it (task, model keys)")
    parser.add_argument(
        "--problems", type=int, default=128, help="held-out problems (the first of the split)"
    )
    parser.add_argument("--samples", type=int, default=8, help="samples per problem")
    parser.add_argument("--temperatures", default="1.0", help="comma-separated sampling temperatures")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (plus the temperature's index)")
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value) after the recipe's")
    args = parser.parse_intermixed_args()
    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(cfg.threads)
    worker = build(cfg.model, cfg.seed, path=args.checkpoint)
    task = make_task(cfg.task, chat_prompter(worker.get_tokenizer(), cfg.model))
    problems = task.heldout(max(args.problems, cfg.task.n_heldout), cfg.seed)[: args.problems]
    new_tokens, batch = cfg.rl.max_new_tokens, cfg.eval_batch_size

    def right(ps: list, texts: list[str]) -> list[bool]:
        return [task.check(p, t).correct for p, t in zip(ps, texts, strict=True)]

    prompts = [p.prompt for p in problems]
    greedy = right(
        problems, worker.generate_texts(prompts, max_new_tokens=new_tokens, batch_size=batch, greedy=True)
    )
    k = args.samples
    for i, temperature in enumerate(float(t) for t in args.temperatures.split(",")):
        texts = worker.generate_texts(
            [p for p in prompts for _ in range(k)],
            max_new_tokens=new_tokens,
            batch_size=batch,
            temperature=temperature,
            seed=args.seed + i,
        )
        ok = right([p for p in problems for _ in range(k)], texts)
        hits = [sum(ok[j * k : (j + 1) * k]) for j in range(len(problems))]
        pairs = list(zip(greedy, hits, strict=True))
        print(
            json.dumps(
                {
                    "temperature": temperature,
                    "problems": len(problems),
                    "samples": k,
                    "greedy_accuracy": sum(greedy) / len(problems),
                    "sample_accuracy": sum(hits) / (len(problems) * k),
                    "greedy_wrong": sum(not g for g in greedy),
                    "greedy_wrong_some_sample_right": sum(not g and h > 0 for g, h in pairs),
                    "greedy_right_some_sample_wrong": sum(g and h < k for g, h in pairs),
                    "every_sample_wrong": sum(h == 0 for h in hits),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
