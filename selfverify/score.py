"""Standalone verification scoring (docs/guides/architecture.md, 'Scoring'): ``python -m selfverify.score``.

Reads JSONL (or a JSON array) of records in either shape

- ProcessBench: ``{"id", "problem", "steps": [str, ...], "label": k}`` with ``label`` the index of the
  earliest wrong step, -1 when all are right (optional);
- plain: ``{"problem", "solution", "answer"?, "id"?}``; the solution is split into steps by
  ``--split-rule`` (see :func:`selfverify.tasks.realmath.split_steps`);

and writes one JSONL line per record: ``id`` (the line number when the record has none),
``step_scores``, ``earliest_error``, ``score``, ``analysis``, plus ``label`` when given and the
verifier's ``extra`` when it has any, and ``"parsed": false`` for an analysis that did not parse. With
labels it prints ProcessBench metrics (acc_err, acc_corr, F1, see
:func:`selfverify.judges.metrics.processbench_metrics`); ``--metrics-json`` writes them with the run's
counts and throughput.

On a terminal a progress bar on stderr counts the records done as each batch of ``--batch-size`` is
scored (a generative judge takes minutes a batch); elsewhere stderr carries only the messages.

The parse rate, the share of scored records whose analysis parsed, is printed and in
``--metrics-json`` (``parse_rate``, ``n_parsed``). An unparsed analysis scores every step wrong
(``Verdict.parsed``), so a judge that mostly ignores its format gets an F1 that measures nothing;
below ``PARSE_RATE_WARNING`` a warning says so. Rule verifiers and PRMs write no analysis to parse:
their verdicts all count as parsed (parse rate 1.0).

Malformed records (bad JSON, missing fields, wrong types, and inputs the verifier cannot judge: those
its optional ``validate(VerifyInput)`` refuses with ``ValueError``, such as a problem that is not
``Q:...`` for ``embedded-rule``) are reported with their line number and skipped, or with
``--on-error fail`` stop the run with exit code 2. Output goes to ``OUT.partial`` and is renamed to
``OUT`` only when the run completes, so ``OUT`` is never half written; after a failure ``OUT.partial``
holds every record scored before the bad one.
"""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from selfverify.judges.base import Verdict, Verifier, earliest_error_from_scores
from selfverify.judges.metrics import processbench_metrics
from selfverify.judges.records import ScoreItem, parse_record
from selfverify.judges.registry import VerifierSpecError, load_verifier
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.tasks.realmath import SPLIT_RULES
from selfverify.utils.io import (
    AtomicJsonlWriter,
    RecordError,
    atomic_write_json,
    read_records,
    report_record_error,
)

EXIT_OK = 0
EXIT_FAILED = 2
PARSE_RATE_WARNING = 0.5  # below this share of parsed analyses the metrics come with a warning


def output_record(item: ScoreItem, verdict: Verdict, threshold: float | None) -> dict[str, Any]:
    """The output line for one record. ``threshold`` re-derives ``earliest_error`` from step scores."""
    earliest = verdict.earliest_error
    if threshold is not None and verdict.step_scores:
        earliest = earliest_error_from_scores(verdict.step_scores, threshold)
    out: dict[str, Any] = {
        "id": item.id,
        "step_scores": [float(s) for s in verdict.step_scores],
        "earliest_error": earliest,
        "score": verdict.score,
        "analysis": verdict.analysis,
    }
    if item.label is not None:
        out["label"] = item.label
    if not verdict.parsed:
        out["parsed"] = False
    if verdict.extra:
        out["extra"] = verdict.extra
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m selfverify.score",
        description="Score solutions step by step with a verifier; ProcessBench metrics when labelled.",
    )
    parser.add_argument(
        "--verifier", required=True, help="a verifier name (e.g. 'rule') or a checkpoint directory"
    )
    parser.add_argument("--input", required=True, type=Path, help="JSONL or JSON array of records")
    parser.add_argument("--output", required=True, type=Path, help="JSONL of verdicts (written atomically)")
    parser.add_argument("--metrics-json", type=Path, help="also write metrics and counts here (atomically)")
    parser.add_argument(
        "--split-rule", choices=SPLIT_RULES, default="lines", help="how a 'solution' is split into steps"
    )
    parser.add_argument(
        "--on-error",
        choices=("skip", "fail"),
        default="skip",
        help="a malformed record is skipped with a warning, or stops the run with exit code 2",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="re-derive earliest_error as the first step scored below this (scalar verifiers); "
        "default: the verifier's own decision",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="records per verify_batch call")
    parser.add_argument("--device", help="device of a model verifier (cpu, cuda, cuda:1); default: its own")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        help="weights of a public PRM (math-shepherd:, qwen-prm:)",
    )
    return parser


