"""Why a verifier misses the generator's errors: fresh samples of a run's generator, each wrong one's
earliest error by kind, and what the verifier's analysis wrote at that step.

    python scripts/judge_misses.py RUN_DIR [--judge checkpoints/latest/judge] [--samples 400]

For the embedded world's compact judge format (docs/results/hard.md). What the analysis did at the
earliest wrong step, per kind of error:

- ``located``: it names that step;
- ``claim_from_itself``: it derives the step right but quotes its own result as the solution's claim,
  and so passes the step (a copy failed, not the arithmetic); ``claim_other``: it quotes another
  wrong claim; ``derived_right_passed``: it derives the step and quotes the claim right, and passes it;
- ``derived_as_given``: it derives the step as the solution wrongly wrote it (it copied the step, or
  makes the same mistake);
- ``derived_otherwise``: it derives the step wrong in another way;
- ``before``: it names an earlier step, which is right; ``stopped``: it ends before the step;
  ``unparsed``: the analysis does not parse.

Prints one JSON object: per kind, its wrong samples and the count of each outcome.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

from selfverify.config.load import load_config
from selfverify.judges.base import Verdict
from selfverify.judges.compact_judge import NOTHING, analysis_lines, claimed_result, expected_lines, quoted
from selfverify.judges.generative import GenerativeVerifier, make_format
from selfverify.recipes.judge_data import judge_format_name
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import build
from selfverify.tasks.arithmetic import Problem
from selfverify.tasks.registry import make_task


def main(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--generator", default="checkpoints/latest/generator", help="relative to RUN_DIR")
    p.add_argument("--judge", default="checkpoints/latest/judge", help="relative to RUN_DIR")
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    for model in (args.generator, args.judge):
        if not (args.run_dir / model).is_dir():  # else it is taken for a hub name
            p.error(f"no model at {args.run_dir / model}")
    cfg = load_config(args.run_dir / "config.yaml")
    if cfg.task.name != "embedded" or judge_format_name(cfg) != "compact":
        p.error(f"{args.run_dir}: the embedded world with the compact judge format only")
    generator = build(cfg.model, cfg.seed, args.run_dir / args.generator)
    judge = build(cfg.model, cfg.seed, args.run_dir / args.judge)
    task = make_task(cfg.task, chat_prompter(generator.get_tokenizer(), cfg.model))
    problems = task.train_problems(args.samples, seed=cfg.seed, tag="judge-misses", exclude=set())
    texts = generator.generate_texts(
        [q.prompt for q in problems],
        max_new_tokens=cfg.rl.max_new_tokens,
        batch_size=256,
        temperature=args.temperature,
        seed=cfg.seed,
    )
    steps = [task.split_steps(t) for t in texts]
    verifier = GenerativeVerifier(
        judge, fmt=make_format("compact"), max_new_tokens=cfg.loop.judge_max_new_tokens, batch_size=128
    )
    verdicts = verifier.analyse([q.text for q in problems], steps)
    outcomes: dict[str, Counter[str]] = {}
    for q, given, verdict in zip(problems, steps, verdicts, strict=True):
        check = task.check(q, "\n".join(given))
        if (kind := task.error_kind(q, check)) is None:
            continue
        outcomes.setdefault(kind, Counter())[outcome(q, given, check.earliest_error, verdict)] += 1
    out = {
        kind: {"wrong": sum(c.values()), **dict(c.most_common())}
        for kind, c in sorted(outcomes.items(), key=lambda kc: -sum(kc[1].values()))
    }
    print(json.dumps(out, indent=1))
    return out


def outcome(problem: Problem, given: list[str], error: int, verdict: Verdict) -> str:
    """What the analysis did at the earliest wrong step ``error`` (the module docstring's names)."""
    if not verdict.parsed:
        return "unparsed"
    if verdict.earliest_error == error:
        return "located"
    if 0 <= verdict.earliest_error < error:
        return "before"
    lines, _ = analysis_lines(verdict.analysis)  # it parsed
    if error >= len(lines):
        return "stopped"
    derived, claim, _ = lines[error]
    expected = quoted(expected_lines(problem, len(given))[error])
    step = given[error] if error < len(given) else NOTHING
    if derived == expected:
        if claim == claimed_result(step):
            return "derived_right_passed"
        return "claim_from_itself" if claim == claimed_result(derived) else "claim_other"
    return "derived_as_given" if derived == quoted(step) else "derived_otherwise"


if __name__ == "__main__":
    main()
