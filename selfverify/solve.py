"""``python -m selfverify.solve``: solve problems with a trained generator and judge (test-time search).

python -m selfverify.solve --run-dir runs/a                              # search, the run's held-out problems
python -m selfverify.solve --run-dir runs/a solve.method=best_of_n solve.candidates=16
python -m selfverify.solve --run-dir runs/a solve.input=problems.jsonl --out solved.jsonl
python -m selfverify.solve --out solved.jsonl task.name=gsm8k solve.endpoint=http://127.0.0.1:8000/v1 \\
    solve.endpoint_model=deepseek-math-v2 solve.endpoint_chat=true      # a model served elsewhere

One JSONL record per problem (the chosen solution, its answer and scores, the tokens each role
generated for it, every candidate with its analyses), written in batches to ``OUT.partial`` and renamed
to ``OUT`` when every problem is solved; rerun the same command to continue a stopped run (each record is
written once). Then a summary (accuracy with its 95% interval, tokens per problem, failures) is printed
and written to ``OUT.summary.json``. Methods and settings: docs/guides/solve.md, ``--help``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from scipy.stats import binomtest
from tqdm import tqdm

from selfverify.config.load import ConfigError, load_config
from selfverify.config.reference import HelpAction
from selfverify.config.schema import Config, SolveConfig
from selfverify.judges.base import JudgeFormat
from selfverify.judges.generative import make_format, require_version
from selfverify.recipes.judge_data import generator_tokens, judge_format_name, model_specs
from selfverify.recipes.search import Solver, record
from selfverify.runtime.backends import Backend, BackendError, make_backend
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.runtime.endpoint import EndpointError, EndpointModel
from selfverify.runtime.engines import configure_torch
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.textgen import LocalModel, TextModel
from selfverify.tasks.base import Task, TaskProblem, raw_prompter
from selfverify.tasks.registry import make_task
from selfverify.utils.io import (
    RecordError,
    SourceError,
    atomic_write_bytes,
    atomic_write_json,
    json_line,
    read_records,
)

EXIT_OK, EXIT_FAILED = 0, 2


Posed = tuple[str, TaskProblem]  # a problem and the id its record carries


def read_problems(path: Path, task: Task) -> list[Posed]:
    """A JSONL file of ``{"problem": ..., "answer": ..., "id": ...}`` lines (answer and id optional; the
    id defaults to the line number) as the task's problems; a line the task cannot read is a
    ``RecordError`` naming it."""
    problems = []
    for line_no, rec in read_records(path, on_error="fail"):
        text, answer = rec.get("problem"), rec.get("answer")
        if not isinstance(text, str) or not text.strip():
            raise RecordError(path, line_no, 'expected a non-empty "problem" string')
        id = str(rec.get("id", line_no))
        try:
            problems.append((id, task.problem_from_text(text, None if answer is None else str(answer), id)))
        except ValueError as exc:
            raise RecordError(path, line_no, str(exc)) from None
    if not problems:
        raise RecordError(path, 1, "no problems in the file")
    return problems


def _model_dir(given: str | None, run_dir: Path | None, candidates: list[str], role: str) -> Path:
    if given is not None:
        path = Path(given)
    else:
        found = [
            run_dir / c for c in candidates if run_dir is not None and (run_dir / c / "config.json").is_file()
        ]
        if not found:
            where = f"in {run_dir} ({', '.join(candidates)})" if run_dir else "(no --run-dir)"
            raise CheckpointError(
                f"no {role} model {where}: pass solve.{role}=DIR or the --run-dir of a loop run"
            )
        path = found[0]
    if not (path / "config.json").is_file():
        raise CheckpointError(f"solve.{role}: {path} is not a model directory (no config.json)")
    return path


def _model_paths(sc: SolveConfig, run_dir: Path | None) -> dict[str, Path]:
    """The generator's, judge's and meta-verifier's directories (the meta-verifier is the judge unless the
    run has one of its own, or one is given)."""
    paths = {
        "generator": _model_dir(sc.generator, run_dir, ["checkpoints/latest/generator"], "generator"),
        "judge": _model_dir(sc.judge, run_dir, ["judge", "checkpoints/latest/judge"], "judge"),
    }
    own_meta = sc.meta is not None or (run_dir is not None and (run_dir / "checkpoints/latest/meta").is_dir())
    paths["meta"] = (
        _model_dir(sc.meta, run_dir, ["checkpoints/latest/meta"], "meta") if own_meta else paths["judge"]
    )
    return paths


def _solver(
    cfg: Config,
    task: Task,
    fmt: JudgeFormat,
    refine_fmt: JudgeFormat,
    models: list[TextModel],
    analysis_tokens: int,
) -> Solver:
    return Solver(
        task=task,
        fmt=fmt,
        refine_fmt=refine_fmt,
        generator=models[0],
        verifier=models[1],
        meta=models[2],
        cfg=cfg.solve,
        solution_tokens=cfg.solve.max_new_tokens or generator_tokens(cfg),
        analysis_tokens=analysis_tokens,
        seed=cfg.seed,
        self_verifying=cfg.reward.mode == "self_verify",
    )


def _endpoint_solver(cfg: Config) -> Solver:
    """Every role served by one OpenAI-compatible endpoint (checked before any work)."""
    sc = cfg.solve
    if not sc.endpoint_model:
        raise ConfigError(
            "config key 'solve.endpoint_model': the served model's name is needed with solve.endpoint"
        )
    assert sc.endpoint is not None
    endpoint = EndpointModel(
        sc.endpoint,
        sc.endpoint_model,
        chat=sc.endpoint_chat,
        concurrency=sc.concurrency,
        timeout_s=sc.timeout_s,
        retries=sc.retries,
    )
    endpoint.check()
    task = make_task(cfg.task, raw_prompter)  # the server applies its chat template (endpoint_chat)
    fmt = make_format(judge_format_name(cfg), task)
    tokens = sc.judge_max_new_tokens or cfg.loop.judge_max_new_tokens
    return _solver(cfg, task, fmt, fmt, [endpoint] * 3, tokens)


def _local_solver(cfg: Config, paths: dict[str, Path], backend: Backend, roles: tuple[str, ...]) -> Solver:
    """The checkpoints in ``paths`` as workers of ``backend``; the judge's manifest must match the format."""
    specs = model_specs(cfg)
    workers = {r: backend.spawn(r, specs[r], cfg.seed, path=paths[r]) for r in roles}
    workers.setdefault("meta", workers["judge"])
    gen_prompter = chat_prompter(workers["generator"].get_tokenizer(), cfg.model)
    task = make_task(cfg.task, gen_prompter)
    name = judge_format_name(cfg)
    fmt = make_format(name, task, chat_prompter(workers["judge"].get_tokenizer(), specs["judge"]))
    manifest_path = paths["judge"] / "verifier.json"
    manifest = (
        json.loads(manifest_path.read_text())
        if manifest_path.is_file()
        else {"format": name, "format_version": fmt.version}
    )
    require_version(fmt, manifest, str(paths["judge"]))
    tokens = cfg.solve.judge_max_new_tokens or manifest.get("max_new_tokens", cfg.loop.judge_max_new_tokens)
    batch = None if cfg.rollout.engine == "vllm" else cfg.eval_batch_size  # vLLM schedules its own batches
    models: list[TextModel] = [
        LocalModel(workers[r], batch_size=batch) for r in ("generator", "judge", "meta")
    ]
    return _solver(cfg, task, fmt, make_format(name, task, gen_prompter), models, tokens)


