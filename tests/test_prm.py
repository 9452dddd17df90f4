"""The discriminative PRM (selfverify/judges/prm.py) and its trainer (selfverify/prm_train.py).

``fixtures/embedded_processbench_sample.jsonl`` was written by
``python scripts/make_embedded_processbench.py --output ... --n 16 --skip 4000`` (a one-off generator,
no longer on main: ``git show 237a32f:scripts/make_embedded_processbench.py``).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from selfverify.config.schema import ModelSpec
from selfverify.judges.base import VerifyInput
from selfverify.judges.prm import HEAD_FILE, PRMModel, PRMVerifier, base_model, choose_threshold
from selfverify.judges.registry import load_verifier
from selfverify.prm_train import (
    StepRecord,
    embedded_records,
    encode_training,
    load_processbench,
    step_targets,
    train_prm,
)
from selfverify.prm_train import main as train_main
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.tasks import TaskSpec, check_solution, train_problems
from selfverify.tasks.arithmetic import CORRUPTIONS, corrupt_solution

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
EMBEDDED_SAMPLE = FIXTURES / "embedded_processbench_sample.jsonl"
TINY = ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64)


def tiny_verifier(max_length: int = 64, seed: int = 0) -> PRMVerifier:
    tokenizer = build_char_tokenizer()
    backbone = base_model(build_model(TINY, tokenizer, seed))
    return PRMVerifier(PRMModel(backbone), tokenizer, max_length=max_length, device="cpu")


ITEMS = [
    VerifyInput("Q:1+2-4", ["1+2=3", "3-4=-1", "A:-1"]),
    VerifyInput("Q:5+5", ["5+5=10", "A:10"]),
    VerifyInput("Q:9-1+2+3", ["9-1=8", "8+2=10", "10+3=13", "A:13", "extra line"]),
]


def test_one_score_per_step_independent_of_batching() -> None:
    verifier = tiny_verifier()
    verdicts = verifier.verify_batch(ITEMS)
    assert [len(v.step_scores) for v in verdicts] == [len(item.steps) for item in ITEMS]
    for v in verdicts:
        assert all(0.0 < s < 1.0 for s in v.step_scores)
        assert v.earliest_error == next((i for i, s in enumerate(v.step_scores) if s < 0.5), -1)
        assert v.score == (1.0 if v.earliest_error == -1 else 0.0)
        assert v.analysis and v.extra == {}
    # Padding and batch composition must not change a record's scores.
    verifier.batch_size = 1
    alone = [verifier.score_steps([item])[0] for item in ITEMS]
    for a, v in zip(alone, verdicts, strict=True):
        assert a == pytest.approx(v.step_scores, abs=1e-5)
    empty = verifier.verify_batch([VerifyInput("Q:1+1", [])])[0]
    assert (empty.step_scores, empty.earliest_error, empty.score) == ([], -1, 0.0)


def test_long_records_are_windowed_and_truncated() -> None:
    verifier = tiny_verifier(max_length=24)
    item = VerifyInput("Q:" + "+1" * 30, ["1+1=2"] * 6 + ["9" * 40])
    windows = verifier.encoder.encode([(item.problem, list(item.steps))])
    assert len(windows) > 1 and all(len(w.ids) <= 24 for w in windows)
    assert sorted(i for w in windows for i in w.steps) == list(range(len(item.steps)))
    verdict = verifier.verify_batch([item])[0]
    assert len(verdict.step_scores) == len(item.steps)
    assert verdict.extra == {"truncated": True, "windows": len(windows)}
    # The score token of the last step is end-of-sequence, of the others the newline.
    tok = verifier.tokenizer
    ends = [w.ids[p] for w in windows for p in w.positions]
    assert ends[-1] == tok.eos_token_id and set(ends[:-1]) == {tok.convert_tokens_to_ids("\n")}


def test_save_load_round_trip(tmp_path: Path) -> None:
    verifier = tiny_verifier()
    verifier.threshold = 0.37
    out = tmp_path / "prm"
    verifier.save_pretrained(out, extra={"note": "test"})
    verifier.save_pretrained(out)  # over an existing checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prm"]  # no temporary directory left
    meta = json.loads((out / "verifier.json").read_text())
    assert meta["kind"] == "prm" and meta["threshold"] == 0.37 and meta["note"] == "test"
    assert (out / HEAD_FILE).is_file() and (out / "model.safetensors").is_file()
    assert (
        AutoTokenizer.from_pretrained(out)("1+2=3\n")["input_ids"]
        == verifier.tokenizer("1+2=3\n")["input_ids"]
    )

    loaded = load_verifier(str(out))
    assert isinstance(loaded, PRMVerifier) and loaded.threshold == 0.37
    assert loaded.encoder.max_length == verifier.encoder.max_length
    for a, b in zip(loaded.score_steps(ITEMS), verifier.score_steps(ITEMS), strict=True):
        assert a == pytest.approx(b, abs=1e-6)
    assert load_verifier(str(out), threshold=0.9).threshold == 0.9


def test_registry_loads_torch_lazily() -> None:
    code = "import sys, selfverify.judges.registry as r; assert 'prm' in r.CHECKPOINT_LOADERS; "
    code += "print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_corruptions_are_labelled_by_ground_truth() -> None:
    rng = random.Random(0)
    problems = train_problems(TaskSpec(), 40, seed=0, tag="test", exclude=set())
    for kind in CORRUPTIONS:
        for p in problems:
            steps = corrupt_solution(p, kind, rng)
            check = check_solution(p, "\n".join(steps))
            assert check.earliest_error != -1, (kind, p, steps)
            if kind == "no_answer":
                assert check.earliest_error == len(p.ops) - 1
            if kind == "final":
                assert check.earliest_error == len(p.ops)
    records = embedded_records(problems, seed=0, correct_fraction=0.5)
    assert {r.label == -1 for r in records} == {True, False}
    assert all(r.label == -1 for r in records if r.source == "none")


def test_step_targets_and_training_windows() -> None:
    record = StepRecord("Q:1+2+3", ["1+2=3", "3+3=7", "A:7"], label=1)
    assert step_targets(record) == [1.0, 0.0]
    assert step_targets(StepRecord("Q:1+2", ["1+2=3", "A:3"], label=-1)) == [1.0, 1.0]
    (window,) = encode_training(tiny_verifier().encoder, [record])
    assert window.targets[:2] == [1.0, 0.0] and math.isnan(window.targets[2])
    # The language-model loss reads the tokens of the correct step (its end token too), nothing else.
    assert window.lm_mask == [False] * window.window.first + [True] * 6 + [False] * 10


def test_load_processbench_skips_malformed_and_unlabelled(capsys: pytest.CaptureFixture[str]) -> None:
    records = load_processbench(FIXTURES / "processbench_sample.jsonl")
    assert records and all(-1 <= r.label < len(r.steps) for r in records)
    assert "no 'label'" in capsys.readouterr().err


def test_training_separates_correct_from_wrong_steps() -> None:
    torch.manual_seed(0)
    verifier = tiny_verifier()
    problems = train_problems(TaskSpec(), 24, seed=0, tag="test", exclude=set())
    records = embedded_records(problems, seed=0, correct_fraction=0.4)
    losses = train_prm(
        verifier.model,
        verifier.encoder,
        records,
        steps=60,
        batch_size=24,
        lr=3e-3,
        warmup_steps=5,
        progress=False,
        lm_coef=0.0,  # the step-label loss alone: the test checks the head can fit the labels
    )
    assert sum(losses[-5:]) / 5 < 0.3 * sum(losses[:5]) / 5
    scores = verifier.score_steps([VerifyInput(r.problem, r.steps) for r in records])
    right, wrong = [], []
    for record, s in zip(records, scores, strict=True):
        for score, target in zip(s, step_targets(record), strict=False):
            (right if target == 1.0 else wrong).append(score)
    assert len(wrong) >= 10
    balanced = (sum(s >= 0.5 for s in right) / len(right) + sum(s < 0.5 for s in wrong) / len(wrong)) / 2
    assert balanced > 0.9


def test_choose_threshold_maximises_f1() -> None:
    # Record 0 (label 1) is right for t in (0.2, 0.6]; records 1, 2 (label -1) for t <= 0.7 and <= 0.4;
    # record 3 (label 0) for t > 0.3. Only t in (0.3, 0.4] gets all four: the midpoint candidate 0.35.
    scores = [[0.6, 0.2, 0.9], [0.8, 0.7], [0.4, 0.95], [0.3, 0.1]]
    labels = [1, -1, -1, 0]
    threshold, metrics = choose_threshold(scores, labels)
    assert threshold == pytest.approx(0.35)
    assert metrics["f1"] == 1.0 and metrics["n"] == 4
    # With only error-free records F1 is undefined: their accuracy is maximised, flagging nothing.
    threshold, metrics = choose_threshold([[0.9, 0.8], [0.6]], [-1, -1])
    assert threshold <= 0.6 and metrics["acc_corr"] == 1.0
    with pytest.raises(ValueError):
        choose_threshold([[0.5]], [1])


def test_train_cli_and_score_cli_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "prm"
    args = ["--out", str(out), "--embedded", "24", "--steps", "8", "--batch-size", "8", "--seed", "1"]
    args += ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--intermediate-size", "64"]
    args += ["--max-length", "64", "--threshold-dev", str(EMBEDDED_SAMPLE), "--threads", "1"]
    assert train_main(args) == 0
    meta = json.loads((out / "verifier.json").read_text())
    assert meta["kind"] == "prm" and "dev" in meta["training"]
    assert meta["training"]["threshold_source"].startswith("F1 on")

    verdicts, metrics = tmp_path / "verdicts.jsonl", tmp_path / "metrics.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "selfverify.score", "--verifier", str(out), "--input", str(EMBEDDED_SAMPLE)]
    cmd += ["--output", str(verdicts), "--metrics-json", str(metrics)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in verdicts.read_text().splitlines()]
    sample = [json.loads(line) for line in EMBEDDED_SAMPLE.read_text().splitlines()]
    assert [r["id"] for r in rows] == [s["id"] for s in sample]
    assert all(len(r["step_scores"]) == len(s["steps"]) for r, s in zip(rows, sample, strict=True))
    m = json.loads(metrics.read_text())
    assert m["records"] == len(sample) and m["f1"] is not None
    assert "ProcessBench" in result.stdout
