"""Train a discriminative PRM (``selfverify.judges.prm``): ``python -m selfverify.prm_train --out DIR``.

The PRM is the step-level classifier of Lightman et al. 2023, "Let's Verify Step by Step" (arXiv
2305.20050), as trained in Math-Shepherd (arXiv 2312.08935): a decoder backbone with a linear head read
at the end of every step, trained with binary cross-entropy (step correct = 1).

Training data, mixed:

- ``--embedded N``: N problems of the embedded arithmetic world (``train_problems`` of the default
  ``TaskSpec``, never one of the first ``--heldout-exclude`` problems of its ``heldout_split`` with
  ``--heldout-seed``), each with one solution: the reference with probability ``--correct-fraction``,
  else the reference with one realistic error (``tasks.arithmetic.CORRUPTIONS``). Step labels come
  from the ground-truth checker ``check_solution``.
- ``--data FILE ...``: ProcessBench-format JSONL (``problem``, ``steps``, ``label`` = earliest wrong
  step, -1 if none). Steps before the label are correct (1), the labelled step is wrong (0), the steps
  after it are left out of the loss (ProcessBench labels say nothing about them). Records without a
  label or malformed are skipped with a warning.

Loss: binary cross-entropy on the step labels plus ``--lm-coef`` times a next-token loss on the tokens
of correct steps (see :func:`train_prm`).

Backbone: a fresh tiny Llama with the character tokenizer (``selfverify.runtime.models``; by default 6 layers
of width 64, 0.3M parameters), or ``--backbone PATH``, any Hugging Face decoder checkpoint (its base
model is used; a causal-LM head is dropped). Depth matters more than width here: a step's score is
read at its end token, which has to compare what the step says with what it should say (carried
value, the problem's operation, the arithmetic) and the model needs layers for each hop; at equal
compute, 6 layers of width 64 located errors far better than 3 of width 96 (docs/results/scoring.md).

Threshold (stored in verifier.json): ``--threshold T``, or the ProcessBench-F1-maximising value on a
named dev file (``--threshold-dev FILE``; never the file you evaluate on), else 0.5.

The checkpoint directory is written under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import AutoModel, AutoTokenizer

from selfverify.config.schema import ModelSpec
from selfverify.judges.base import VerifyInput
from selfverify.judges.metrics import processbench_metrics
from selfverify.judges.prm import (
    PRMEncoder,
    PRMModel,
    PRMVerifier,
    Window,
    base_model,
    choose_threshold,
)
from selfverify.judges.records import parse_record
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.tasks import Problem, TaskSpec, check_solution, heldout_split, train_problems
from selfverify.tasks.arithmetic import synthetic_solution
from selfverify.utils.io import RecordError, read_records, report_record_error
from selfverify.utils.seeds import stream_seed


@dataclass(frozen=True)
class StepRecord:
    """A labelled solution: ``label`` is the earliest wrong step, -1 when all are right."""

    problem: str
    steps: list[str]
    label: int
    source: str = ""


def embedded_record(problem: Problem, rng: random.Random, correct_fraction: float) -> StepRecord:
    """One solution for ``problem``: the reference or a corrupted one, labelled by ``check_solution``."""
    kind, steps = synthetic_solution(problem, rng, correct_fraction)
    check = check_solution(problem, "\n".join(steps))
    return StepRecord(problem.prompt.strip(), check.steps, check.earliest_error, kind)


def embedded_records(problems: Sequence[Problem], seed: int, correct_fraction: float) -> list[StepRecord]:
    rng = random.Random(stream_seed(seed, "prm_solutions"))
    return [embedded_record(p, rng, correct_fraction) for p in problems]


def load_processbench(path: Path) -> list[StepRecord]:
    """Labelled records of a ProcessBench-format file; malformed or unlabelled ones are skipped."""
    out = []
    for line_no, record in read_records(path):
        try:
            item = parse_record(record, line_no)
            if item.label is None:
                raise ValueError("no 'label': training needs the earliest wrong step (-1 if none)")
        except ValueError as exc:
            report_record_error(RecordError(path, line_no, str(exc)), "skip")
            continue
        out.append(StepRecord(item.input.problem, list(item.input.steps), item.label, str(path)))
    return out


def step_targets(record: StepRecord) -> list[float]:
    """Targets of the labelled steps: 1 before the earliest wrong step, 0 at it; later steps have none."""
    if record.label == -1:
        return [1.0] * len(record.steps)
    return [1.0] * record.label + [0.0]


@dataclass(frozen=True)
class TrainWindow:
    """An encoded window, the targets of its score tokens (NaN: not in the loss) and, per token,
    whether the auxiliary language-model loss predicts it (the tokens of steps labelled correct)."""

    window: Window
    targets: list[float]
    lm_mask: list[bool]


def encode_training(encoder: PRMEncoder, records: Sequence[StepRecord]) -> list[TrainWindow]:
    out = []
    for w in encoder.encode([(r.problem, r.steps) for r in records]):
        targets = step_targets(records[w.record])
        labels = [targets[i] if i < len(targets) else math.nan for i in w.steps]
        if all(math.isnan(t) for t in labels):
            continue
        lm_mask = [False] * len(w.ids)
        start = w.first
        for end, target in zip(w.positions, labels, strict=True):
            if target == 1.0:  # a correct step, its end token included, is text worth imitating
                lm_mask[start : end + 1] = [True] * (end + 1 - start)
            start = end + 1
        out.append(TrainWindow(w, labels, lm_mask))
    return out


def length_grouped_batches(lengths: Sequence[int], batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless batches of indices: every epoch a fresh shuffle, so each item is seen once per epoch.

    Within pools of 16 batches the items are sorted by length before batching, which cuts the
    padding (and so the compute) of a batch, and the batches are shuffled again.
    """
    rng = random.Random(stream_seed(seed, "prm_batches"))
    pool = 16 * batch_size
    while True:
        order = list(range(len(lengths)))
        rng.shuffle(order)
        epoch = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lengths.__getitem__)
            epoch.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
        rng.shuffle(epoch)
        yield from epoch