@contextmanager
def open_solver(cfg: Config, run_dir: Path | None) -> Iterator[Solver]:
    """The solver the configuration names: an endpoint for every role, or the run's (or given)
    checkpoints on the configured backend and rollout engine, whose workers are shut down on exit."""
    if cfg.solve.endpoint is not None:
        yield _endpoint_solver(cfg)
        return
    paths = _model_paths(cfg.solve, run_dir)
    roles = ("generator", "judge", "meta") if paths["meta"] != paths["judge"] else ("generator", "judge")
    backend = make_backend(cfg.backend, cfg.threads, None, cfg.rollout, roles=roles)
    try:
        yield _local_solver(cfg, paths, backend, roles)
    finally:
        backend.shutdown()


def resume(partial: Path, sc: SolveConfig) -> dict[int, dict[str, Any]]:
    """The complete records of a stopped run (a line cut off by the stop is dropped); refuses a file
    that holds another method's or N's records."""
    if not partial.is_file():
        return {}
    raw = partial.read_bytes()
    whole = raw[: raw.rfind(b"\n") + 1]
    if whole != raw:
        atomic_write_bytes(partial, whole)
    done = {}
    for line_no, rec in read_records(partial, on_error="fail"):
        if (rec.get("method"), rec.get("n")) != (sc.method, sc.candidates):
            raise RecordError(
                partial,
                line_no,
                f"a record of method {rec.get('method')} N={rec.get('n')}, not {sc.method} "
                f"N={sc.candidates}: use another --out, or remove the file to start over",
            )
        done[rec["index"]] = rec
    return done


