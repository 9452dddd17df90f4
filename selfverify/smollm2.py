"""``python -m selfverify.smollm2``: obtain SmolLM2-135M-Instruct offline and print its directory
(selfverify.runtime.smollm2 does the work; ``model.path=smollm2`` calls it on first use)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from selfverify.runtime.smollm2 import ensure_smollm2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m selfverify.smollm2", description="obtain SmolLM2-135M-Instruct offline"
    )
    parser.add_argument("--cache", type=Path, default=None, help="cache directory (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        path = ensure_smollm2(args.cache)
    except (RuntimeError, OSError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
