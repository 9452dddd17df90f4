"""Probe how well the generative verifier's cold start generalises (docs/RESULTS.md, issue 3).

Starts a verifier from a cold-started generator checkpoint (or ``--fresh LxW``: a fresh model of that
shape), fine-tunes it on ground-truth analyses of a pool of that generator's samples (``--pool
samples``), optionally plus reference solutions with and without one injected error (``--pool
mixed``), optionally replacing a share of every batch by fresh such solutions (``--stream F``), and
reports ProcessBench metrics of its greedy analyses of held-out samples from two generators (the cold
start and an RL-trained one) at the given steps. The setting that reached F1 0.93::

    R=runs/study-objectives/runs
    python scripts/probe_verifier_cold_start.py --cold $R/cold-start-seed0/checkpoints/cold_start \
        --trained $R/grpo-seed0/checkpoints/final --pool samples --stream 0.5 --lr 1e-3 \
        --eval-at 1000,1500,2000

Exploratory formats instead of ``selfverify.judges.generative``'s: ``--interleaved`` (the verifier sees only
the problem, writes step i's expected form and ``|``, is then shown step i as forced tokens without
loss, ``$`` marking the last, and writes ``+``/``-``: it cannot copy the step it judges); ``--cmc``
(copy the given step, mark it, and write the correction after a ``-``). Loss weights:
``--mark-weight`` (interleaved marks and score), ``--decision-weight`` (the last judged line and the
score).
"""

from __future__ import annotations

import argparse
import copy
import random
import re
import time
from collections.abc import Sequence

import torch
from transformers import GenerationConfig

from selfverify.config.schema import ModelSpec
from selfverify.judges.generative import (
    GenerativeVerifier,
    expected_lines,
    format_score,
    reference_analysis,
    score_for,
    verifier_prompt,
)
from selfverify.judges.metrics import processbench_metrics
from selfverify.runtime.engines import TorchEngine
from selfverify.runtime.models import build_model, load_pretrained
from selfverify.runtime.rollout import Rollout, encode_pairs, sample_texts
from selfverify.runtime.trainer import sft_step
from selfverify.tasks import Problem, TaskSpec, check_solution, heldout_split, split_steps, train_problems
from selfverify.tasks.arithmetic import synthetic_solution

Sample = tuple[Problem, list[str]]
_LINE = re.compile(r"^(\S{0,40})\|(.{0,80}?)(\$?) ([+-])$")


def interleaved_segments(
    problem: Problem, steps: Sequence[str], mark_weight: float
) -> list[tuple[str, float]]:
    """The faithful interleaved analysis as (text, loss weight) pieces; weight 0 = shown, not written."""
    check = check_solution(problem, "\n".join(steps))
    n, error = len(check.steps), check.earliest_error
    expected = expected_lines(problem, max(n, 1))
    last = error if error >= 0 else n - 1
    out: list[tuple[str, float]] = []
    for i in range(last + 1 if n else 1):
        given = check.steps[i] if i < n else ""
        out.append(("\n" * (i > 0) + expected[i] + "|", 1.0))
        out.append((given + "$" * (i >= n - 1) + " ", 0.0))
        out.append(("-" if i == error or n == 0 else "+", mark_weight))
    score = score_for(problem, error)
    out.append(("\nS:" + format_score(score), mark_weight))
    return out


def interleaved_batch(tok, samples: Sequence[Sample], mark_weight: float) -> Rollout:
    """Teacher-forced batch whose response mask is the loss weight of each token (0 on shown steps)."""
    rows = []
    for problem, steps in samples:
        ids = tok(problem.prompt + "#V\n", add_special_tokens=False)["input_ids"]
        prompt_len, weights = len(ids), []
        for text, weight in interleaved_segments(problem, steps, mark_weight):
            piece = tok(text, add_special_tokens=False)["input_ids"]
            ids, weights = ids + piece, weights + [weight] * len(piece)
        rows.append((ids + [tok.eos_token_id], weights + [1.0], prompt_len))
    p_len = max(r[2] for r in rows)
    t_len = max(len(r[0]) - r[2] for r in rows)
    input_ids = torch.full((len(rows), p_len + t_len), tok.pad_token_id)
    attention = torch.zeros_like(input_ids)
    mask = torch.zeros(len(rows), t_len)
    for b, (ids, weights, prompt_len) in enumerate(rows):
        start = p_len - prompt_len  # prompts are left-padded
        input_ids[b, start : start + len(ids)] = torch.tensor(ids)
        attention[b, start : start + len(ids)] = 1
        mask[b, : len(weights)] = torch.tensor(weights)
    return Rollout(
        input_ids, attention, mask, p_len, [""] * len(rows), torch.zeros(len(rows), dtype=torch.bool)
    )


