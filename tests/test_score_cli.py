"""``python -m selfverify.score`` end to end, and its parts: record I/O, the verifier registry, metrics."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from selfverify.config.schema import ModelSpec
from selfverify.judges import registry
from selfverify.judges.arith_rule import ArithmeticRuleVerifier
from selfverify.judges.base import Verdict
from selfverify.judges.generative import GenerativeVerifier
from selfverify.judges.metrics import processbench_metrics
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.workers import LMWorker
from selfverify.score import main
from selfverify.utils.io import (
    AtomicJsonlWriter,
    RecordError,
    atomic_write_json,
    atomic_write_text,
    read_records,
)

REPO = Path(__file__).resolve().parents[1]
PB_SAMPLE = REPO / "tests" / "fixtures" / "processbench_sample.jsonl"
# Lines of the ProcessBench fixture that are malformed, and the ids it holds.
PB_BAD_LINES = [6, 7, 8, 9, 10, 13]
TINY_JUDGE = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PB_IDS = ["pb-ok", "pb-arith", "pb-latex", "pb-first", "pb-logic", "pb-chain", "pb-percent", "pb-nolabel"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- metrics ------------------------------------------------------------------------------------------


def test_processbench_metrics() -> None:
    m = processbench_metrics([1, -1, 2, -1, 0], [1, -1, 0, 3, -1])
    assert m == {
        "acc_err": 1 / 3,
        "acc_corr": 0.5,
        "f1": pytest.approx(2 * (1 / 3) * 0.5 / (1 / 3 + 0.5)),
        "n": 5,
        "n_err": 3,
        "n_corr": 2,
        "n_err_correct": 1,
        "n_corr_correct": 1,
    }
    only_correct = processbench_metrics([-1, 2], [-1, -1])
    assert (only_correct["acc_err"], only_correct["acc_corr"], only_correct["f1"]) == (None, 0.5, None)
    assert processbench_metrics([0], [1])["f1"] is None
    assert processbench_metrics([0, 0], [1, -1])["f1"] == 0.0
    with pytest.raises(ValueError):
        processbench_metrics([0], [0, 1])
    with pytest.raises(ValueError):
        processbench_metrics([0], [-2])


# --- the CLI --------------------------------------------------------------------------------------------


def test_cli_processbench_with_malformed_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, metrics_path = tmp_path / "out.jsonl", tmp_path / "metrics.json"
    argv = ["--verifier", "rule", "--input", str(PB_SAMPLE), "--output", str(out)]
    assert main([*argv, "--metrics-json", str(metrics_path), "--batch-size", "3"]) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert [int(line.split(":")[2]) for line in warned] == PB_BAD_LINES
    assert "missing 'problem'" in captured.err and "'label' must be an integer" in captured.err
    assert "acc_err 75.0 (3/4)" in captured.out and "acc_corr 100.0 (3/3)" in captured.out

    rows = {row["id"]: row for row in read_jsonl(out)}
    assert list(rows) == PB_IDS
    assert rows["pb-arith"]["step_scores"] == [1.0, 0.0, 1.0]
    assert rows["pb-arith"]["earliest_error"] == 1 and rows["pb-arith"]["score"] == 0.0
    assert rows["pb-arith"]["analysis"] == "Step 2: 36 - 5 = 30 is wrong (36 - 5 = 31)."
    assert rows["pb-first"]["earliest_error"] == 0 and rows["pb-chain"]["earliest_error"] == 1
    assert rows["pb-logic"]["earliest_error"] == -1  # right arithmetic, wrong reading: out of reach
    assert all(
        row["earliest_error"] == -1 for i, row in rows.items() if i in ("pb-ok", "pb-latex", "pb-percent")
    )
    assert "label" not in rows["pb-nolabel"] and rows["pb-ok"]["label"] == -1

    metrics = json.loads(metrics_path.read_text())
    assert metrics["acc_err"] == 0.75 and metrics["acc_corr"] == 1.0
    assert metrics["f1"] == pytest.approx(2 * 0.75 / 1.75)
    assert (metrics["records"], metrics["skipped"], metrics["n"]) == (8, 6, 7)
    assert metrics["records_per_s"] > 0
    # A rule verifier writes no analysis to parse: every verdict counts as parsed, and nothing warns.
    assert (metrics["parse_rate"], metrics["n_parsed"]) == (1.0, 8)
    assert "parse rate 100.0%" in captured.out and "parse rate" not in captured.err
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*"))


def tiny_judge(directory: Path) -> Path:
    """A random-initialised generative judge saved as a checkpoint: none of its analyses parse."""
    tok = build_char_tokenizer()
    lm = LMWorker(build_model(TINY_JUDGE, tok, 0), tok)
    GenerativeVerifier(lm, max_new_tokens=10).save(directory / "judge")
    return directory / "judge"


def test_cli_reports_the_parse_rate_and_warns_when_it_is_low(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A judge whose analyses do not parse scores every step wrong; the run says so, rather than
    printing an F1 that looks like a measurement."""
    out, metrics_path = tmp_path / "out.jsonl", tmp_path / "metrics.json"
    argv = ["--verifier", str(tiny_judge(tmp_path)), "--input", str(PB_SAMPLE), "--output", str(out)]
    assert main([*argv, "--metrics-json", str(metrics_path), "--batch-size", "3"]) == 0
    captured = capsys.readouterr()
    rows = read_jsonl(out)
    assert len(rows) == 8 and all(row["parsed"] is False for row in rows)
    metrics = json.loads(metrics_path.read_text())
    assert (metrics["parse_rate"], metrics["n_parsed"]) == (0.0, 0)
    assert "parse rate 0.0%: 0 of 8 verdicts parsed" in captured.out
    warned = [line for line in captured.err.splitlines() if line.startswith("warning: only 0 of 8")]
    assert len(warned) == 1
    assert "did not follow its format" in warned[0] and "F1" in warned[0]


