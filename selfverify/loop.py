"""``python -m selfverify.loop``: run a training job (the embedded default when given no arguments).

python -m selfverify.loop                                  # configs/default.yaml
python -m selfverify.loop --config my.yaml rl.lr=1e-5 seed=3
python -m selfverify.loop --run-dir runs/a objective=dapo  # rerun the same command to resume
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from rich.console import Console
from rich.table import Table

from selfverify.config.load import ConfigError, load_config, to_yaml
from selfverify.config.reference import HelpAction
from selfverify.config.schema import Config
from selfverify.recipes import rl, selfverify
from selfverify.runtime.backends import BackendError
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.runtime.engines import configure_torch
from selfverify.utils.io import CheckpointWriteError, SourceError, atomic_write_json, atomic_write_text
from selfverify.utils.plots import plot_curves
from selfverify.utils.tracking import read_metrics

PIPELINES: dict[str, Callable[..., dict[str, Any]]] = {"rl": rl.run, "selfverify": selfverify.run}


def prepare_run_dir(cfg: Config, run_dir: Path) -> FileLock:
    """Create the run directory, or check that an existing one holds this same configuration, and
    take its lock: the caller holds it while the run writes. An OS lock (flock), so a killed run
    leaves none behind."""
    resolved = to_yaml(cfg)
    config_file = run_dir / "config.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(
            f"{run_dir} is in use: another process is running or resuming this run; "
            "wait for it to finish, or use a new --run-dir"
        ) from None
    try:
        if config_file.exists() and config_file.read_text() != resolved:
            raise ConfigError(
                f"{run_dir} holds a run with a different configuration ({config_file}); "
                "use a new --run-dir, or the same arguments to resume it"
            )
        atomic_write_text(config_file, resolved)
    except BaseException:
        lock.release()
        raise
    return lock


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="selfverify run summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if not isinstance(value, list):
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    return table


def rounds_table(rounds: list[dict[str, Any]]) -> Table:
    """One column per self-verification round."""
    table = Table(title="self-verification rounds (measured against ground truth)")
    table.add_column("metric")
    for r in rounds:
        table.add_column(f"round {r['round']}", justify="right")
    for key in rounds[0]:
        if key != "round":
            table.add_row(key, *(f"{r[key]:.3g}" if r[key] is not None else "—" for r in rounds))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m selfverify.loop",
        description=__doc__.split("\n")[0].replace("``", ""),
        add_help=False,
    )
    parser.add_argument("-h", "--help", action=HelpAction)
    parser.add_argument("--config", help="YAML config (default: the packaged configs/default.yaml)")
    parser.add_argument("--run-dir", help="where results go (default: runs/<pipeline>-seed<seed>-<time>)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="dotted overrides key=value, e.g. rl.lr=1e-5 objective=dapo (the keys below)",
    )
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    try:
        cfg = load_config(args.config, args.overrides)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.run_dir or f"runs/{cfg.pipeline}-seed{cfg.seed}-{stamp}")
        lock = prepare_run_dir(cfg, run_dir)
    except ConfigError as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    except OSError as err:  # a read-only or full run directory: nothing was started
        console.print(f"[red]error:[/red] cannot write the run directory {run_dir}: {err.strerror or err}")
        return 2

    try:
        return _run(cfg, run_dir, console, progress=not args.no_progress)
    finally:
        lock.release()


def _run(cfg: Config, run_dir: Path, console: Console, progress: bool) -> int:
    """Run the pipeline into a prepared, locked run directory and print its summary."""
    configure_torch(cfg.threads)
    console.print(f"run directory: {run_dir}")
    try:
        summary = PIPELINES[cfg.pipeline](cfg, run_dir, progress=progress)
        summary = {"run_dir": str(run_dir), "pipeline": cfg.pipeline, "seed": cfg.seed, **summary}
        atomic_write_json(run_dir / "summary.json", summary)
        plot_curves(read_metrics(run_dir), run_dir / "curves.png")
    # A checkpoint it cannot use or cannot write, a model or dataset it cannot load, a worker lost.
    except (CheckpointError, CheckpointWriteError, SourceError, BackendError) as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    except OSError as err:  # metrics or results could not be written: the checkpoints are as they were
        console.print(
            f"[red]error:[/red] cannot write to {run_dir}: {err.strerror or err} ({err.filename or ''}); "
            "the checkpoints written so far are intact: rerun the same command to resume"
        )
        return 2
    Console().print(summary_table(summary))
    if summary.get("rounds"):
        Console().print(rounds_table(summary["rounds"]))
    console.print(f"results: {run_dir}/summary.json, {run_dir}/curves.png, {run_dir}/metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