@torch.no_grad()
def interleaved_judge(model, tok, samples: Sequence[Sample]) -> list[tuple[int, float] | None]:
    """Greedy interleaved analyses: generate to ``|`` (or the end), show the next step, repeat."""
    bar = tok.convert_tokens_to_ids("|")
    texts = [p.prompt + "#V\n" for p, _ in samples]
    analyses = [""] * len(samples)
    active = list(range(len(samples)))
    gen = GenerationConfig(
        max_new_tokens=30, eos_token_id=[tok.eos_token_id, bar], pad_token_id=tok.pad_token_id
    )
    model.eval()
    for i in range(8):
        if not active:
            break
        enc = tok([texts[b] for b in active], return_tensors="pt", padding=True, padding_side="left")
        out = model.generate(**enc, generation_config=gen)
        still = []
        for b, text in zip(active, tok.batch_decode(out[:, enc["input_ids"].shape[1] :]), strict=True):
            text = text.replace(tok.pad_token, "")
            if tok.eos_token in text or not text.endswith("|"):
                analyses[b] += text.split(tok.eos_token)[0]
                continue
            steps = samples[b][1]
            shown = (steps[i] if i < len(steps) else "") + "$" * (i >= len(steps) - 1) + " "
            texts[b] += text + shown
            analyses[b] += text + shown
            still.append(b)
        active = still
    return [_parse_interleaved(a, len(s)) for a, (_, s) in zip(analyses, samples, strict=True)]


def _parse_interleaved(text: str, n_steps: int) -> tuple[int, float] | None:
    lines = text.strip().split("\n")
    score = re.fullmatch(r"S:(0|0\.5|1)", lines[-1].strip())
    marks = [m.group(4) if (m := _LINE.match(line.strip())) else "?" for line in lines[:-1]]
    if score is None or "?" in marks:
        return None
    wrong = marks.index("-") if "-" in marks else -1
    if len(marks) != (wrong + 1 if wrong >= 0 else n_steps):
        return None
    return (wrong if n_steps else 0), float(score.group(1))


def cmc_analysis(problem: Problem, steps: Sequence[str]) -> str:
    """Copy-mark-correct: each judged line is the given step, its mark, and for the wrong one the
    step as it should read; then the score."""
    check = check_solution(problem, "\n".join(steps))
    n, error = len(check.steps), check.earliest_error
    expected = expected_lines(problem, max(n, 1))
    last = error if error >= 0 else n - 1
    lines = (
        [
            f"{check.steps[i]} - {expected[i]}" if i == error else f"{check.steps[i]} +"
            for i in range(last + 1)
        ]
        if n
        else [f". - {expected[0]}"]
    )
    return "\n".join([*lines, "S:" + format_score(score_for(problem, error))])


_CMC = re.compile(r"^(\S{1,40}) ([+-])(?: \S{1,40})?$")


def cmc_judge(model, tok, samples: Sequence[Sample]) -> list[tuple[int, float] | None]:
    texts = GenerativeVerifier(model, tok, max_new_tokens=80).generate(
        [verifier_prompt(p.prompt, s) for p, s in samples]
    )
    out = []
    for text, (_, steps) in zip(texts, samples, strict=True):
        lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
        score = re.fullmatch(r"S:(0|0\.5|1)", lines[-1]) if lines else None
        marks = [m.group(2) if (m := _CMC.match(x)) else "?" for x in lines[:-1]]
        if score is None or "?" in marks:
            out.append(None)
            continue
        wrong = marks.index("-") if "-" in marks else -1
        n = len(steps)
        ok = len(marks) == (wrong + 1 if wrong >= 0 else n) or (n == 0 and marks == ["-"])
        out.append(((wrong if n else 0), float(score.group(1))) if ok else None)
    return out


