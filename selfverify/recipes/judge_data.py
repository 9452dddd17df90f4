"""The self-verification loop's data and measurements: labelled samples and meta-verifier items, the
run's task and judge formats, step rewards placed on tokens, scaled verification into auto-labels, and
the judges' evaluation against ground truth. ``selfverify.recipes.selfverify`` sequences the phases
that use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from selfverify.config.schema import Config, ModelSpec
from selfverify.judges.base import JudgeFormat, Verdict
from selfverify.judges.generative import GenerativeVerifier, MetaVerifier, scaled_verification_label
from selfverify.judges.metrics import processbench_metrics
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import StepCheck, Task
from selfverify.tasks.arithmetic import Problem as ArithmeticProblem
from selfverify.tasks.base import TaskProblem
from selfverify.tasks.mathdata import MathProblem
from selfverify.tasks.worded import WordedProblem
from selfverify.utils.seeds import stream_seed

UNPARSED = -2  # the earliest-error prediction of an unparsable analysis in the metrics
# A judge training example: who learns it ("verifier" or "meta"), the prompt, the target.
Example = tuple[str, str, str]


@dataclass(frozen=True)
class Labelled:
    """A generator sample with a verifier-training label: the analysis to imitate and its score, and
    the verifier prompt a rollout continues."""

    problem: TaskProblem
    steps: tuple[str, ...]
    analysis: str
    score: float
    prompt: str


@dataclass(frozen=True)
class MetaItem:
    """An analysis of a sample with its meta label (is it faithful?) and the meta-verifier prompt."""

    problem: TaskProblem
    steps: tuple[str, ...]
    analysis: str
    label: float
    prompt: str


@dataclass(frozen=True)
class World:
    """The task and the judge formats one run uses (what the loop's helpers need to know of them): the
    verifier's, and the meta-verifier's (the same format, through the meta-verifier's chat template)."""

    task: Task
    fmt: JudgeFormat
    meta_fmt: JudgeFormat


def solution_part(cfg: Config, world: World, text: str) -> str:
    """The solution Y of a response (without the self-evaluation under ``self_verify``)."""
    return world.fmt.split_self_evaluation(text)[0] if cfg.reward.mode == "self_verify" else text


def judge_format_name(cfg: Config) -> str:
    """``loop.judge_format``, or by task: compact for the embedded world, prose for natural language."""
    return cfg.loop.judge_format or ("compact" if cfg.task.name == "embedded" else "prose")


def model_specs(cfg: Config) -> dict[str, ModelSpec]:
    """Each model's spec by its checkpoint name: a judge or meta-verifier with no model of its own
    takes the model it was copied from."""
    judge = cfg.loop.judge_model if cfg.loop.judge_model.path is not None else cfg.model
    meta = cfg.loop.meta_model if cfg.loop.meta_model.path is not None else judge
    return {"generator": cfg.model, "judge": judge, "meta": meta}


def generator_tokens(cfg: Config) -> int:
    """Response budget: the solution, plus the self-evaluation under ``self_verify``."""
    extra = cfg.loop.judge_max_new_tokens if cfg.reward.mode == "self_verify" else 0
    return cfg.rl.max_new_tokens + extra


def generate_samples(
    cfg: Config, world: World, generator: LMWorker, problems: Sequence[TaskProblem], seed: int
) -> list[tuple[str, ...]]:
    """One temperature-1 sample per problem, as solution steps (batched)."""
    texts = generator.generate_texts(
        [p.prompt for p in problems],
        max_new_tokens=generator_tokens(cfg),
        batch_size=cfg.eval_batch_size,
        seed=seed,
    )
    return [tuple(world.task.split_steps(solution_part(cfg, world, t))) for t in texts]


def meta_item(world: World, problem: TaskProblem, steps: tuple[str, ...], analysis: str) -> MetaItem:
    """An analysis of a solution with its ground-truth meta label."""
    label = world.fmt.meta_reference(problem, steps, analysis)[1]
    return MetaItem(
        problem, steps, analysis, label, world.meta_fmt.meta_prompt(problem.text, steps, analysis)
    )


def labelled(
    world: World, problem: TaskProblem, steps: Sequence[str], analysis: str, score: float
) -> Labelled:
    prompt = world.fmt.verifier_prompt(problem.text, steps)
    return Labelled(problem, tuple(steps), analysis, score, prompt)


def problem_to_json(problem: TaskProblem) -> dict[str, Any]:
    """A problem as JSON (the run state holds problems this way, never pickled)."""
    if isinstance(problem, WordedProblem):
        return {"kind": "worded", "problem": problem_to_json(problem.problem), "prompt": problem.prompt}
    if isinstance(problem, MathProblem):
        return {"kind": "math", **dataclasses.asdict(problem)}
    if isinstance(problem, ArithmeticProblem):
        return {"kind": "arithmetic", "start": problem.start, "ops": [list(op) for op in problem.ops]}
    raise TypeError(f"no JSON form for a problem of type {type(problem).__name__}")


def problem_from_json(data: dict[str, Any]) -> TaskProblem:
    kind = data["kind"]
    if kind == "worded":
        return WordedProblem(problem_from_json(data["problem"]), data["prompt"])
    if kind == "math":
        return MathProblem(**{k: v for k, v in data.items() if k != "kind"})
    if kind == "arithmetic":
        return ArithmeticProblem(data["start"], tuple((op, b) for op, b in data["ops"]))
    raise ValueError(f"unknown problem kind {kind!r}")


def labelled_to_json(item: Labelled) -> dict[str, Any]:
    """A labelled sample as JSON; its prompt is rebuilt from the run's format when read back."""
    return {
        "problem": problem_to_json(item.problem),
        "steps": list(item.steps),
        "analysis": item.analysis,
        "score": item.score,
    }


def labelled_from_json(world: World, data: dict[str, Any]) -> Labelled:
    return labelled(world, problem_from_json(data["problem"]), data["steps"], data["analysis"], data["score"])


def truth_labelled(world: World, problem: TaskProblem, steps: Sequence[str]) -> Labelled:
    check = world.task.check(problem, "\n".join(steps))
    analysis = world.fmt.reference_analysis(problem, steps)
    return labelled(world, problem, steps, analysis, world.task.true_score(problem, check))


def scaled_verification(
    cfg: Config,
    world: World,
    verifier: GenerativeVerifier,
    meta: MetaVerifier,
    problems: Sequence[TaskProblem],
    samples: Sequence[tuple[str, ...]],
    seed: int,
) -> tuple[list[Labelled], dict[str, float]]:
    """Auto-label samples (docs/guides/architecture.md, 'Scaled verification'): n sampled analyses
    each, m sampled meta-verifications of each analysis that reports an issue, then
    :func:`scaled_verification_label`. Ground truth is used only to measure the labels (agreement,
    discard rate), never to make them."""
    lc = cfg.loop
    flat = verifier.analyse(
        [p.text for p in problems for _ in range(lc.scaled_n)],
        [s for s in samples for _ in range(lc.scaled_n)],
        greedy=False,
        seed=seed,
    )
    analyses = [flat[i * lc.scaled_n : (i + 1) * lc.scaled_n] for i in range(len(samples))]
    # Only an analysis that reports an issue needs meta-verifying (the rule ignores the others' scores).
    needs = [
        (i, j) for i, group in enumerate(analyses) for j, a in enumerate(group) if a.parsed and a.score < 1
    ]
    repeated = [ij for ij in needs for _ in range(lc.scaled_m)]
    judged = meta.meta_verify(
        [problems[i].text for i, _ in repeated],
        [samples[i] for i, _ in repeated],
        [analyses[i][j].analysis for i, j in repeated],
        greedy=False,
        seed=stream_seed(seed, "meta_verifications"),
    )
    meta_of = {
        ij: [ms for ms, _ in judged[q * lc.scaled_m : (q + 1) * lc.scaled_m]] for q, ij in enumerate(needs)
    }
    auto, agree, kept = [], 0, 0
    for i, (p, s, group) in enumerate(zip(problems, samples, analyses, strict=True)):
        metas = [meta_of.get((i, j), []) for j in range(lc.scaled_n)]
        label = scaled_verification_label(group, metas, lc.scaled_k)
        if label.score is None:
            continue
        kept += 1
        agree += label.score == world.task.true_score(p, world.task.check(p, "\n".join(s)))
        auto.append(labelled(world, p, s, label.analysis.strip(), label.score))
    n = len(samples)
    stats = {
        "auto_label_agreement": agree / kept if kept else 0.0,
        "auto_label_discard_rate": 1 - kept / n if n else 0.0,
        "auto_labels": float(kept),
    }
    return auto, stats


def misjudgement(verdict: Verdict, true_error: int) -> str | None:
    """How an analysis misjudges where a solution first goes wrong: ``missed`` (it passes the true
    earliest wrong step: names none, or a later one), ``false_alarm`` (it names a step before it, or any
    step of a right solution), or None (it names the true one, or does not parse)."""
    if not verdict.parsed or verdict.earliest_error == true_error:
        return None
    if true_error >= 0 and (verdict.earliest_error == -1 or verdict.earliest_error > true_error):
        return "missed"
    return "false_alarm"


def _rate(hits: Sequence[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def located_by_kind(
    task: Task, problems: Sequence[TaskProblem], verdicts: Sequence[Verdict], checks: Sequence[StepCheck]
) -> dict[str, float]:
    """Where the task names its errors (the embedded world), ``located/<kind>``: of the wrong samples
    whose earliest error is of that kind, the share whose analysis names that step. What a verifier
    misses, by kind, says whether it fails at the arithmetic or at following the problem."""
    error_kind = getattr(task, "error_kind", None)
    if error_kind is None:
        return {}
    found: dict[str, list[bool]] = {}
    for p, v, c in zip(problems, verdicts, checks, strict=True):
        if (kind := error_kind(p, c)) is not None:
            found.setdefault(kind, []).append(v.parsed and v.earliest_error == c.earliest_error)
    return {f"located/{k}": sum(hits) / len(hits) for k, hits in sorted(found.items())}


def verifier_metrics(
    world: World,
    verifier: GenerativeVerifier,
    problems: Sequence[TaskProblem],
    samples: Sequence[tuple[str, ...]],
) -> tuple[list[Verdict], list[StepCheck], dict[str, Any]]:
    """The verifier's greedy analyses of ``samples``, the checker's ground truth and the analyses'
    ProcessBench metrics."""
    verdicts = verifier.analyse([p.text for p in problems], samples)
    checks = [world.task.check(p, "\n".join(s)) for p, s in zip(problems, samples, strict=True)]
    # An unparsable analysis names no step: it counts as wrong on either kind of sample.
    preds = [v.earliest_error if v.parsed else UNPARSED for v in verdicts]
    return verdicts, checks, processbench_metrics(preds, [c.earliest_error for c in checks])


def evaluate_judges(
    cfg: Config,
    world: World,
    generator: LMWorker,
    verifier: GenerativeVerifier,
    meta: MetaVerifier,
    heldout: Sequence[TaskProblem],
    round: int = 0,
) -> dict[str, float]:
    """Verifier earliest-error F1 and meta-verifier accuracy on held-out generator samples, and the
    reward-hacking signal: mean verifier score minus mean true score of the same samples."""
    problems = list(heldout[: cfg.loop.eval_samples])
    task, fmt = world.task, world.fmt
    samples = generate_samples(
        cfg, world, generator, problems, seed=stream_seed(cfg.seed, "judge_eval", round)
    )
    verdicts, checks, pb = verifier_metrics(world, verifier, problems, samples)
    truth = [task.true_score(p, c) for p, c in zip(problems, checks, strict=True)]
    judged = meta.meta_verify([p.text for p in problems], samples, [v.analysis for v in verdicts])
    labels = [fmt.meta_label(p, v, c) for p, v, c in zip(problems, verdicts, checks, strict=True)]
    hits = [ms == label for (ms, _), label in zip(judged, labels, strict=True)]
    unfaithful = [h for h, label in zip(hits, labels, strict=True) if label < 1.0]
    faithful = [h for h, label in zip(hits, labels, strict=True) if label == 1.0]
    kinds = [misjudgement(v, c.earliest_error) for v, c in zip(verdicts, checks, strict=True)]
    missed = [h for h, kind in zip(hits, kinds, strict=True) if kind == "missed"]
    false_alarms = [h for h, kind in zip(hits, kinds, strict=True) if kind == "false_alarm"]
    on_unfaithful, on_faithful = _rate(unfaithful), _rate(faithful)
    # The issues the analyses report (a step named wrong), real or not: a miss reports none or a later
    # one, which scaled verification's many analyses are there to catch, so it is kept apart.
    reported = [
        kind != "false_alarm"
        for v, kind in zip(verdicts, kinds, strict=True)
        if v.parsed and v.earliest_error >= 0
    ]
    n = len(samples)
    return {  # None: no sample of that kind (e.g. no error-free sample), so no figure
        "verifier_f1": pb["f1"],
        "verifier_acc_err": pb["acc_err"],
        "verifier_acc_corr": pb["acc_corr"],
        "verifier_parse_rate": sum(v.parsed for v in verdicts) / n,
        "meta_accuracy": sum(hits) / n,
        "meta_parse_rate": sum(ok for _, ok in judged) / n,
        # On the analyses that are not faithful alone: a meta-verifier that always says "faithful"
        # scores 0 here however good the verifier (and so meta_accuracy) is.
        "meta_accuracy_unfaithful": on_unfaithful,
        "meta_accuracy_faithful": on_faithful,
        # The auditor's balanced accuracy: the mean over the two kinds, blind to how many of each there are.
        "meta_balanced_accuracy": (
            None if on_unfaithful is None or on_faithful is None else (on_unfaithful + on_faithful) / 2
        ),
        # The unfaithful analyses by how they misjudge, and the meta-verifier's accuracy on each: an
        # analysis that passes an error (the auditor must find what the verifier did not), and one that
        # reports an issue where the steps are right (what scaled verification asks it to refute).
        "verifier_missed_errors": float(len(missed)),
        "meta_accuracy_missed_errors": _rate(missed),
        "verifier_false_alarms": float(len(false_alarms)),
        "meta_accuracy_false_alarms": _rate(false_alarms),
        "verifier_reported_issues": float(len(reported)),
        "verifier_issue_faithfulness": _rate(reported),
        "sample_true_score": sum(truth) / n,
        "reward_hacking_gap": (sum(v.score for v in verdicts) - sum(truth)) / n,
    }
