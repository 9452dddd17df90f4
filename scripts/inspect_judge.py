"""Show how a loop run's judge works: ProcessBench metrics of its greedy analyses of held-out generator
samples (and its verdict on the problems' reference solutions), what it wrote at each truly wrong
sample's earliest error, how often it located each kind of error, how often it locates a synthetic slip
by how far the slip is off, the run's meta-verifications of the analyses (by the judge, or by a
meta-verifier of its own) and (true meta label, verdict, what its own check names) counts, and, for the
analyses it should reject, whether its own check follows the analysis shown (the faithful one shown
instead) and how often the verifier, resampled, locates the error, and how the meta-verifiers of other
runs (``--auditor``) audit the same analyses (docs/RESULTS.md, "Self-verification loop" and "The
meta-verifier as an auditor")::

    python scripts/inspect_judge.py runs/sv3/d1 --n 64 --show 6
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import torch

from selfverify.config.load import load_config
from selfverify.judges.base import Verdict
from selfverify.judges.generative import (
    GenerativeVerifier,
    MetaVerifier,
    claimed_result,
    expected_lines,
    meta_label,
    meta_prompt,
    meta_reference,
    parse_analysis,
    parse_meta,
    reference_analysis,
    require_format,
)
from selfverify.judges.metrics import processbench_metrics
from selfverify.runtime.checkpoint import load_bundle
from selfverify.runtime.rollout import sample_texts
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Problem, StepCheck, check_solution, heldout_split, split_steps
from selfverify.tasks.arithmetic import OFFSETS, slipped_solution


def verifier_outcome(problem: Problem, steps: tuple[str, ...], check: StepCheck, verdict: Verdict) -> str:
    """How the verifier did on one sample; for a missed error, what its line at that step says."""
    wrong = check.earliest_error
    if wrong < 0:
        return "correct sample: " + ("judged right" if verdict.earliest_error == -1 else "flagged")
    if verdict.earliest_error == wrong:
        return "wrong sample: error located"
    if verdict.earliest_error != -1 and verdict.earliest_error < wrong:
        return "wrong sample: an earlier step flagged"
    lines = verdict.analysis.splitlines()[:-1]  # the step lines, without S:
    if not verdict.parsed or wrong >= len(lines):
        return "wrong sample: missed (unparsed or short analysis)"
    expected, claimed, mark = lines[wrong].rsplit(" ", 2)
    right = "right" if expected == expected_lines(problem, len(steps))[wrong] else "WRONG"
    copied = "copied" if claimed == claimed_result(steps[wrong]) else "miscopied"
    return f"wrong sample: missed; expected line {right}, claim {copied}, mark {mark}"


def error_kind(problem: Problem, steps: tuple[str, ...], check: StepCheck) -> str:
    """What a wrong sample's earliest error is: at the answer line or after it; a line that is no
    operation where one is due (mostly an answer written before the working); a slip (the step's
    operands right, its result off by one or by more); a wrong operand (a miscopied carry or a misread
    number) with the result the right value or not."""
    wrong = check.earliest_error
    if wrong >= len(problem.ops):
        return "at the answer line or after it"
    given = "".join(steps[wrong].split())
    if "=" not in given:
        return "no operation where one is due (e.g. an early answer)"
    expected = expected_lines(problem, len(steps))[wrong]
    (given_work, given_result), (work, result) = given.rsplit("=", 1), expected.rsplit("=", 1)
    if given_work == work:
        # Off by one is the generator's usual slip and the hardest for the judge to see.
        off_by_one = given_result.lstrip("-").isdigit() and abs(int(given_result) - int(result)) == 1
        return f"a slip (operands right, result off by {'one' if off_by_one else 'more'})"
    return "a wrong operand, the result right" if given_result == result else "a wrong operand"


def own_check(output: str, steps: tuple[str, ...], check: StepCheck, verdict: Verdict) -> str:
    """Which earliest wrong step the meta-verifier's own check (its lines before ``M:``) names: the true
    one, the one the audited analysis names (where that is not the truth: it repeats the verifier's
    mistake), another, or none it can parse."""
    own = parse_analysis("\n".join(output.strip().splitlines()[:-1]), len(steps))
    if not own.parsed:
        return "own check unparsed"
    if own.earliest_error == check.earliest_error:
        return "own check: the true step"
    return (
        "own check: the audited step"
        if own.earliest_error == verdict.earliest_error
        else "own check: another"
    )


def blind_verdicts(
    auditor: LMWorker,
    budget: int,
    problems: list[Problem],
    samples: list[tuple[str, ...]],
    verdicts: list[Verdict],
) -> list[float]:
    """An auditor's check made blind (``loop.meta_audit=blind``): its own analysis of each solution,
    written without seeing the audited one, then compared with it (``verdict_agreement``)."""
    blind = MetaVerifier(auditor, budget, blind=True)
    judged = blind.meta_verify([p.prompt for p in problems], samples, [v.analysis for v in verdicts])
    return [score for score, _ in judged]


def audit_line(name: str, verdicts: list[float], labels: list[float]) -> str:
    """Faithful analyses confirmed and unfaithful ones caught (the verdict equals the meta label)."""
    right = [v == label for v, label in zip(verdicts, labels, strict=True)]
    faithful = [r for r, label in zip(right, labels, strict=True) if label == 1.0]
    caught = [r for r, label in zip(right, labels, strict=True) if label < 1.0]
    confirmed = f"faithful analyses confirmed {sum(faithful)}/{len(faithful)}"
    return f"{name}: {confirmed}, unfaithful caught {sum(caught)}/{len(caught)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a pipeline=selfverify run (checkpoints/latest)")
    parser.add_argument("--n", type=int, default=64, help="held-out problems")
    parser.add_argument("--show", type=int, default=6, help="misjudged examples to print")
    parser.add_argument(
        "--resamples", type=int, default=8, help="temperature-1 analyses of each misjudged sample"
    )
    parser.add_argument(
        "--auditor",
        type=Path,
        nargs="*",
        default=[],
        help="other runs whose meta-verifiers audit the same analyses",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(args.run_dir / "config.yaml")
    latest = args.run_dir / "checkpoints" / "latest"
    models, toks, state = load_bundle(latest)
    tok = toks["judge"]
    require_format(state["judge_format"]["format_version"], str(latest))
    generator, judge = models["generator"], models["judge"]
    budget = cfg.loop.judge_max_new_tokens
    lm = LMWorker(judge, tok)
    # A run with a meta-verifier of its own (loop.meta_model, loop.meta_apart) audits with it.
    meta_lm = LMWorker(models["meta"], toks["meta"]) if "meta" in models else lm
    verifier, meta = GenerativeVerifier(lm, budget), MetaVerifier(meta_lm, budget)
    problems = heldout_split(cfg.task, cfg.task.n_heldout, cfg.seed)[: args.n]
    texts = sample_texts(
        generator,
        tok,
        [p.prompt for p in problems],
        max_new_tokens=cfg.rl.max_new_tokens,
        batch_size=256,
        seed=5,
    )
    samples = [tuple(split_steps(t)) for t in texts]
    checks = [check_solution(p, "\n".join(s)) for p, s in zip(problems, samples, strict=True)]
    verdicts = verifier.analyse([p.prompt for p in problems], samples)
    outcomes = Counter(map(verifier_outcome, problems, samples, checks, verdicts))
    bench = processbench_metrics([v.earliest_error for v in verdicts], [c.earliest_error for c in checks])
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in bench.items()))
    # Few held-out samples are right, so acc_corr is also measured on the problems' reference solutions.
    references = [tuple(p.reference_solution().splitlines()) for p in problems]
    passed = sum(v.earliest_error == -1 for v in verifier.analyse([p.prompt for p in problems], references))
    print(f"reference solutions judged right: {passed}/{len(problems)}")
    print("verifier, per sample: count")
    for key, n in sorted(outcomes.items()):
        print(f"  {key}: {n}")
    kinds: Counter[tuple[str, bool]] = Counter(
        (error_kind(p, s, c), v.earliest_error == c.earliest_error)
        for p, s, c, v in zip(problems, samples, checks, verdicts, strict=True)
        if c.earliest_error >= 0
    )
    print("wrong samples by their earliest error: located / all")
    for kind in sorted({k for k, _ in kinds}):
        print(f"  {kind}: {kinds[kind, True]} / {kinds[kind, True] + kinds[kind, False]}")
    # The comparison a judge learns can be blind to small differences: the same problems with one slip
    # each (at a random step, off by each offset in turn).
    rng = random.Random(0)
    print("synthetic slips located, by offset:")
    for offset in OFFSETS:
        at = [rng.randrange(len(p.ops)) for p in problems]
        slipped = [tuple(slipped_solution(p, k, offset)) for p, k in zip(problems, at, strict=True)]
        found = verifier.analyse([p.prompt for p in problems], slipped)
        located = sum(v.earliest_error == k for v, k in zip(found, at, strict=True))
        print(f"  {offset:+d}: {located} / {len(problems)}")
    prompts = [
        meta_prompt(p.prompt, s, v.analysis) for p, s, v in zip(problems, samples, verdicts, strict=True)
    ]
    outputs = meta.generate(prompts)
    labels = [meta_label(p, v, c) for p, c, v in zip(problems, checks, verdicts, strict=True)]
    counts: Counter[tuple[float, str, str]] = Counter()
    shown = 0
    for p, s, c, v, label, prompt, out in zip(
        problems, samples, checks, verdicts, labels, prompts, outputs, strict=True
    ):
        score, parsed = parse_meta(out)
        counts[(label, str(score) if parsed else "unparsed", own_check(out, s, c, v))] += 1
        if (not parsed or score != label) and shown < args.show:
            shown += 1
            reference = meta_reference(p, s, v.analysis)[0]
            print(f"{prompt}--- judge wrote:\n{out}\n--- faithful meta-verification:\n{reference}\n")
    print("(true meta label, verdict, the meta-verifier's own check names): count")
    for key, n in sorted(counts.items()):
        print(f"  {key}: {n}")
    # An auditor catches only what its own check finds: does that check follow the analysis it is shown
    # (shown the faithful one, is it then right?), and would the verifier itself find the error if sampled?
    rejectable = [
        (p, s, c, v)
        for p, s, c, v, label in zip(problems, samples, checks, verdicts, labels, strict=True)
        if label < 1
    ]
    faithful_shown = meta.generate(
        [meta_prompt(p.prompt, s, reference_analysis(p, s)) for p, s, _, _ in rejectable]
    )
    followed = Counter(
        own_check(out, s, c, v) for (_, s, c, v), out in zip(rejectable, faithful_shown, strict=True)
    )
    print(
        f"the {len(rejectable)} analyses to reject, the faithful one shown instead (audited: the verifier's):"
    )
    for key, n in sorted(followed.items()):
        print(f"  {key}: {n}")
    if meta_lm is not lm:
        blind = blind_verdicts(meta_lm, budget, problems, samples, verdicts)
        print(audit_line("the meta-verifier's check made blind", blind, labels))
    located: Counter[int] = Counter()
    for k in range(args.resamples):
        again = verifier.analyse(
            [p.prompt for p, *_ in rejectable], [s for _, s, *_ in rejectable], greedy=False, seed=100 + k
        )
        located.update(
            i
            for i, (v, (_, _, c, _)) in enumerate(zip(again, rejectable, strict=True))
            if v.earliest_error == c.earliest_error
        )
    print(f"the verifier on them, resampled {args.resamples} times at temperature 1: (times right, analyses)")
    for times, n in sorted(Counter(located[i] for i in range(len(rejectable))).items()):
        print(f"  {times}: {n}")
    # A judge trained apart (another run) as the auditor of the same analyses.
    for run in args.auditor:
        other, other_toks, other_state = load_bundle(run / "checkpoints" / "latest")
        require_format(other_state["judge_format"]["format_version"], str(run))
        role = "meta" if "meta" in other else "judge"
        other_lm = LMWorker(other[role], other_toks[role])
        audited = [
            score if ok else -1.0
            for score, ok in map(parse_meta, MetaVerifier(other_lm, budget).generate(prompts))
        ]
        print(audit_line(f"{run}'s {role} as the auditor", audited, labels))
        blind = blind_verdicts(other_lm, budget, problems, samples, verdicts)
        print(audit_line("  its check made blind", blind, labels))


if __name__ == "__main__":
    main()