def summarize(records: list[dict[str, Any]], seconds: float | None) -> dict[str, Any]:
    """Accuracy (with its Wilson 95% interval, over the problems with a reference answer), tokens per
    problem by role, failures by kind, parse rates and throughput."""
    scored = [r["correct"] for r in records if r["correct"] is not None]
    out: dict[str, Any] = {"problems": len(records), "method": records[0]["method"], "n": records[0]["n"]}
    if scored:
        k = sum(scored)
        ci = binomtest(k, len(scored)).proportion_ci(0.95, method="wilson")
        out |= {"accuracy": k / len(scored), "accuracy_ci95": [ci.low, ci.high], "scored": len(scored)}
    tokens = {
        role: sum(r["tokens"][role] for r in records) for role in ("generator", "verifier", "meta", "total")
    }
    out["tokens_per_problem"] = {role: v / len(records) for role, v in tokens.items()}
    failures: dict[str, int] = {}
    for r in records:
        for kind, count in r["failures"].items():
            failures[kind] = failures.get(kind, 0) + count
    out["failures"] = failures
    analyses = sum(len(c["analyses"]) for r in records for c in r["candidates"])
    if analyses:
        out["analysis_parse_rate"] = 1 - failures.get("unparsed_analyses", 0) / analyses
    if seconds:
        out |= {
            "seconds": seconds,
            "problems_per_minute": 60 * len(records) / seconds,
            "tokens_per_second": tokens["total"] / seconds,
        }
    return out


def load_problems(cfg: Config, solver: Solver) -> list[Posed]:
    """``solve.input``'s problems, else the task's held-out ones (their own ids, else heldout-<i>); the
    first ``solve.problems``."""
    sc = cfg.solve
    if sc.input:
        problems = read_problems(Path(sc.input), solver.task)
    else:
        heldout = solver.task.heldout(sc.problems or cfg.task.n_heldout, cfg.seed)
        problems = [(getattr(p, "id", f"heldout-{i}"), p) for i, p in enumerate(heldout)]
    return problems[: sc.problems] if sc.problems else problems


