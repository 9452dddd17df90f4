"""Kill the self-verification loop anywhere, resume it, and check nothing was lost.

    python scripts/kill_anywhere.py --out runs/kill-anywhere            # 20 kills

A shortened loop (every phase present: generator cold start, judge cold start and its extensions, two
rounds of judge SFT on auto-labels and judge RL, generator RL, the round's check of the judge and its
extension, scaled verification, evaluation) is first run whole;
the times at which each of its phases starts are taken from its checkpoints. Then, for each kill
point (spread evenly over every phase instance of that timeline, at evenly spaced fractions of the
phase's duration), a fresh run of the same command is killed with SIGKILL that long after it enters the
phase, and resumed with the same ``--run-dir`` until it finishes. A resumed
run counts as identical when its ``metrics.jsonl`` and its ``summary.json`` (wall times aside) equal the
whole run's. Writes ``report.md`` and ``results.json`` under ``--out``; exits 1 unless every resumed run
is identical. At 52310ff, whose shortened loop extended its judge 200 steps at a time and had no round's
check, it took 56 min on 2 cores; at ffe6af8, ``--kills 6`` took 12 min.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

from tqdm import tqdm

from selfverify.runtime.checkpoint import CheckpointError, read_state
from selfverify.utils.io import atomic_write_json, atomic_write_text

SHORT = [
    "--no-progress",
    "seed=0",
    "task.n_heldout=32",
    "sft.steps=60",
    "rl.steps=12",
    "rl.prompts_per_step=4",
    "rl.group_size=4",
    "rl.eval_every=2",
    "loop.rounds=2",
    "loop.judge_pool=32",
    "loop.judge_sft_steps=60",
    "loop.judge_sft_batch_size=32",
    "loop.judge_extend_steps=40",  # its judge misses every check: the extensions are most of the run
    "loop.verifier_rl_steps=3",
    "loop.meta_rl_steps=3",
    "loop.judge_prompts_per_step=4",
    "loop.judge_group_size=2",
    "loop.scaled_samples=48",
    "loop.scaled_n=2",
    "loop.scaled_m=2",
    "loop.scaled_k=1",
    "loop.auto_sft_steps=10",
    "loop.eval_samples=32",
]
TIMING_KEYS = ("wall_seconds", "phase_seconds", "run_dir")  # what a resumed run may differ in
POLL_S = 0.05


def loop_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "selfverify.loop", "--run-dir", str(run_dir), *SHORT]


def checkpoint_phase(run_dir: Path) -> tuple[str, int] | None:
    """(phase, round) a run would resume at, or None before its first checkpoint."""
    try:
        state = read_state(run_dir / "checkpoints" / "latest")
    except CheckpointError:  # none yet, or caught mid-swap
        return None
    return state["phase"], state["round"]


def run_whole(run_dir: Path) -> list[tuple[float, str, int]]:
    """Run the loop uninterrupted; returns when each phase started: (seconds, phase, round)."""
    start = time.time()
    proc = subprocess.Popen(loop_command(run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    timeline = [(0.0, "cold_start", 0)]
    while proc.poll() is None:
        seen = checkpoint_phase(run_dir)
        if seen is not None and seen != timeline[-1][1:]:
            timeline.append((time.time() - start, *seen))
        time.sleep(POLL_S)
    if proc.returncode != 0:
        raise SystemExit(f"the whole run failed (exit {proc.returncode}): {' '.join(loop_command(run_dir))}")
    timeline.append((time.time() - start, "done", -1))
    return timeline


def kill_points(timeline: list[tuple[float, str, int]], n: int) -> list[tuple[tuple[str, int], float]]:
    """``n`` kill points spread evenly over the phase instances of the whole run (the same number in
    each, the rest to the first ones): (phase, round) and the seconds into that phase, at evenly spaced
    fractions of its duration in the whole run."""
    phases = [((p, r), t1 - t0) for (t0, p, r), (t1, _, _) in pairwise(timeline)]
    per_phase = [n // len(phases) + (i < n % len(phases)) for i in range(len(phases))]
    return [
        (phase, duration * (k + 1) / (count + 1))
        for (phase, duration), count in zip(phases, per_phase, strict=True)
        for k in range(count)
    ]


def kill_and_resume(run_dir: Path, phase: tuple[str, int], offset: float) -> dict[str, object]:
    """Start the run, SIGKILL it ``offset`` seconds after it enters ``phase`` (the first checkpoint
    that resumes there; the process start for the cold start), then rerun the same command until it
    finishes."""
    proc = subprocess.Popen(loop_command(run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if phase != ("cold_start", 0):
        while proc.poll() is None and checkpoint_phase(run_dir) != phase:
            time.sleep(POLL_S)
    time.sleep(offset)
    finished = proc.poll() is not None  # it finished the phase and the run in less time than the whole run
    if not finished:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    resumed_at = checkpoint_phase(run_dir)
    resume = subprocess.run(loop_command(run_dir), capture_output=True, text=True)
    return {
        "seconds_into_phase": round(offset, 2),
        "finished_before_kill": finished,
        "resumed_at": "start" if resumed_at is None else f"{resumed_at[0]} (round {resumed_at[1]})",
        "resume_exit": resume.returncode,
        "resume_error": resume.stderr.strip().splitlines()[-1] if resume.returncode else "",
    }


def results_of(run_dir: Path) -> tuple[str, dict[str, object]]:
    """What must be identical: the metrics file verbatim and the summary without its wall times."""
    metrics = (run_dir / "metrics.jsonl").read_text() if (run_dir / "metrics.jsonl").exists() else ""
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return metrics, {k: v for k, v in summary.items() if k not in TIMING_KEYS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("runs/kill-anywhere"), help="new folder for the runs and report"
    )
    parser.add_argument("--kills", type=int, default=20, help="kill points, spread over every phase")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"{args.out} is not empty: give a new --out")
    args.out.mkdir(parents=True, exist_ok=True)

    print("whole run ...", flush=True)
    timeline = run_whole(args.out / "whole")
    reference = results_of(args.out / "whole")
    points = kill_points(timeline, args.kills)
    trials = []
    for i, (phase, offset) in enumerate(tqdm(points, desc="kill and resume")):
        trial = {"kill": i + 1, "phase": f"{phase[0]} (round {phase[1]})"}
        trial |= kill_and_resume(args.out / f"kill-{i + 1:02d}", phase, offset)
        metrics, summary = results_of(args.out / f"kill-{i + 1:02d}")
        trial["metrics_identical"] = metrics == reference[0]
        trial["summary_identical"] = summary == reference[1]
        trials.append(trial)
    identical = sum(t["metrics_identical"] and t["summary_identical"] for t in trials)

    results = {"command": loop_command(Path("RUN_DIR"))[1:], "timeline": timeline, "trials": trials,
               "identical": identical, "kills": len(trials)}  # fmt: skip
    atomic_write_json(args.out / "results.json", results)
    lines = [
        f"# Kill anywhere: {identical}/{len(trials)} resumed runs identical to the whole run",
        "",
        f"Whole run: {timeline[-1][0]:.0f} s; phases started at "
        + ", ".join(f"{p} r{r} {t:.0f} s" for t, p, r in timeline[1:-1])
        + ".",
        "",
        "| kill | in phase | seconds into it | resumed at | metrics identical | summary identical |",
        "|---|---|---|---|---|---|",
        *(
            f"| {t['kill']} | {t['phase']} | {t['seconds_into_phase']} | {t['resumed_at']} "
            f"| {t['metrics_identical']} | {t['summary_identical']} |"
            for t in trials
        ),
    ]
    atomic_write_text(args.out / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if identical == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
