"""``python -m selfverify.solve_study``: test-time scaling — every method at N = 1, 2, 4, 8, 16 on the same
problems, with the same models; accuracy against the tokens generated, beside the oracle pass@N.

python -m selfverify.solve_study --run-dir runs/a                 # RUN/solve/: records, study.md, study.png
python -m selfverify.solve_study --run-dir runs/a --ns 1 4 16 --methods best_of_n search solve.verifications=2

Each (method, N) is one ``python -m selfverify.solve`` output (RUN/solve/<method>-N<N>.jsonl), so a
stopped study continues where it stopped. greedy runs once (N = 1). The oracle pass@N: the share of
problems where any of best_of_n's N sampled candidates is right (what a perfect verifier would pick).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from selfverify.config.schema import SOLVE_METHODS
from selfverify.recipes.search import Solver
from selfverify.runtime.engines import configure_torch
from selfverify.solve import ERRORS, Posed, load_problems, load_run_config, open_solver, parser, solve_file
from selfverify.utils.io import atomic_write_text
from selfverify.utils.plots import plot_scaling

NS = (1, 2, 4, 8, 16)


def oracle(records: list[dict[str, Any]]) -> float:
    """pass@N: the share of problems where any round-0 candidate is right."""
    hits = [any(c["correct"] for c in r["candidates"] if c["round"] == 0) for r in records]
    return sum(hits) / len(hits)


def table(rows: list[dict[str, Any]], problems: int) -> str:
    lines = [
        f"{problems} problems; accuracy with its 95% interval (Wilson); tokens generated per problem "
        "(generator + verifier + meta-verifier).",
        "",
        "| method | N | accuracy | 95% interval | tokens / problem | oracle pass@N |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        low, high = r["accuracy_ci95"]
        pass_n = f"{r['oracle']:.1%}" if r.get("oracle") is not None else ""
        lines.append(
            f"| {r['method']} | {r['n']} | {r['accuracy']:.1%} | [{low:.1%}, {high:.1%}] | "
            f"{r['tokens_per_problem']['total']:,.0f} | {pass_n} |"
        )
    return "\n".join(lines) + "\n"


def run_point(
    solver: Solver,
    method: str,
    n: int,
    problems: list[Posed],
    out_dir: Path,
    *,
    progress: bool,
    console: Console,
) -> dict[str, Any]:
    """One (method, N) of the study: its records in OUT_DIR/<method>-N<N>.jsonl and its summary."""
    out = out_dir / f"{method}-N{n}.jsonl"
    sc = dataclasses.replace(solver.cfg, method=method, candidates=n)
    summary = solve_file(dataclasses.replace(solver, cfg=sc), problems, out, progress=progress)
    if method == "best_of_n":
        summary["oracle"] = oracle([json.loads(line) for line in out.read_text().splitlines()])
    tokens = summary["tokens_per_problem"]["total"]
    console.print(f"{method} N={n}: {summary['accuracy']:.1%}, {tokens:,.0f} tokens/problem")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = parser("python -m selfverify.solve_study", __doc__)
    p.add_argument("--ns", type=int, nargs="+", default=list(NS), help="the N to run (default: 1 2 4 8 16)")
    p.add_argument(
        "--methods", nargs="+", default=list(SOLVE_METHODS), choices=SOLVE_METHODS, help="the methods to run"
    )
    p.add_argument("--out-dir", type=Path, help="where records, table and plot go (default: RUN_DIR/solve)")
    args = p.parse_args(argv)
    console = Console(stderr=True, soft_wrap=True)  # errors stay one greppable line
    try:
        cfg = load_run_config(args)
        if args.out_dir is None and args.run_dir is None:
            raise ValueError("--out-dir is needed without --run-dir")
        out_dir = args.out_dir or args.run_dir / "solve"
        configure_torch(cfg.threads)
        with open_solver(cfg, args.run_dir) as solver:
            problems = load_problems(cfg, solver)
            rows = [
                run_point(
                    solver, method, n, problems, out_dir, progress=not args.no_progress, console=console
                )
                for method in args.methods
                for n in ([1] if method == "greedy" else args.ns)
            ]
    except (*ERRORS, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    atomic_write_text(out_dir / "study.md", table(rows, len(problems)))
    atomic_write_text(out_dir / "study.json", json.dumps(rows, indent=2) + "\n")
    plot_scaling(rows, out_dir / "study.png", f"test-time scaling, {len(problems)} problems")
    print(table(rows, len(problems)))
    console.print(f"results: {out_dir}/study.md, study.png, study.json and one <method>-N<N>.jsonl per row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
