"""Scaled verification of a finished loop run's last round again, under other settings.

    python scripts/rescore_labels.py runs/s3 "" loop.scaled_n=8 loop.scaled_n=12,loop.scaled_k=3

Works on a copy of the run (in a temporary folder): the last round's generator and judge draw that
round's samples and analyses with the run's own seeds, so ``""`` (the run's settings) reproduces the
round's ``auto_label_agreement``. Each further argument is a comma-separated list of overrides. Prints
each setting's agreement, discard rate and labels kept, and its wrong labels as ``label<-truth``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from selfverify.config.load import load_config
from selfverify.recipes.judge_data import generate_samples, scaled_verification
from selfverify.recipes.selfverify import spawn_judges, start
from selfverify.runtime.backends import make_backend
from selfverify.utils.seeds import stream_seed


def main(src: Path, settings: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / src.name
        shutil.copytree(src, run_dir)
        cfg = load_config(run_dir / "config.yaml", [])
        backend = make_backend(cfg.backend, cfg.threads, cfg.train, cfg.rollout, roles=("generator", "judge"))
        try:
            run = start(cfg, run_dir, backend, time.time(), False)
            spawn_judges(run)
            world, r = run.judges.world, cfg.loop.rounds - 1
            problems = run.task.train_problems(
                cfg.loop.scaled_samples, seed=cfg.seed, tag=f"scaled-{r}", exclude=run.exclude
            )
            samples = generate_samples(
                cfg, world, run.generator, problems, seed=stream_seed(cfg.seed, "scaled_samples", r)
            )
            for setting in settings:
                c = load_config(run_dir / "config.yaml", setting.split(",") if setting else [])
                auto, stats = scaled_verification(
                    c,
                    world,
                    run.judges.verifier,
                    run.judges.meta,
                    problems,
                    samples,
                    seed=stream_seed(cfg.seed, "scaled_verification", r),
                )
                truth = [
                    run.task.true_score(it.problem, run.task.check(it.problem, "\n".join(it.steps)))
                    for it in auto
                ]
                wrong = Counter(
                    f"{it.score}<-{t}" for it, t in zip(auto, truth, strict=True) if it.score != t
                )
                figures = ", ".join(f"{k} {v:.3f}" for k, v in stats.items())
                print(f"{src.name} {setting or '(as run)'}: {figures}; wrong {dict(wrong)}", flush=True)
        finally:
            backend.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or [""])