def test_cli_loads_a_judge_in_the_dtype_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--dtype and --device reach a generative judge (they were refused as options it does not take)."""
    out, judge = tmp_path / "out.jsonl", tiny_judge(tmp_path)
    argv = ["--verifier", str(judge), "--input", str(PB_SAMPLE), "--output", str(out), "--device", "cpu"]
    assert main([*argv, "--dtype", "bfloat16"]) == 0 and len(read_jsonl(out)) == 8
    assert main([*argv, "--dtype", "float16"]) == 2  # not a dtype the judge trains or samples in
    assert "dtype 'float16'" in capsys.readouterr().err


@contextlib.contextmanager
def stderr_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """sys.stderr on a pseudo-terminal (a real one: isatty is true), what it shows collected."""
    master, slave = pty.openpty()
    # A fresh pseudo-terminal is 0 columns wide, where tqdm draws nothing: give it a terminal's 24 × 80.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    shown: list[bytes] = []

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO once the terminal's last writer has closed
            while chunk := os.read(master, 4096):
                shown.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with os.fdopen(slave, "w") as term, monkeypatch.context() as patch:
            patch.setattr(sys, "stderr", term)
            yield shown
    finally:
        reader.join(timeout=10)
        os.close(master)


def test_cli_progress_advances_as_each_batch_is_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the bar counts the records scored, batch by batch (a generative judge takes
    minutes a batch), out of the input's records: it moves when a batch is done, by the batch."""
    good = [line for line in PB_SAMPLE.read_text().splitlines() if '"id": "pb-' in line][:7]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(good) + "\n")
    argv = ["--verifier", str(tiny_judge(tmp_path)), "--input", str(src), "--output", str(out)]
    with stderr_on_a_terminal(monkeypatch) as shown:
        assert main([*argv, "--batch-size", "3"]) == 0
    err = b"".join(shown).decode()
    counts = [int(n) for n in re.findall(r"scoring:[^\r\n]*?(\d+)/7 \[", err)]
    assert [n for i, n in enumerate(counts) if i == 0 or n != counts[i - 1]] == [0, 3, 6, 7], err