def plain_judge(model, tok, samples: Sequence[Sample]) -> list[tuple[int, float] | None]:
    verdicts = GenerativeVerifier(model, tok, max_new_tokens=80).analyse(
        [p.prompt for p, _ in samples], [s for _, s in samples]
    )
    return [(v.earliest_error, v.score) if v.parsed else None for v in verdicts]


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
    parser.add_argument("--interleaved", action="store_true", help="the exploratory interleaved format")
    parser.add_argument("--mark-weight", type=float, default=1.0, help="loss weight of marks and score")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--fresh", default="", help="LAYERSxWIDTH: a fresh judge of that shape")
    parser.add_argument("--cmc", action="store_true", help="the copy-mark-correct format")
    parser.add_argument("--decision-weight", type=float, default=1.0, help="loss weight, last line + score")
    parser.add_argument(
        "--stream",
        type=float,
        default=0.0,
        help="fraction of each batch drawn as fresh references (40%% clean, else one injected error)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    evals = sorted(int(x) for x in args.eval_at.split(","))
    gen, tok = load_pretrained(args.cold)
    trained, _ = load_pretrained(args.trained)
    spec = TaskSpec()
    held = heldout_split(spec, 256, 0)

    def samples_of(model: torch.nn.Module, problems: list[Problem], seed: int) -> list[Sample]:
        texts = sample_texts(
            model, tok, [p.prompt for p in problems], max_new_tokens=48, batch_size=256, seed=seed
        )
        return [(p, split_steps(t)) for p, t in zip(problems, texts, strict=True)]

    pool = samples_of(gen, train_problems(spec, 2048, seed=0, tag="judge-pool", exclude=set(held)), 1)
    if args.pool == "mixed":
        rng = random.Random(0)
        for p in train_problems(spec, 2048, seed=0, tag="judge-refs", exclude=set(held)):
            pool.append((p, synthetic_solution(p, rng, correct_fraction=0.4)[1]))
    eval_sets = {"cold": samples_of(gen, held, 999), "trained": samples_of(trained, held, 999)}
    if args.fresh:  # a fresh judge of the given shape instead of a copy of the generator
        layers, width = (int(x) for x in args.fresh.split("x"))
        shape = ModelSpec(hidden_size=width, num_layers=layers, num_heads=4, intermediate_size=3 * width)
        verifier = build_model(shape, tok, 0)
    else:
        verifier = copy.deepcopy(gen)
    judge = interleaved_judge if args.interleaved else cmc_judge if args.cmc else plain_judge

    def batch_of(chosen: list[Sample]) -> Rollout:
        if args.interleaved:
            return interleaved_batch(tok, chosen, args.mark_weight)
        targets = [(cmc_analysis if args.cmc else reference_analysis)(p, s) for p, s in chosen]
        batch = encode_pairs(tok, [verifier_prompt(p.prompt, s) for p, s in chosen], targets)
        for b, t in enumerate(targets):  # the decision: the last judged line and the score line
            cut = t.rstrip("\n").rfind("\n", 0, t.rstrip("\n").rfind("\n")) + 1
            batch.response_mask[b, cut : len(t) + 1] *= args.decision_weight
        return batch

    engine = TorchEngine(verifier, args.lr, grad_clip=1.0, warmup_steps=20, total_steps=evals[-1])
    rng, start = random.Random(1), time.time()
    for step in range(1, evals[-1] + 1):
        n_fresh = round(args.batch * args.stream)
        fresh = []
        for p in train_problems(spec, n_fresh, seed=0, tag=f"stream-{step}", exclude=set(held)):
            fresh.append((p, synthetic_solution(p, rng, correct_fraction=0.4)[1]))
        m = sft_step(engine, batch_of(rng.sample(pool, args.batch - n_fresh) + fresh))
        if step not in evals:
            continue
        print(f"step {step}: loss {m['loss']:.3f}, {time.time() - start:.0f} s", flush=True)
        for name, samples in eval_sets.items():
            judged = judge(verifier, tok, samples)
            labels = [check_solution(p, "\n".join(s)).earliest_error for p, s in samples]
            pb = processbench_metrics(
                [j[0] if j else -2 for j in judged], labels
            )  # -2: unparsed, never right
            parsed = sum(j is not None for j in judged) / len(judged)
            print(
                f"  {name} samples: f1 {pb['f1']:.3f} acc_err {pb['acc_err']:.3f} "
                f"acc_corr {pb['acc_corr']:.3f} (n_corr {pb['n_corr']}) parsed {parsed:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
