"""Probe how well the generative verifier's cold start generalises (docs/RESULTS.md, issue 3).

Starts a verifier from a cold-started generator checkpoint, fine-tunes it on ground-truth analyses of a
pool of that generator's samples (``--pool samples``), optionally plus reference solutions with and
without one injected error (``--pool mixed``), and reports ProcessBench metrics of its greedy analyses
of held-out samples from two generators (the cold start and an RL-trained one) at the given steps::

    R=runs/study-objectives/runs
    python scripts/probe_verifier_cold_start.py --cold $R/cold-start-seed0/checkpoints/cold_start \
        --trained $R/grpo-seed0/checkpoints/final --pool mixed --lr 3e-3 --eval-at 150,300,600
"""

from __future__ import annotations

import argparse
import collections
import copy
import random
import time

import torch

from selfverify.models import load_pretrained
from selfverify.prm_train import CORRUPTIONS, corrupt_solution
from selfverify.rollout import encode_pairs, sample
from selfverify.tasks import TaskSpec, check_solution, heldout_split, split_steps, train_problems
from selfverify.trainer import make_optimizer, sft_step
from verifiers.generative import (
    GenerativeVerifier,
    parse_analysis,
    reference_analysis,
    true_score,
    verifier_prompt,
)
from verifiers.metrics import processbench_metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cold", required=True, help="cold-started generator checkpoint (the verifier's init)"
    )
    parser.add_argument(
        "--trained", required=True, help="an RL-trained generator checkpoint (a second eval set)"
    )
    parser.add_argument("--pool", choices=["samples", "mixed"], default="mixed")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-at", default="300", help="comma-separated SFT steps to evaluate at")
    parser.add_argument(
        "--examples", type=int, default=0, help="print this many misjudged samples at the end"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    evals = sorted(int(x) for x in args.eval_at.split(","))
    gen, tok = load_pretrained(args.cold)
    trained, _ = load_pretrained(args.trained)
    spec = TaskSpec()
    held = heldout_split(spec, 256, 0)

    def samples(model: torch.nn.Module, problems: list, seed: int) -> list[list[str]]:
        out = sample(model, tok, [p.prompt for p in problems], max_new_tokens=48, seed=seed)
        return [split_steps(t) for t in out.texts]

    pool = train_problems(spec, 2048, seed=0, tag="judge-pool", exclude=set(held))
    pairs = [
        (verifier_prompt(p.prompt, s), reference_analysis(p, s))
        for p, s in zip(pool, samples(gen, pool, 1), strict=True)
    ]
    if args.pool == "mixed":
        rng = random.Random(0)
        for p in train_problems(spec, 2048, seed=0, tag="judge-refs", exclude=set(held)):
            s = (
                p.reference_solution().splitlines()
                if rng.random() < 0.4
                else corrupt_solution(p, rng.choice(CORRUPTIONS), rng)
            )
            pairs.append((verifier_prompt(p.prompt, s), reference_analysis(p, s)))
    eval_sets = {"cold": samples(gen, held, 999), "trained": samples(trained, held, 999)}
    verifier = GenerativeVerifier(copy.deepcopy(gen), tok, max_new_tokens=80)

    def evaluate(step: int) -> None:
        for name, steps in eval_sets.items():
            texts = verifier.generate(
                [verifier_prompt(p.prompt, s) for p, s in zip(held, steps, strict=True)]
            )
            verdicts = [parse_analysis(t, len(s)) for t, s in zip(texts, steps, strict=True)]
            checks = [check_solution(p, "\n".join(s)) for p, s in zip(held, steps, strict=True)]
            m = processbench_metrics([v.earliest_error for v in verdicts], [c.earliest_error for c in checks])
            score = sum(
                v.score == true_score(p, c) for p, v, c in zip(held, verdicts, checks, strict=True)
            ) / len(held)
            print(
                f"step {step} {name}: f1 {m['f1']:.3f} acc_err {m['acc_err']:.3f} "
                f"acc_corr {m['acc_corr']:.3f} (n_corr {m['n_corr']}) score_acc {score:.3f}",
                flush=True,
            )

    opt, sched = make_optimizer(verifier.model, args.lr, warmup_steps=20, total_steps=evals[-1])
    rng, start = random.Random(1), time.time()
    for step in range(1, evals[-1] + 1):
        batch = rng.sample(pairs, 64)
        m = sft_step(
            verifier.model, opt, sched, encode_pairs(tok, [x for x, _ in batch], [y for _, y in batch])
        )
        if step in evals:
            print(f"step {step}: loss {m['loss']:.3f}, {time.time() - start:.0f} s", flush=True)
            evaluate(step)
    shown = collections.Counter()
    steps = eval_sets["trained"]
    texts = verifier.generate([verifier_prompt(p.prompt, s) for p, s in zip(held, steps, strict=True)])
    for p, s, t in zip(held, steps, texts, strict=True):
        if parse_analysis(t, len(s)).earliest_error != check_solution(p, "\n".join(s)).earliest_error:
            shown["misjudged"] += 1
            if shown["misjudged"] <= args.examples:
                print(f"{p.prompt.strip()} {s}\n  got  {t!r}\n  want {reference_analysis(p, s)!r}")


if __name__ == "__main__":
    main()