def test_cli_on_error_fail_keeps_what_was_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("previous run\n")
    argv = ["--verifier", "rule", "--input", str(PB_SAMPLE), "--output", str(out), "--on-error", "fail"]
    assert main([*argv, "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert f"{PB_SAMPLE}:6: invalid JSON" in err
    assert out.read_text() == "previous run\n"  # untouched
    partial = read_jsonl(tmp_path / "out.jsonl.partial")
    assert [row["id"] for row in partial] == PB_IDS[:5]  # every record before line 6, complete


def test_cli_plain_records_json_array(tmp_path: Path) -> None:
    records = [
        {
            "problem": "p1",
            "solution": "Natalia sold 48/2 = 24 clips.\nIn total 48+24 = 72.\n#### 72",
            "answer": "72",
        },
        {
            "problem": "p2",
            "solution": "She had 3 + 4 = 8 apples.\nThe answer is 8.",
            "answer": 8,
            "id": "two",
        },
        {"problem": "p3", "solution": "First 2 * 3 = 6. Then 6 + 1 = 7.", "answer": "7"},
    ]
    src = tmp_path / "plain.json"
    text = "\n" + json.dumps(records, indent=2)
    src.write_text(text)
    starts = [i + 1 for i, line in enumerate(text.splitlines()) if line == "  {"]
    out = tmp_path / "out.jsonl"
    argv = ["--verifier", "rule", "--input", str(src), "--output", str(out), "--split-rule", "sentences"]
    assert main(argv) == 0
    rows = read_jsonl(out)
    assert [row["id"] for row in rows] == [starts[0], "two", starts[2]]  # no id: the line it starts on
    assert [row["score"] for row in rows] == [1.0, 0.0, 1.0]
    assert rows[1]["earliest_error"] == 0 and rows[1]["analysis"].startswith("Step 1: 3 + 4 = 8 is wrong")
    assert len(rows[2]["step_scores"]) == 2  # split into sentences


def test_cli_threshold_and_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    base = ["--input", str(PB_SAMPLE), "--output", str(out)]
    assert main(["--verifier", "no-such-verifier", *base]) == 2
    assert "known" in capsys.readouterr().err and not out.exists()
    assert main(["--verifier", "rule", "--input", str(tmp_path / "missing.jsonl"), "--output", str(out)]) == 2
    assert main(["--verifier", "rule", *base, "--threshold", "1.5"]) == 0
    rows = read_jsonl(out)
    assert all(
        row["earliest_error"] == (0 if row["step_scores"] else -1) for row in rows
    )  # every score < 1.5


def test_cli_adversarial_records_are_bounded(tmp_path: Path) -> None:
    texts = [
        "9^9^9^9 = 1",
        "10**10**10 = 5",
        "(" * 50_000 + "1" + ")" * 50_000 + " = 1",
        "1 = 1 " * 200_000,
        "１２ × ３ = ３７ \u200f\u200b🤯",
        "\u202e" * 1000 + "2 + 2 = 5",
    ]
    src = tmp_path / "adv.jsonl"
    with src.open("w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": i, "problem": "p", "steps": [text, "ok"], "label": -1}) + "\n")
        f.write('{"id": "deep", "problem": "p", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        f.write('{"id": "bigint", "problem": "p", "steps": [], "label": ' + "9" * 10_000 + "}\n")
    out = tmp_path / "out.jsonl"
    start = time.perf_counter()
    assert main(["--verifier", "rule", "--input", str(src), "--output", str(out)]) == 0
    assert time.perf_counter() - start < 10
    rows = read_jsonl(out)
    assert [row["id"] for row in rows] == list(range(len(texts)))
    assert rows[4]["earliest_error"] == 0 and rows[5]["earliest_error"] == 0
    assert [row["earliest_error"] for row in rows[:4]] == [-1, -1, -1, -1]


def test_cli_as_a_module_subprocess(tmp_path: Path) -> None:
    out, metrics_path = tmp_path / "out.jsonl", tmp_path / "m.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "selfverify.score", "--verifier", "rule", "--input", str(PB_SAMPLE)]
    proc = subprocess.run(
        [*cmd, "--output", str(out), "--metrics-json", str(metrics_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "records/s" in proc.stdout and "F1 85.7" in proc.stdout
    assert f"{PB_SAMPLE}:13: expected a JSON object" in proc.stderr
    assert [row["id"] for row in read_jsonl(out)] == PB_IDS
    assert json.loads(metrics_path.read_text())["n_err_correct"] == 3
    failed = subprocess.run(
        [*cmd, "--output", str(out), "--on-error", "fail"], cwd=REPO, env=env, capture_output=True
    )
    assert failed.returncode == 2


# --- record reading ---------------------------------------------------------------------------------------


def test_read_records_jsonl_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    big = "x" * 3_000_000
    lines = [b'{"a": 1}', b"", b"not json", b'"a string"', json.dumps({"big": big}).encode(), b"\xff\xfe{}"]
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join([*lines, b'{"a": 2}']) + b"\n")
    errors: list[RecordError] = []
    got = list(read_records(path, warn=errors.append))
    assert [(n, r.get("a")) for n, r in got] == [(1, 1), (5, None), (7, 2)]
    assert len(got[1][1]["big"]) == len(big)
    assert [(e.line_no, e.message.split(":")[0]) for e in errors] == [
        (3, "invalid JSON"),
        (4, "expected a JSON object, got str"),
        (6, "not valid UTF-8"),
    ]
    with pytest.raises(RecordError) as info:
        list(read_records(path, on_error="fail"))
    assert info.value.line_no == 3 and str(info.value).startswith(f"{path}:3: invalid JSON")


def test_read_records_oversized_line_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n{"b": "' + "y" * 5000 + '"}\n{"a": 3}')
    errors: list[RecordError] = []
    got = list(read_records(path, warn=errors.append, max_line_bytes=1000))
    assert [n for n, _ in got] == [1, 3]
    assert [(e.line_no, e.message) for e in errors] == [(2, "line longer than 1000 bytes")]


def test_read_records_json_array(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('  [\n  {"a": 1},\n  7,\n\n  {"a": 3}\n]\n')
    errors: list[RecordError] = []
    assert [(n, r["a"]) for n, r in read_records(path, warn=errors.append)] == [(2, 1), (5, 3)]
    assert [(e.line_no, e.message) for e in errors] == [(3, "expected a JSON object, got int")]
    path.write_text('[{"a": 1},\n{"a": }]')
    errors.clear()
    assert [n for n, _ in read_records(path, warn=errors.append)] == [1]
    assert errors[0].line_no == 2 and "rest of the array skipped" in errors[0].message
    path.write_text("[]")
    assert list(read_records(path)) == []
    path.write_text("")
    assert list(read_records(path)) == []


# --- atomic writing ---------------------------------------------------------------------------------------


def test_atomic_writers_replace_whole_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.json"
    atomic_write_json(target, {"acc": 0.5, "text": "≈"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"acc": 0.5, "text": "≈"}
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "half")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no temporary file left


def test_atomic_jsonl_writer(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with AtomicJsonlWriter(out) as writer:
        writer.write({"id": 1, "text": "é"})
        assert (
            not out.exists() and writer.partial_path.read_text(encoding="utf-8") == '{"id": 1, "text": "é"}\n'
        )
        writer.write({"id": 2, "bad": "\ud800"})  # a lone surrogate cannot be UTF-8: escaped instead
    assert read_jsonl(out) == [{"id": 1, "text": "é"}, {"id": 2, "bad": "\ud800"}]
    assert not writer.partial_path.exists()

    with pytest.raises(RuntimeError), AtomicJsonlWriter(out) as writer:
        writer.write({"id": 3})
        raise RuntimeError("crash")
    assert [row["id"] for row in read_jsonl(out)] == [1, 2]  # the old file survives the crash
    assert read_jsonl(writer.partial_path) == [{"id": 3}]


# --- the verifier registry ---------------------------------------------------------------------------


class _FakeVerifier:
    name = "fake"

    def __init__(self, path: Path, scale: float = 1.0) -> None:
        self.path, self.scale = path, scale

    def verify_batch(self, items: list) -> list[Verdict]:
        return [Verdict([self.scale] * len(item.steps), -1, 1.0) for item in items]


def test_registry_names_and_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(registry.load_verifier("rule"), ArithmeticRuleVerifier)
    with pytest.raises(registry.VerifierSpecError, match="rule"):
        registry.load_verifier("nope")
    with pytest.raises(registry.VerifierSpecError, match="no verifier.json"):
        registry.load_verifier(str(tmp_path))

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "verifier.json").write_text(json.dumps({"kind": "prm"}))
    monkeypatch.setattr(registry, "CHECKPOINT_LOADERS", {})
    with pytest.raises(
        registry.VerifierSpecError, match="no loader for checkpoint kind 'prm'; known kinds: none"
    ):
        registry.load_verifier(str(ckpt))
    registry.register_checkpoint_loader("prm", _FakeVerifier)
    loaded = registry.load_verifier(str(ckpt), scale=0.25)
    assert isinstance(loaded, _FakeVerifier) and loaded.path == ckpt and loaded.scale == 0.25
    assert isinstance(registry.load_verifier(str(ckpt / "verifier.json")), _FakeVerifier)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_checkpoint_loader("prm", _FakeVerifier)

    (ckpt / "verifier.json").write_text(json.dumps({"kind": "generative"}))
    with pytest.raises(registry.VerifierSpecError, match="known kinds: prm"):
        registry.load_verifier(str(ckpt))
    (ckpt / "verifier.json").write_text("[1, 2]")
    with pytest.raises(registry.VerifierSpecError, match='string "kind"'):
        registry.load_verifier(str(ckpt))

    monkeypatch.setattr(registry, "VERIFIER_LOADERS", dict(registry.VERIFIER_LOADERS))
    registry.register_verifier("const", lambda: _FakeVerifier(tmp_path, 0.5))
    assert registry.load_verifier("const").scale == 0.5
