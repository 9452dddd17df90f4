"""Metrics tracking: one JSON line per step in ``metrics.jsonl``, mirrored to wandb when enabled."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from selfverify.config.load import to_dict
from selfverify.config.schema import Config
from selfverify.utils.io import atomic_write_text

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Tracker:
    """Appends metrics lines (flushed and fsynced, so a killed run keeps what it logged)."""

    def __init__(self, run_dir: Path, cfg: Config, *, keep: int = 0) -> None:
        """``keep``: on resume, the number of existing lines that belong to the restored state."""
        self.path = run_dir / METRICS_FILE
        lines = self.path.read_text().splitlines(keepends=True) if self.path.exists() else []
        atomic_write_text(self.path, "".join(lines[:keep]))  # drop lines logged after the checkpoint
        self.count = keep
        self._file = self.path.open("a")
        self._wandb = None
        if cfg.wandb.enabled:
            import wandb  # optional extra

            self._wandb = wandb.init(
                project=cfg.wandb.project,
                name=cfg.wandb.name or run_dir.name,
                mode=cfg.wandb.mode,
                dir=str(run_dir),
                config=to_dict(cfg),
                resume="allow",
                id=f"{run_dir.name}-{cfg.seed}".replace("/", "_"),
            )

    def log(self, phase: str, step: int, metrics: dict[str, float]) -> None:
        record = {"phase": phase, "step": step, **metrics}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.count += 1
        if self._wandb is not None:
            self._wandb.log({f"{phase}/{k}": v for k, v in metrics.items()} | {f"{phase}/step": step})

    def close(self) -> None:
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
