"""Write a ProcessBench-format file of held-out embedded-world solutions, some with one error.

The problems are ``heldout_split(TaskSpec(), skip + n, heldout_seed)[skip:]``: held-out problems, which
``python -m selfverify.prm_train`` never trains on (it excludes the first ``--heldout-exclude``, 2048 by
default, of the same split). Each gets one solution: the reference with probability
``--correct-fraction`` (label -1), else the reference with one error drawn from
``selfverify.tasks.arithmetic.CORRUPTIONS`` (wrong result, wrong operand, skipped operation, missing answer
line, wrong final answer). Labels are the ground-truth checker's earliest wrong step.

Records: ``{"id", "problem", "steps", "label", "corruption"}``. Use disjoint ``--skip`` ranges for a dev
file (threshold choice) and a test file, e.g.::

    python scripts/make_embedded_processbench.py --output dev.jsonl --n 300
    python scripts/make_embedded_processbench.py --output heldout.jsonl --n 1000 --skip 300
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from selfverify.prm_train import embedded_record
from selfverify.tasks import TaskSpec, heldout_split
from selfverify.utils.io import AtomicJsonlWriter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--n", type=int, default=1000, help="problems (one solution each)")
    parser.add_argument("--skip", type=int, default=0, help="start this far into the held-out split")
    parser.add_argument("--heldout-seed", type=int, default=0, help="seed of the held-out split")
    parser.add_argument("--correct-fraction", type=float, default=0.4)
    parser.add_argument("--seed", type=int, default=0, help="seed of the solutions and their errors")
    args = parser.parse_args()

    problems = heldout_split(TaskSpec(), args.skip + args.n, args.heldout_seed)[args.skip :]
    # Keyed apart from prm_train's solution RNG, so no file repeats a training solution pattern.
    rng = random.Random(f"embedded-processbench-{args.seed}-{args.skip}")
    kinds: Counter[str] = Counter()
    with AtomicJsonlWriter(args.output) as writer:
        for i, problem in enumerate(problems):
            record = embedded_record(problem, rng, args.correct_fraction)
            kinds[record.source] += 1
            writer.write(
                {
                    "id": f"emb-{args.skip + i}",
                    "problem": record.problem,
                    "steps": record.steps,
                    "label": record.label,
                    "corruption": record.source,
                }
            )
    print(f"wrote {len(problems)} records to {args.output}: {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    main()
