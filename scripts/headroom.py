"""How much room a generator leaves a verifier: greedy accuracy, error kinds and bare answers, then
pass@k (oracle: any of k samples right), majority@k over k samples of each held-out problem, and how
many problems have each number of right samples.

    python scripts/headroom.py RUN_DIR [--model checkpoints/latest/generator] [--k 16] [--problems 256]

(an RL-only run's generator: ``--model checkpoints/final``)

The probe behind the hard world's design (docs/results/hard.md); prints one JSON object. The run's
task must be the embedded world (its errors are named by kind).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

from selfverify.config.load import load_config
from selfverify.judges.rewards import shows_working
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import build
from selfverify.tasks.registry import make_task


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--model", default="checkpoints/latest/generator", help="relative to RUN_DIR")
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--problems", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    if not (args.run_dir / args.model).is_dir():  # else it is taken for a hub name
        p.error(f"no model at {args.run_dir / args.model} (an RL-only run keeps it in checkpoints/final)")
    cfg = load_config(args.run_dir / "config.yaml")
    worker = build(cfg.model, cfg.seed, args.run_dir / args.model)
    task = make_task(cfg.task, chat_prompter(worker.get_tokenizer(), cfg.model))
    held = task.heldout(cfg.task.n_heldout, cfg.seed)[: args.problems]
    n, k, budget = len(held), args.k, cfg.rl.max_new_tokens
    greedy = worker.generate_texts(
        [q.prompt for q in held], max_new_tokens=budget, batch_size=256, greedy=True
    )
    checks = [task.check(q, t) for q, t in zip(held, greedy, strict=True)]
    kinds = Counter(task.error_kind(q, c) for q, c in zip(held, checks, strict=True))
    texts = worker.generate_texts(
        [q.prompt for q in held for _ in range(k)],
        max_new_tokens=budget,
        batch_size=256,
        temperature=args.temperature,
        seed=cfg.seed,
    )
    samples = [[task.check(q, texts[i * k + j]) for j in range(k)] for i, q in enumerate(held)]
    majority, spread = 0, Counter(sum(c.correct for c in row) for row in samples)
    for q, row in zip(held, samples, strict=True):
        votes = Counter(c.answer for c in row if c.answer is not None)
        majority += bool(votes) and votes.most_common(1)[0][0] == q.answer
    out = {
        "problems": n,
        "greedy": sum(c.correct for c in checks) / n,
        "greedy_valid": sum(c.correct and c.all_steps_valid for c in checks) / n,
        "greedy_bare": sum(not shows_working(c.steps) for c in checks) / n,
        "greedy_length": sum(map(len, greedy)) / n,
        "greedy_errors": {str(kind): v / n for kind, v in kinds.most_common() if kind is not None},
        "sample_accuracy": sum(c.correct for row in samples for c in row) / (n * k),
        **{
            f"pass@{m}": sum(any(c.correct for c in row[:m]) for row in samples) / n
            for m in (1, 2, 4, 8, 16, 32)
            if m <= k
        },
        f"majority@{k}": majority / n,
        # How the right samples spread over problems: problems by how many of their k samples are right.
        # Homogeneous difficulty at the same one-sample accuracy leaves few problems at 0.
        "problems_by_right_samples": dict(sorted(spread.items())),
    }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