@dataclass
class Tally:
    """What a scoring run counted: the records written and skipped, and what the metrics need."""

    written: int = 0
    skipped: int = 0
    score: float = 0.0
    flagged: int = 0
    parsed: int = 0
    preds: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)

    def add(self, out: dict[str, Any]) -> None:
        self.written += 1
        self.score += out["score"]
        self.flagged += out["earliest_error"] >= 0
        self.parsed += out.get("parsed", True)
        if "label" in out:
            self.preds.append(out["earliest_error"])
            self.labels.append(out["label"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0, or 2 for a failed run)."""
    args = build_parser().parse_args(argv)
    if args.batch_size < 1:
        print("error: --batch-size must be at least 1", file=sys.stderr)
        return EXIT_FAILED
    if not args.input.is_file():
        print(f"error: no such input file: {args.input}", file=sys.stderr)
        return EXIT_FAILED
    verifier = _load(args)
    if verifier is None:
        return EXIT_FAILED
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        writer = AtomicJsonlWriter(args.output)
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    start = time.perf_counter()
    tally, failure = _score_all(args, verifier, writer)
    if failure is not None:
        print(f"error: {failure}", file=sys.stderr)
        print(
            f"stopped: the {writer.count} records scored before it are in {writer.partial_path}; "
            f"{args.output} was not written",
            file=sys.stderr,
        )
        return EXIT_FAILED
    _report(args, tally, time.perf_counter() - start)
    return EXIT_OK


def _load(args: argparse.Namespace) -> Verifier | None:
    """The verifier ``--verifier`` names, with ``--device``/``--dtype``; None (reported) when it cannot
    be loaded that way."""
    options = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v is not None}
    try:
        return load_verifier(args.verifier, **options)
    except (VerifierSpecError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except TypeError as exc:  # a loader without a device or dtype option
        if not options:
            raise
        print(f"error: verifier {args.verifier!r} does not take {', '.join(options)}: {exc}", file=sys.stderr)
    return None


def _score_all(
    args: argparse.Namespace, verifier: Verifier, writer: AtomicJsonlWriter
) -> tuple[Tally, RecordError | None]:
    """Score the input in batches into ``writer``; with ``--on-error fail`` the first bad record stops
    the run (returned), keeping what was scored before it in the partial file."""
    tally = Tally()
    # Records done, scored or skipped, out of the input's non-blank lines (a JSON array: unknown), on a
    # terminal. It moves once a batch, and each move is shown: a generative judge's batch takes minutes.
    bar = tqdm(
        total=_jsonl_records(args.input),
        desc="scoring",
        unit="rec",
        mininterval=0,
        file=sys.stderr,
        disable=None,
    )

    def warn(err: RecordError) -> None:
        tally.skipped += 1
        tqdm.write(f"warning: {err} (skipped)", file=sys.stderr)
        bar.update(1)

    batch: list[ScoreItem] = []

    def flush() -> None:
        for out in _score_batch(verifier, batch, args.threshold):
            writer.write(out)
            tally.add(out)
        bar.update(len(batch))
        batch.clear()

    # A verifier's own check of an input, run per record so that an input it cannot judge is reported
    # with its line like any malformed record; raised inside verify_batch it stopped the run with a
    # traceback (embedded-rule on a problem that is not Q:...).
    validate = getattr(verifier, "validate", None)
    failure: RecordError | None = None
    with writer:
        try:
            for line_no, record in read_records(args.input, on_error=args.on_error, warn=warn):
                try:
                    item = parse_record(record, line_no, args.split_rule)
                    if validate is not None:
                        validate(item.input)
                except ValueError as exc:
                    report_record_error(RecordError(args.input, line_no, str(exc)), args.on_error, warn)
                    continue
                batch.append(item)
                if len(batch) >= args.batch_size:
                    flush()
        except RecordError as err:  # only raised with --on-error fail
            failure = err
        flush()  # with a failure too: the records read before the bad one are kept
        bar.close()
        if failure is not None:
            writer.abort()
    return tally, failure


def _report(args: argparse.Namespace, tally: Tally, elapsed: float) -> None:
    """Print the run's figures (ProcessBench metrics when labelled), warn on a low parse rate, and
    write ``--metrics-json``."""
    n = tally.written
    summary: dict[str, Any] = {
        "verifier": args.verifier,
        "input": str(args.input),
        "records": n,
        "skipped": tally.skipped,
        "seconds": round(elapsed, 3),
        "records_per_s": round(n / elapsed, 1) if elapsed > 0 else None,
        "threshold": args.threshold,
        "mean_score": tally.score / n if n else None,
        "n_flagged": tally.flagged,
        "parse_rate": tally.parsed / n if n else None,
        "n_parsed": tally.parsed,
    }
    rate = summary["records_per_s"]
    print(f"scored {n} records ({tally.skipped} skipped) in {elapsed:.2f} s: {rate} records/s")
    if n:
        print(f"mean score {summary['mean_score']:.4f}; {tally.flagged} with a step judged wrong")
        print(f"parse rate {100 * summary['parse_rate']:.1f}%: {tally.parsed} of {n} verdicts parsed")
    if tally.labels:
        metrics = processbench_metrics(tally.preds, tally.labels)
        summary.update(metrics)
        print(_format_metrics(metrics))
    if n and summary["parse_rate"] < PARSE_RATE_WARNING:
        print(
            f"warning: only {tally.parsed} of {n} analyses parsed (parse rate "
            f"{100 * summary['parse_rate']:.1f}%, below {100 * PARSE_RATE_WARNING:.0f}%): the judge's "
            "analyses mostly did not follow its format, and an unparsed analysis counts as judging "
            "every step wrong, so acc_err, acc_corr, F1 and the scores say little about its judgment; "
            f'read the "analysis" of the rows marked "parsed": false in {args.output}',
            file=sys.stderr,
        )
    if args.metrics_json:
        args.metrics_json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.metrics_json, summary)


def _jsonl_records(path: Path) -> int | None:
    """The number of non-blank lines of a JSONL file (its records, malformed ones included), for the
    progress bar's total; None for a JSON array, whose records are known only once parsed."""
    with open(path, "rb") as f:
        if f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"["):
            return None
        f.seek(0)
        return sum(1 for line in f if line.strip())


def _score_batch(verifier: Verifier, batch: list[ScoreItem], threshold: float | None) -> list[dict[str, Any]]:
    if not batch:
        return []
    verdicts = verifier.verify_batch([item.input for item in batch])
    if len(verdicts) != len(batch):
        raise RuntimeError(
            f"verifier {verifier.name!r} returned {len(verdicts)} verdicts for {len(batch)} inputs"
        )
    return [output_record(item, verdict, threshold) for item, verdict in zip(batch, verdicts, strict=True)]


def _format_metrics(m: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}"

    return (
        f"ProcessBench: acc_err {pct(m['acc_err'])} ({m['n_err_correct']}/{m['n_err']})  "
        f"acc_corr {pct(m['acc_corr'])} ({m['n_corr_correct']}/{m['n_corr']})  F1 {pct(m['f1'])}"
    )


if __name__ == "__main__":
    sys.exit(main())