def train_prm(
    model: PRMModel,
    encoder: PRMEncoder,
    records: Sequence[StepRecord],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup_steps: int = 30,
    weight_decay: float = 0.01,
    grad_clip: float = 1.0,
    lm_coef: float = 1.0,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Fit the PRM with binary cross-entropy on labelled steps (AdamW, linear warmup, cosine decay).

    ``lm_coef > 0`` adds that times a next-token cross-entropy on the tokens of correct steps, with the
    backbone's input embeddings as the output layer (tied, as in the tiny models). Predicting a correct
    step token by token (carry the last result, take the problem's next operation, compute) is the
    check a PRM has to make; a 1-bit step label alone teaches it far more slowly.
    Returns the total loss of every optimisation step.
    """
    data = encode_training(encoder, records)
    if not data:
        raise ValueError("no training record has a labelled step")
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress_ = (step - warmup_steps) / max(steps - warmup_steps, 1)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress_))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    batches = length_grouped_batches([len(d.window.ids) for d in data], batch_size, seed)
    losses = []
    model.train()
    bar = tqdm(range(steps), desc="prm", unit="step", disable=None if progress else True)
    for _ in bar:
        picked = [data[i] for i in next(batches)]
        batch = encoder.collate([p.window for p in picked], device)
        targets = torch.tensor([t for p in picked for t in p.targets], device=device)
        keep = ~torch.isnan(targets)
        hidden = model.hidden(batch.input_ids, batch.attention_mask)
        logits = model.head(hidden[batch.rows, batch.cols]).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[keep], targets[keep])
        if lm_coef > 0:
            lm_mask = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
            for b, p in enumerate(picked):
                lm_mask[b, : len(p.lm_mask)] = torch.tensor(p.lm_mask)
            predicted = lm_mask[:, 1:]  # the token at t + 1 is predicted from the state at t
            if predicted.any():
                embeddings = model.backbone.get_input_embeddings().weight
                lm_logits = hidden[:, :-1][predicted] @ embeddings.T
                lm_loss = torch.nn.functional.cross_entropy(lm_logits, batch.input_ids[:, 1:][predicted])
                loss = loss + lm_coef * lm_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
    model.eval()
    return losses


def evaluate(verifier: PRMVerifier, records: Sequence[StepRecord]) -> dict[str, Any]:
    """ProcessBench metrics of the verifier's ``earliest_error`` on labelled records."""
    verdicts = verifier.verify_batch([VerifyInput(r.problem, r.steps) for r in records])
    return processbench_metrics([v.earliest_error for v in verdicts], [r.label for r in records])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m selfverify.prm_train",
        description="Train a discriminative process reward model (step-score head on a decoder).",
    )
    parser.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    parser.add_argument("--data", nargs="*", type=Path, default=[], help="ProcessBench-format JSONL files")
    parser.add_argument("--embedded", type=int, default=0, help="embedded-world training problems")
    parser.add_argument("--correct-fraction", type=float, default=0.4, help="share of correct solutions")
    parser.add_argument(
        "--heldout-exclude", type=int, default=2048, help="the first N held-out problems are never trained on"
    )
    parser.add_argument(
        "--heldout-seed", type=int, default=0, help="seed of the held-out split (heldout_split)"
    )
    parser.add_argument("--steps", type=int, default=2000, help="optimisation steps")
    parser.add_argument(
        "--batch-size", type=int, default=64, help="windows (about one per solution) per step"
    )
    parser.add_argument("--lr", type=float, default=3e-3, help="peak AdamW learning rate")
    parser.add_argument(
        "--lm-coef", type=float, default=1.0, help="weight of the auxiliary next-token loss on correct steps"
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=30,
        help="linear warm-up steps, then cosine decay to a tenth of --lr",
    )
    parser.add_argument("--seed", type=int, default=0, help="model init, data and batch order")
    parser.add_argument("--backbone", type=Path, help="an HF decoder checkpoint (default: fresh tiny model)")
    parser.add_argument("--hidden-size", type=int, default=64, help="fresh backbone only")
    parser.add_argument("--layers", type=int, default=6, help="fresh backbone only")
    parser.add_argument("--heads", type=int, default=4, help="fresh backbone only")
    parser.add_argument("--intermediate-size", type=int, default=192, help="fresh backbone only")
    parser.add_argument("--max-length", type=int, default=256, help="token bound of one input window")
    thresholds = parser.add_mutually_exclusive_group()
    thresholds.add_argument("--threshold", type=float, help="fixed step-score threshold")
    thresholds.add_argument("--threshold-dev", type=Path, help="choose the F1-maximising threshold here")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    return parser


def build_backbone(args: argparse.Namespace) -> tuple[Any, Any]:
    """The backbone (base model) and its tokenizer: from ``--backbone`` or freshly built."""
    if args.backbone is not None:
        backbone = AutoModel.from_pretrained(args.backbone, dtype=torch.float32)
        return base_model(backbone), AutoTokenizer.from_pretrained(args.backbone)
    tokenizer = build_char_tokenizer()
    spec = ModelSpec(
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=args.heads,
        intermediate_size=args.intermediate_size,
        max_positions=args.max_length,
    )
    return base_model(build_model(spec, tokenizer, args.seed)), tokenizer


class UsageError(ValueError):
    """Bad arguments or missing data: the CLI prints the message and exits with 2."""


def training_data(args: argparse.Namespace) -> tuple[list[StepRecord], list[StepRecord]]:
    """The training records (``--data`` files, then ``--embedded`` problems) and the threshold's dev
    records (``--threshold-dev``), once the arguments are checked."""
    for failed, message in (
        (args.steps < 1, "--steps must be at least 1"),
        (args.batch_size < 1, "--batch-size must be at least 1"),
        (not 0.0 <= args.correct_fraction <= 1.0, "--correct-fraction must be in [0, 1]"),
        (args.embedded < 0 or args.heldout_exclude < 0, "--embedded and --heldout-exclude must be >= 0"),
    ):
        if failed:
            raise UsageError(message)
    records: list[StepRecord] = []
    for path in args.data:
        if not path.is_file():
            raise UsageError(f"no such data file: {path}")
        records.extend(load_processbench(path))
    if args.embedded > 0:
        spec = TaskSpec()
        exclude = set(heldout_split(spec, args.heldout_exclude, args.heldout_seed))
        problems = train_problems(spec, args.embedded, seed=args.seed, tag="prm", exclude=exclude)
        records.extend(embedded_records(problems, args.seed, args.correct_fraction))
    if not records:
        raise UsageError("no training data: give --embedded N and/or --data FILE")
    if args.threshold_dev is None:
        return records, []
    if not args.threshold_dev.is_file():
        raise UsageError(f"no such dev file: {args.threshold_dev}")
    return records, load_processbench(args.threshold_dev)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0, or 2 on bad arguments or no training data)."""
    args = build_parser().parse_args(argv)
    try:
        records, dev = training_data(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    backbone, tokenizer = build_backbone(args)
    verifier = PRMVerifier(PRMModel(backbone), tokenizer, max_length=args.max_length, device=args.device)
    n_err = sum(r.label != -1 for r in records)
    print(f"training on {len(records)} records ({n_err} with an error) for {args.steps} steps")
    start = time.perf_counter()
    losses = train_prm(
        verifier.model,
        verifier.encoder,
        records,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        lm_coef=args.lm_coef,
        seed=args.seed,
    )
    train_seconds = time.perf_counter() - start
    report = training_report(args, verifier, records, dev, losses, train_seconds)
    verifier.save_pretrained(args.out, extra={"training": report})
    print(f"trained in {train_seconds:.1f} s; final loss {report['final_loss']:.4f}")
    print(f"threshold {verifier.threshold:.4f} ({report['threshold_source']})")
    for name in ("dev", "train_sample"):
        if name in report:
            m = report[name]
            print(f"{name}: acc_err {m['acc_err']}  acc_corr {m['acc_corr']}  F1 {m['f1']}")
    print(f"wrote {args.out}")
    return 0


def training_report(
    args: argparse.Namespace,
    verifier: PRMVerifier,
    records: list[StepRecord],
    dev: list[StepRecord],
    losses: list[float],
    train_seconds: float,
) -> dict[str, Any]:
    """Set the verifier's threshold (``--threshold``, else the best F1 on ``dev``, else its default) and
    describe the training run: what ``training`` holds in the saved verifier's config."""
    report: dict[str, Any] = {"threshold_source": "default"}
    if args.threshold is not None:
        verifier.threshold, report["threshold_source"] = args.threshold, "--threshold"
    elif dev:
        scores = verifier.score_steps([VerifyInput(r.problem, r.steps) for r in dev])
        verifier.threshold, report["dev"] = choose_threshold(scores, [r.label for r in dev])
        report["threshold_source"] = f"F1 on {args.threshold_dev}"
    report["train_sample"] = evaluate(verifier, records[:1000])
    tail = losses[-20:]
    report.update(
        records=len(records),
        records_with_error=sum(r.label != -1 for r in records),
        steps=args.steps,
        final_loss=sum(tail) / len(tail),
        # The mean loss of every 100 steps: whether and when the error-locating circuit formed.
        loss_curve=[
            round(sum(c) / len(c), 4) for c in (losses[i : i + 100] for i in range(0, len(losses), 100))
        ],
        train_seconds=round(train_seconds, 1),
        args={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    )
    return report


if __name__ == "__main__":
    sys.exit(main())
