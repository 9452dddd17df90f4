"""The DeepSpeed engine against the torch engine on one RL job: the losses of every step, side by side.

    python scripts/compare_engines.py --out runs/engines --stage 2 --ranks 2 [config overrides ...]

Runs ``python -m selfverify.loop`` with the same seed and settings (``--config``, default
configs/rl.yaml, then the overrides): the torch engine in this process's backend, then DeepSpeed ZeRO
``--stage`` over ``--ranks`` data-parallel gloo ranks (``backend=ray``), once whole (its cold start
is compared) and once from the torch run's cold-started policy (its RL steps are compared: the same
policy samples the same first batch, so the losses start equal and any drift is the engines'). Writes
``compare.json`` (per-step figures of the runs and their largest differences) and ``compare.png``
under ``--out``. A run directory that already holds a finished run is reused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from selfverify.utils.tracking import read_metrics  # noqa: E402

DEFAULTS = ["sft.steps=200", "rl.steps=20", "rl.eval_every=10", "threads=1"]
FIGURES = {"sft": ["loss"], "rl": ["pg_loss", "reward", "grad_norm", "entropy"]}


def run(run_dir: Path, config: str, overrides: list[str]) -> list[dict]:
    if not (run_dir / "summary.json").exists():
        cmd = [sys.executable, "-m", "selfverify.loop", "--config", config, "--run-dir", str(run_dir)]
        subprocess.run([*cmd, *overrides], check=True)
    return read_metrics(run_dir)


def by_step(metrics: list[dict], phase: str, key: str) -> list[float]:
    return [m[key] for m in metrics if m["phase"] == phase]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/engines"))
    parser.add_argument("--config", default="configs/rl.yaml")
    parser.add_argument("--stage", type=int, default=2, help="ZeRO stage")
    parser.add_argument("--ranks", type=int, default=2, help="data-parallel ranks")
    parser.add_argument("overrides", nargs="*", help=f"config overrides (default: {' '.join(DEFAULTS)})")
    args = parser.parse_args()
    overrides = args.overrides or DEFAULTS
    engine = ["train=deepspeed", f"train.zero_stage={args.stage}", f"train.ranks={args.ranks}"]
    engine.append("backend=ray")
    name = f"deepspeed-z{args.stage}-r{args.ranks}"
    torch_run = run(args.out / "torch", args.config, overrides)
    ds_whole = run(args.out / name, args.config, [*overrides, *engine])
    cold = (args.out / "torch" / "checkpoints" / "cold_start").resolve()
    ds_rl = run(args.out / f"{name}-rl", args.config, [*overrides, *engine, f"init_from={cold}"])
    runs = {"sft": ds_whole, "rl": ds_rl}

    report: dict = {"overrides": overrides, "stage": args.stage, "ranks": args.ranks, "figures": {}}
    panels = [(phase, key) for phase, keys in FIGURES.items() for key in keys]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (phase, key) in zip(axes, panels, strict=True):
        a, b = by_step(torch_run, phase, key), by_step(runs[phase], phase, key)
        diffs = [abs(x - y) for x, y in zip(a, b, strict=True)]
        report["figures"][f"{phase}/{key}"] = {
            "torch": a,
            "deepspeed": b,
            "max_abs_diff": max(diffs),
            "first_step_abs_diff": diffs[0],
            "identical_steps": sum(d == 0 for d in diffs),
        }
        ax.plot(range(1, len(a) + 1), a, label="torch", lw=2)
        ax.plot(range(1, len(b) + 1), b, label=f"DeepSpeed ZeRO-{args.stage} × {args.ranks}", ls="--")
        ax.set_title(f"{phase} {key}")
        ax.set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(args.out / "compare.png", dpi=120)
    (args.out / "compare.json").write_text(json.dumps(report, indent=1))
    for name, fig_report in report["figures"].items():
        print(
            f"{name:14s} max |Δ| {fig_report['max_abs_diff']:.3g}  first step |Δ| "
            f"{fig_report['first_step_abs_diff']:.3g}  identical {fig_report['identical_steps']}/"
            f"{len(fig_report['torch'])}"
        )


if __name__ == "__main__":
    main()
