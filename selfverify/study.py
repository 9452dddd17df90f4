"""Studies: arms × seeds on the embedded world, summarised as a markdown table and learning curves.

    python -m selfverify.study --objectives grpo,dapo,vapo --seeds 0,1,2 --out docs/study
    python -m selfverify.study --arm lowlr=rl.lr=1e-6 --arm base= --out runs/lr-study rl.steps=100

An arm is a name and a list of overrides (``--objectives A,B`` adds one arm ``objective=A`` per name).
Trailing overrides apply to every run. Each run is an ordinary ``python -m selfverify.loop`` run in
``OUT/runs/<arm>-seed<seed>``; finished runs are skipped, so a killed study resumes where it stopped,
and ``--runs`` pointed at another study's ``runs/`` reports on its runs (the first arm is the one every
other is compared with, seed by seed) without running them again.

``--share-cold-start`` runs the cold start once per seed and starts every arm of that seed from it
(``init_from``): for plain RL arms the generator's (``OUT/runs/cold-start-seed<seed>``: the trailing
overrides, ``pipeline=rl`` and ``rl.steps=0``); for ``pipeline=selfverify`` arms the generator's and the
judge's (``OUT/runs/loop-cold-start-seed<seed>``: ``loop.rounds=0``). Arms must then differ only after
the cold start (objectives, RL knobs, the outcome, process and mix reward modes); a self_verify arm
keeps its own cold start (its demonstrations differ). The wall column leaves shared cold starts out.

``--jobs N`` runs N loops at a time, each in a process of its own with its output in
``OUT/runs/<run>.log``, in plan order (cold starts first): a run that starts from a shared cold start
starts once that cold start has finished, beside the cold starts still running. On two cores,
``--jobs 2`` with ``threads=1`` gives each run a core of its own.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from scipy import stats
from tqdm import tqdm

from selfverify.config.load import ConfigError, load_config
from selfverify.loop import main as run_loop
from selfverify.utils.io import atomic_write_text
from selfverify.utils.tracking import read_metrics

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass
class ArmResult:
    name: str
    finals: list[float]  # final held-out accuracy per seed
    cold: list[float]  # cold-start accuracy per seed
    steps_to_threshold: list[int | None]
    walls: list[float]
    curves: list[tuple[list[int], list[float]]]  # (RL step, held-out accuracy) per seed
    valid: list[float] = field(default_factory=list)  # final share of fully valid solutions
    behaviour: list[dict[str, float]] = field(default_factory=list)  # per seed: behaviour(), below
    # Self-verification runs, last round per seed: verifier F1, meta-verifier accuracy, auto-label
    # agreement with ground truth, verifier-minus-truth score gap.
    verifier_f1: list[float | None] = field(default_factory=list)
    meta_accuracy: list[float | None] = field(default_factory=list)
    agreement: list[float | None] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    round_gaps: list[list[float]] = field(default_factory=list)  # the gap after each round, per seed


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval (0 for a single value)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), 0.0
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def steps_to(curve: tuple[list[int], list[float]], threshold: float) -> int | None:
    """First evaluated RL step whose held-out accuracy reaches ``threshold``."""
    return next((s for s, a in zip(*curve, strict=True) if a >= threshold), None)


TAIL = 20  # RL steps averaged for the entropy and length columns


def behaviour(rl: list[dict[str, Any]]) -> dict[str, float]:
    """What the papers' claims are about, from a run's RL records: entropy and response length over its
    first and last TAIL steps; over all steps, the clipped shares of tokens (Clip-Higher's), generation
    rounds per step (dynamic sampling's) and groups whose rewards are all equal; the critic's explained
    variance over the last TAIL steps. A figure the run does not log is NaN."""

    def mean(records: list[dict[str, Any]], key: str) -> float:
        values = [r[key] for r in records if r.get(key) is not None]
        return float(np.mean(values)) if values else float("nan")

    first, last = rl[:TAIL], rl[-TAIL:]
    return {
        "entropy_first": mean(first, "entropy"),
        "entropy_last": mean(last, "entropy"),
        "length_first": mean(first, "response_length"),
        "length_last": mean(last, "response_length"),
        "clipfrac_low": mean(rl, "clipfrac_low"),
        "clipfrac_high": mean(rl, "clipfrac_high"),
        "gen_rounds": mean(rl, "gen_rounds"),
        "zero_variance_groups": mean(rl, "zero_variance_groups"),
        "explained_variance": mean(last, "value_explained_variance"),
    }


def collect_arm(name: str, run_dirs: list[Path], threshold: float) -> ArmResult:
    res = ArmResult(name, [], [], [], [], [])
    for d in run_dirs:
        summary = json.loads((d / "summary.json").read_text())
        records = read_metrics(d)
        evals = [r for r in records if r["phase"] == "eval"]
        rl = [r for r in records if r["phase"] == "rl"]
        if rl:
            res.behaviour.append(behaviour(rl))
        res.valid.append(summary.get("final_valid_solution_rate") or 0.0)
        curve = ([r["step"] for r in evals], [r["accuracy"] for r in evals])
        if not curve[0] or curve[0][0] != 0:  # a shared cold start: its evaluation is the run's step 0
            curve = ([0, *curve[0]], [summary["cold_start_accuracy"], *curve[1]])
        res.finals.append(summary["final_accuracy"])
        res.cold.append(summary["cold_start_accuracy"])
        res.walls.append(summary["wall_seconds"])
        res.curves.append(curve)
        res.steps_to_threshold.append(steps_to(curve, threshold))
        if summary.get("rounds"):
            last = summary["rounds"][-1]
            res.verifier_f1.append(last["verifier_f1"])
            res.meta_accuracy.append(last["meta_accuracy"])
            res.agreement.append(last["auto_label_agreement"])
            res.gaps.append(last["reward_hacking_gap"])
            res.round_gaps.append([r["reward_hacking_gap"] for r in summary["rounds"]])
    return res


def paired_difference(finals: list[float], baseline: list[float]) -> tuple[float, float]:
    """Mean ± 95% CI of an arm's final accuracy minus the baseline arm's, seed by seed.

    Arms of one seed share the seed's data order (and, with --share-cold-start, its cold start), so
    the per-seed differences vary less than either arm does across seeds: the paired interval is the
    honest test of "arm A beats arm B" with a handful of seeds.
    """
    return mean_ci([a - b for a, b in zip(finals, baseline, strict=True)])


def markdown_table(results: list[ArmResult], threshold: float) -> str:
    """One row per arm, compared seed by seed with the first arm; self-verification arms add their
    judges' figures (last round) and the verifier's score gap to truth."""
    loop = any(r.gaps for r in results)
    base = results[0]
    extra = " verifier F1 | meta-verifier acc | auto-label agreement | verifier − truth |" if loop else ""
    head = (
        f"| arm | seeds | cold start | final accuracy (mean ± 95% CI) | gain | − {base.name} (paired) | "
        f"steps to {threshold:.0%} (reached/seeds) | all steps valid | entropy (last {TAIL}) | "
        f"length (last {TAIL}) | wall s |{extra}\n"
        f"|---|---|---|---|---|---|---|---|---|---|---|{'---|' * 4 if loop else ''}\n"
    )
    rows = []
    for r in results:
        final, ci = mean_ci(r.finals)
        cold = float(np.mean(r.cold))
        reached = [s for s in r.steps_to_threshold if s is not None]
        steps = (
            f"{np.mean(reached):.0f} ({len(reached)}/{len(r.finals)})"
            if reached
            else f"— (0/{len(r.finals)})"
        )
        paired = "—"
        if r is not base:  # every arm runs the same seeds
            diff, diff_ci = paired_difference(r.finals, base.finals)
            paired = f"{diff:+.3f} ± {diff_ci:.3f}"
        entropy, length = ([b[k] for b in r.behaviour] for k in ("entropy_last", "length_last"))
        rows.append(
            f"| {r.name} | {len(r.finals)} | {cold:.3f} | {final:.3f} ± {ci:.3f} | {final - cold:+.3f} | "
            f"{paired} | {steps} | {np.mean(r.valid):.3f} | {_mean(entropy, '.3f')} | "
            f"{_mean(length, '.1f')} | {np.mean(r.walls):.0f} |" + (_loop_columns(r) if loop else "")
        )
    return head + "\n".join(rows) + "\n"


def behaviour_table(results: list[ArmResult]) -> str:
    """Each arm's training behaviour (``behaviour``), mean over its seeds; "—" where no run logs it."""

    def cell(r: ArmResult, *keys: str, fmt: str = ".3f", sep: str = " → ") -> str:
        seen = [[b[k] for b in r.behaviour if not math.isnan(b[k])] for k in keys]
        return "—" if not all(seen) else sep.join(format(np.mean(v), fmt) for v in seen)

    rows = [
        f"| {r.name} | {cell(r, 'entropy_first', 'entropy_last')} | "
        f"{cell(r, 'length_first', 'length_last', fmt='.1f')} | "
        f"{cell(r, 'clipfrac_low', 'clipfrac_high', fmt='.1e', sep=' / ')} | "
        f"{cell(r, 'gen_rounds', fmt='.2f')} | {cell(r, 'zero_variance_groups', fmt='.2f')} | "
        f"{cell(r, 'explained_variance', fmt='.2f')} |"
        for r in results
    ]
    return (
        f"| arm | entropy, first → last {TAIL} RL steps | response length, first → last {TAIL} | "
        "clipped tokens low / high | generation rounds per step | groups with equal rewards | "
        f"critic's explained variance (last {TAIL}) |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


def _mean(values: list[float], fmt: str) -> str:
    return format(float(np.mean(values)), fmt) if values else "—"


def _loop_columns(r: ArmResult) -> str:
    if not r.gaps:
        return " — | — | — | — |"
    cells = [
        _mean([v for v in values if v is not None], ".3f")
        for values in (r.verifier_f1, r.meta_accuracy, r.agreement)
    ]
    return f" {' | '.join(cells)} | {np.mean(r.gaps):+.3f} |"


def plot_study(results: list[ArmResult], path: Path) -> None:
    """Learning curves; self-verification studies add the verifier's score gap to truth per round."""
    loop = any(r.round_gaps for r in results)
    fig, axes = plt.subplots(1, 2 if loop else 1, figsize=(12 if loop else 7, 4.2), squeeze=False)
    ax = axes[0, 0]
    for r in results:
        steps = r.curves[0][0]
        acc = np.array([c[1] for c in r.curves if c[0] == steps])
        mean = acc.mean(0)
        (line,) = ax.plot(steps, mean, label=r.name)
        if len(acc) > 1:
            ax.fill_between(steps, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
    ax.set(
        xlabel="RL step",
        ylabel="held-out greedy accuracy",
        title="Learning curves (mean; band = min–max over seeds)",
    )
    if loop:
        gap_ax = axes[0, 1]
        for i, r in enumerate(results):
            if r.round_gaps:
                gaps = np.array(r.round_gaps)
                rounds = np.arange(gaps.shape[1]) + 0.04 * (i - len(results) / 2)  # arms side by side
                mean = gaps.mean(0)
                span = [mean - gaps.min(0), gaps.max(0) - mean]
                gap_ax.errorbar(rounds, mean, yerr=span, marker="o", capsize=3, label=r.name)
        gap_ax.axhline(0.0, color="grey", lw=0.8)
        gap_ax.set(
            xlabel="round",
            ylabel="mean verifier score − true score",
            title="Verifier − truth on fresh samples (mean; bar = min–max)",
        )
        gap_ax.set_xticks(np.arange(max(len(g) for r in results for g in r.round_gaps)))
    for a in axes.flat:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


@dataclass
class PlannedRun:
    run_dir: Path
    overrides: list[str]
    cold_start: Path | None = None  # the run directory of the shared cold start it starts from


def plan_runs(
    arms: list[tuple[str, list[str]]],
    seeds: list[int],
    runs: Path,
    config: str | None,
    overrides: list[str],
    share_cold_start: bool,
) -> tuple[list[PlannedRun], list[list[Path]]]:
    """Every run of the study, shared cold starts first, and each arm's run directories by seed."""
    cold: dict[Path, PlannedRun] = {}
    arm_runs, arm_dirs = [], []
    for name, arm_overrides in arms:
        cfg = load_config(config, [*overrides, *arm_overrides])
        dirs = []
        for seed in seeds:
            shared, cold_dir = [], None
            if share_cold_start and cfg.reward.mode != "self_verify":  # its demonstrations differ
                loop = cfg.pipeline == "selfverify"
                cold_dir = runs / f"{'loop-' if loop else ''}cold-start-seed{seed}"
                stage = ["pipeline=selfverify", "loop.rounds=0"] if loop else ["pipeline=rl", "rl.steps=0"]
                cold[cold_dir] = PlannedRun(
                    cold_dir, [*overrides, *stage, "reward.mode=outcome", f"seed={seed}"]
                )
                shared = [f"init_from={cold_dir / 'checkpoints' / ('latest' if loop else 'cold_start')}"]
            run_overrides = [*overrides, *arm_overrides, *shared, f"seed={seed}"]
            run = PlannedRun(runs / f"{name}-seed{seed}", run_overrides, cold_start=cold_dir)
            arm_runs.append(run)
            dirs.append(run.run_dir)
        arm_dirs.append(dirs)
    return [*cold.values(), *arm_runs], arm_dirs


def startable(waiting: list[PlannedRun], running: list[PlannedRun], free: int) -> list[PlannedRun]:
    """The first ``free`` waiting runs, in plan order, whose shared cold start is neither waiting nor
    running (finished before this study, or by it)."""
    unfinished = {r.run_dir for r in [*waiting, *running]}
    return [r for r in waiting if r.cold_start not in unfinished][:free]


def execute(batch: list[PlannedRun], flags: list[str], jobs: int, progress: bool) -> int:
    """Run ``batch`` (in plan order: cold starts first): one after another in this process, or ``jobs``
    loop processes at a time, each writing its output to ``<run-dir>.log`` and each starting as soon as a
    slot is free and its cold start has finished. The first failure's exit code, after the runs under way
    end (a rerun of the study resumes them)."""
    if jobs == 1:
        for run in batch:
            say(f"started {run.run_dir.name}")
            start = time.perf_counter()
            argv = [*flags, *([] if progress else ["--no-progress"]), "--run-dir", str(run.run_dir)]
            if code := run_loop([*argv, *run.overrides]):
                return code
            say(f"finished {run.run_dir.name} in {time.perf_counter() - start:.0f} s")
        return 0

    waiting, running = list(batch), dict[Future, PlannedRun]()
    failure = 0
    with ThreadPoolExecutor(jobs) as pool, tqdm(total=len(batch), desc="runs", disable=not progress) as bar:
        while running or (waiting and not failure):
            free = 0 if failure else jobs - len(running)  # after a failure nothing new starts
            for run in startable(waiting, list(running.values()), free):
                waiting.remove(run)
                running[pool.submit(run_in_subprocess, run, flags)] = run
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                del running[future]
                failure = failure or future.result()
                bar.update()
    return failure


def run_in_subprocess(run: PlannedRun, flags: list[str]) -> int:
    """One loop run in a process of its own, its output appended to ``<run-dir>.log`` (a resumed run's
    log keeps the earlier attempt's); a line when it starts and when it ends."""
    log = run.run_dir.with_name(run.run_dir.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [*flags, "--no-progress", "--run-dir", str(run.run_dir), *run.overrides]
    say(f"started {run.run_dir.name} (output: {log})")
    start = time.perf_counter()
    with log.open("a") as f:
        code = subprocess.run([sys.executable, "-m", "selfverify.loop", *argv], stdout=f, stderr=f).returncode
    if code:
        tqdm.write(
            f"error: {run.run_dir.name} stopped with exit code {code}; its output: {log}", file=sys.stderr
        )
    else:
        say(f"finished {run.run_dir.name} in {time.perf_counter() - start:.0f} s")
    return code


def say(message: str) -> None:
    """A timed line on stderr, above any progress bar."""
    tqdm.write(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr)


def parse_arm(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"--arm needs NAME=override,override...: {text!r}")
    return name, [o for o in overrides.split(",") if o]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfverify.study", description=__doc__.split("\n")[0])
    parser.add_argument("--objectives", default="", help="comma-separated objective presets, one arm each")
    parser.add_argument("--arm", action="append", type=parse_arm, default=[], help="NAME=override,override")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one run per arm each")
    parser.add_argument("--out", required=True, help="folder for study.md, curves.png, results.json, runs/")
    parser.add_argument(
        "--runs",
        help="folder of the run directories (default OUT/runs): another study's, to report on its runs "
        "against another baseline arm without re-running them",
    )
    parser.add_argument("--threshold", type=float, default=0.4, help="accuracy for the steps-to-reach column")
    parser.add_argument("--no-progress", action="store_true", help="hide the runs' progress bars")
    parser.add_argument(
        "--share-cold-start", action="store_true", help="one cold start per seed, shared by every arm"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time, each in its own process with its output in <run-dir>.log (give threads=1 "
        "with 2 jobs on 2 cores)",
    )
    parser.add_argument("--config", help="YAML config of every run (default: the packaged default)")
    parser.add_argument("overrides", nargs="*", help="overrides applied to every run")
    args = parser.parse_args(argv)
    arms = [(o, [f"objective={o}"]) for o in args.objectives.split(",") if o] + args.arm
    if not arms:
        parser.error("give --objectives and/or --arm")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    runs = Path(args.runs) if args.runs else out / "runs"
    try:
        planned, arm_dirs = plan_runs(arms, seeds, runs, args.config, args.overrides, args.share_cold_start)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    todo = [r for r in planned if not (r.run_dir / "summary.json").exists()]
    flags = ["--config", args.config] if args.config else []
    if code := execute(todo, flags, args.jobs, progress=not args.no_progress):
        return code
    results = [
        collect_arm(name, dirs, args.threshold) for (name, _), dirs in zip(arms, arm_dirs, strict=True)
    ]
    out.mkdir(parents=True, exist_ok=True)  # with --runs elsewhere, no run has made it
    command = "python -m selfverify.study " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown_table(results, args.threshold) + "\n" + behaviour_table(results)
    atomic_write_text(
        out / "study.md", f"# Study\n\nCommand: `{command}`\n\n{table}\n![curves](curves.png)\n"
    )
    results_json = [r.__dict__ for r in results]
    atomic_write_text(out / "results.json", json.dumps(results_json, indent=1))
    plot_study(results, out / "curves.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