def solve_file(solver: Solver, problems: list[Posed], out: Path, *, progress: bool) -> dict[str, Any]:
    """Solve every problem not yet in ``OUT.partial``, batch by batch (each batch's records appended and
    synced at once), rename it to ``OUT`` and return the summary (also written to ``OUT.summary.json``).
    An already complete ``OUT`` is summarised as it is. Raises ``EndpointError`` (the records so far
    stay in the partial file)."""
    sc = solver.cfg
    summary_path = out.with_name(out.name + ".summary.json")
    if out.is_file() and summary_path.is_file():
        return json.loads(summary_path.read_text())
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    done = resume(partial, sc)
    if done:
        tqdm.write(
            f"resuming: {len(done)} of {len(problems)} problems already solved in {partial}", file=sys.stderr
        )
    resumed, start, size = bool(done), time.perf_counter(), sc.batch_problems
    desc = f"solve ({sc.method}, N={sc.candidates})"
    with (
        open(partial, "ab") as f,
        tqdm(total=len(problems), initial=len(done), desc=desc, disable=not progress, unit="problem") as bar,
    ):
        for b in range(0, len(problems), size):
            todo = [i for i in range(b, min(b + size, len(problems))) if i not in done]
            if not todo:
                continue
            # A whole batch is solved (its draws are keyed by it); only its missing records are written.
            attempts = solver.solve([p for _, p in problems[b : b + size]], batch=b // size)
            lines = [record(attempts[i - b], i, problems[i][0], sc) for i in todo]
            f.write(b"".join(json_line(rec) for rec in lines))
            f.flush()
            os.fsync(f.fileno())  # a batch's records are durable before the next batch starts
            done |= {rec["index"]: rec for rec in lines}
            bar.update(len(todo))
    partial.replace(out)
    summary = summarize(
        [done[i] for i in range(len(problems))], None if resumed else time.perf_counter() - start
    )
    atomic_write_json(summary_path, summary)
    return summary


def parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """The options solve and its study share; the rest is configuration (``--help`` lists every key)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0].replace("``", ""), add_help=False)
    p.add_argument("-h", "--help", action=HelpAction)
    p.add_argument("--run-dir", type=Path, help="a loop run: its config, generator and judge")
    p.add_argument("--config", help="YAML config (default: the run's config.yaml, else the packaged default)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("overrides", nargs="*", help="dotted overrides key=value, e.g. solve.method=best_of_n")
    return p


def load_run_config(args: argparse.Namespace) -> Config:
    run_config = args.run_dir / "config.yaml" if args.run_dir else None
    return load_config(
        args.config or (run_config if run_config and run_config.is_file() else None), args.overrides
    )


ERRORS = (ConfigError, RecordError, CheckpointError, SourceError, EndpointError, BackendError)


def main(argv: list[str] | None = None) -> int:
    p = parser("python -m selfverify.solve", __doc__)
    p.add_argument("--out", type=Path, help="the output JSONL (default: RUN_DIR/solve/<method>-N<N>.jsonl)")
    args = p.parse_args(argv)
    console = Console(stderr=True, soft_wrap=True)  # errors stay one greppable line
    try:
        cfg = load_run_config(args)
        sc = cfg.solve
        if args.out is None and args.run_dir is None:
            raise ConfigError("--out is needed without --run-dir")
        out = args.out or args.run_dir / "solve" / f"{sc.method}-N{sc.candidates}.jsonl"
        if out.is_file():
            console.print(f"{out} is complete: nothing to do (remove it to solve again)")
            return EXIT_OK
        configure_torch(cfg.threads)
        with open_solver(cfg, args.run_dir) as solver:
            summary = solve_file(solver, load_problems(cfg, solver), out, progress=not args.no_progress)
    except ERRORS as err:
        console.print(f"[red]error:[/red] {err}")
        if isinstance(err, EndpointError):
            console.print("the records solved before it are kept: rerun the same command to continue")
        return EXIT_FAILED
    except OSError as err:
        console.print(f"[red]error:[/red] {err.strerror or err}: {err.filename or ''}")
        return EXIT_FAILED
    report(summary, console)
    console.print(f"results: {out} (one record per problem), {out}.summary.json")
    return EXIT_OK


def report(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"solve: {summary['method']}, N={summary['n']}, {summary['problems']} problems")
    table.add_column("figure")
    table.add_column("value", justify="right")
    if "accuracy" in summary:
        low, high = summary["accuracy_ci95"]
        table.add_row("accuracy", f"{summary['accuracy']:.1%} [{low:.1%}, {high:.1%}]")
    for role, v in summary["tokens_per_problem"].items():
        table.add_row(f"{role} tokens / problem", f"{v:,.0f}")
    for kind, count in summary["failures"].items():
        table.add_row(f"failures: {kind}", str(count))
    for key in ("analysis_parse_rate", "problems_per_minute", "tokens_per_second"):
        if key in summary:
            table.add_row(key.replace("_", " "), f"{summary[key]:.3g}")
    Console().print(table)
    if summary.get("analysis_parse_rate", 1.0) < 0.5:
        console.print(
            f"[yellow]warning:[/yellow] only {summary['analysis_parse_rate']:.0%} of the analyses parsed: "
            "is the judge trained in this judge format (loop.judge_format)? Unparsed analyses count for "
            "nothing"
        )


if __name__ == "__main__":
    sys.exit(main())
