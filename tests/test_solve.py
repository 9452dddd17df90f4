"""Test-time search (``python -m selfverify.solve``) on a tiny loop run's real checkpoints: every method,
token accounting, resuming a stopped run, bad input, and the refinement the cold start teaches."""

import json
import random
from pathlib import Path

import pytest

from selfverify.config.load import load_config
from selfverify.judges.compact_judge import REFINE_TAG, VERIFY_TAG, reference_analysis
from selfverify.judges.generative import make_format
from selfverify.loop import main as loop_main
from selfverify.recipes.coldstart import demonstrations
from selfverify.recipes.search import Analysis, Candidate, choose
from selfverify.solve import main
from selfverify.tasks.arithmetic import parse_problem
from selfverify.tasks.registry import make_task

SMALL = [
    "solve.problems=6",
    "solve.candidates=2",
    "solve.verifications=2",
    "solve.meta_verifications=1",
    "solve.rounds=1",
    "solve.batch_problems=4",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny loop run: its generator (cold-started with refinements) and its judge."""
    from conftest import TINY

    run = tmp_path_factory.mktemp("solve") / "run"
    loop = [
        "pipeline=selfverify",
        "rl.steps=2",
        "loop.rounds=1",
        "loop.judge_sft_steps=3",
        "loop.judge_sft_batch_size=8",
        "loop.judge_pool=12",
        "loop.judge_val_samples=8",
        "loop.judge_val_f1=null",
        "loop.judge_max_new_tokens=24",
        "loop.verifier_rl_steps=1",
        "loop.meta_rl_steps=1",
        "loop.judge_prompts_per_step=2",
        "loop.judge_group_size=2",
        "loop.scaled_samples=4",
        "loop.scaled_n=2",
        "loop.scaled_m=2",
        "loop.scaled_k=1",
        "loop.auto_sft_steps=1",
        "loop.eval_samples=8",
    ]
    shape = ["model.hidden_size=64", "model.intermediate_size=128"]  # head size 32, as vLLM's CPU build needs
    assert loop_main(["--run-dir", str(run), "--no-progress", *TINY, *shape, *loop]) == 0
    return run


def _solve(run_dir: Path, out: Path, *overrides: str) -> int:
    return main(["--run-dir", str(run_dir), "--out", str(out), "--no-progress", *SMALL, *overrides])


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("method", ["greedy", "majority", "best_of_n", "self_refine", "search"])
def test_every_method_writes_one_record_per_problem_with_its_tokens(
    run_dir: Path, tmp_path: Path, method: str
) -> None:
    out = tmp_path / f"{method}.jsonl"
    assert _solve(run_dir, out, f"solve.method={method}") == 0
    records = _records(out)
    assert [r["index"] for r in records] == list(range(6))
    for r in records:
        assert r["method"] == method and r["reference_answer"] is not None and isinstance(r["correct"], bool)
        candidates = r["candidates"]
        assert candidates[r["candidate"]]["solution"] == r["solution"]
        assert (
            r["tokens"]["total"] == r["tokens"]["generator"] + r["tokens"]["verifier"] + r["tokens"]["meta"]
        )
        drawn = sum(c["tokens"] for c in candidates)
        if method == "self_refine":  # the generator also wrote (or was asked for) its self-evaluations
            assert r["tokens"]["generator"] >= drawn and r["tokens"]["verifier"] == 0
        else:
            assert r["tokens"]["generator"] == drawn
        analyses = sum(len(c["analyses"]) for c in candidates)
        if method in ("best_of_n", "search"):
            assert analyses == 2 * len(candidates) and r["tokens"]["verifier"] > 0
        else:
            assert analyses == 0 and r["tokens"]["verifier"] == 0
        if method == "greedy":
            assert len(candidates) == 1
        if method in ("majority", "best_of_n"):
            assert len(candidates) == 2
        if method == "search":  # refinements name their parent and their round
            assert all(c["parent"] is not None and c["round"] == 1 for c in candidates[2:])
    summary = json.loads((tmp_path / f"{method}.jsonl.summary.json").read_text())
    assert summary["problems"] == 6 and 0.0 <= summary["accuracy"] <= 1.0
    low, high = summary["accuracy_ci95"]
    assert low <= summary["accuracy"] <= high
    assert summary["tokens_per_problem"]["total"] == sum(r["tokens"]["total"] for r in records) / 6


def test_search_on_ray_workers_writes_the_local_records(run_dir: Path, tmp_path: Path) -> None:
    """The workers as Ray actors (a local cluster started for the run) solve as local ones do."""
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert _solve(run_dir, local, "solve.method=search", "solve.problems=4") == 0
    assert _solve(run_dir, remote, "solve.method=search", "solve.problems=4", "backend=ray") == 0
    assert _records(remote) == _records(local)


def test_search_on_vllm_rollouts(run_dir: Path, tmp_path: Path, vllm_python: str) -> None:
    """vLLM's CPU build serves the generator and the judge: the pool is sampled, verified, meta-verified
    and refined through it, every token counted."""
    out = tmp_path / "vllm.jsonl"
    vllm = ["rollout=vllm", f"rollout.vllm_python={vllm_python}"]
    assert _solve(run_dir, out, "solve.method=search", "solve.problems=4", *vllm) == 0
    records = _records(out)
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for r in records:
        candidates = r["candidates"]
        assert r["tokens"]["generator"] == sum(c["tokens"] for c in candidates) > 0
        assert sum(len(c["analyses"]) for c in candidates) == 2 * len(candidates)
        assert r["tokens"]["verifier"] > 0
    sampled = [c["solution"] for r in records for c in r["candidates"] if c["round"] == 0]
    assert len(set(sampled)) > 1


def test_a_stopped_run_continues_where_it_stopped_and_writes_each_record_once(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = tmp_path / "whole.jsonl"
    assert _solve(run_dir, whole, "solve.method=search") == 0
    lines = whole.read_bytes().splitlines(keepends=True)
    out = tmp_path / "stopped.jsonl"
    # Stopped after the first batch (4 problems) while writing the second: half a line is left.
    (tmp_path / "stopped.jsonl.partial").write_bytes(b"".join(lines[:4]) + lines[4][:30])
    assert _solve(run_dir, out, "solve.method=search") == 0
    assert "resuming: 4 of 6" in capsys.readouterr().err
    assert out.read_bytes() == whole.read_bytes()
    assert not (tmp_path / "stopped.jsonl.partial").exists()
    assert _solve(run_dir, out, "solve.method=search") == 0  # complete: nothing is solved again
    assert "is complete" in capsys.readouterr().err


def test_a_partial_file_of_another_method_is_refused(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "o.jsonl"
    assert _solve(run_dir, out, "solve.method=greedy", "solve.problems=4") == 0
    (tmp_path / "p.jsonl.partial").write_bytes(out.read_bytes())
    assert _solve(run_dir, tmp_path / "p.jsonl", "solve.method=majority") == 2
    assert "p.jsonl.partial:1: a record of method greedy" in capsys.readouterr().err


def test_problems_from_a_file_and_a_malformed_line_named(run_dir: Path, tmp_path: Path, capsys) -> None:
    good = tmp_path / "problems.jsonl"
    good.write_text('{"problem": "5-7-6"}\n{"problem": "Q:1+2+3", "id": "mine"}\n')
    out = tmp_path / "mine.jsonl"
    assert _solve(run_dir, out, f"solve.input={good}", "solve.method=greedy") == 0
    records = _records(out)
    assert [r["problem"] for r in records] == ["5-7-6", "1+2+3"] and records[1]["id"] == "mine"
    assert [r["reference_answer"] for r in records] == ["-8", "6"]
    for bad, why in [
        ('{"problem": "5-7-6"}\n{"problem": 5}\n', 'problems.jsonl:2: expected a non-empty "problem"'),
        ('{"problem": "5-7-6"}\nnot json\n', "problems.jsonl:2: invalid JSON"),
        ('{"problem": "five minus seven"}\n', "problems.jsonl:1: not an embedded arithmetic problem"),
    ]:
        good.write_text(bad)
        assert _solve(run_dir, tmp_path / "bad.jsonl", f"solve.input={good}") == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err
        assert not (tmp_path / "bad.jsonl").exists()


def test_an_unreachable_endpoint_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "--out",
            str(tmp_path / "o.jsonl"),
            "solve.endpoint=http://127.0.0.1:9/v1",
            "solve.endpoint_model=m",
            "solve.retries=0",
            "solve.timeout_s=5",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "http://127.0.0.1:9/v1" in err and "Traceback" not in err


def test_a_judge_that_never_parses_is_counted_and_warned_about(run_dir: Path, tmp_path: Path, capsys) -> None:
    """The generator as the judge: it writes solutions, not analyses. Every analysis is an unparsed
    failure that counts for nothing, and the run says so."""
    out = tmp_path / "o.jsonl"
    judge = run_dir / "checkpoints/latest/generator"
    assert _solve(run_dir, out, "solve.method=best_of_n", f"solve.judge={judge}") == 0
    records = _records(out)
    unparsed = sum(r["failures"].get("unparsed_analyses", 0) for r in records)
    analyses = sum(len(c["analyses"]) for r in records for c in r["candidates"])
    assert unparsed == analyses == 6 * 2 * 2
    assert all(c["score"] == 0.0 for r in records for c in r["candidates"])
    assert "of the analyses parsed" in capsys.readouterr().err


def test_the_cold_start_teaches_refinement_from_a_faithful_analysis() -> None:
    cfg = load_config(None, ["sft.batch_size=8", "sft.refine_fraction=0.5"])
    task = make_task(cfg.task)
    fmt = make_format("compact", task)
    prompts, responses = demonstrations(cfg, task, 0, set(), fmt)
    plain, _ = demonstrations(
        load_config(None, ["sft.batch_size=8", "sft.refine_fraction=0"]), task, 0, set(), fmt
    )
    assert len(prompts) == 12 and prompts[:8] == plain  # the solution demonstrations are unchanged
    for prompt, response in zip(prompts[8:], responses[8:], strict=True):
        head, _, rest = prompt.partition(f"{VERIFY_TAG}\n")
        lines = head.splitlines()
        problem = parse_problem(lines[0])
        analysis, _, tail = rest.partition(f"{REFINE_TAG}\n")
        assert tail == "" and analysis.strip() == reference_analysis(problem, lines[1:])
        assert analysis.strip().endswith("S:0") or analysis.strip().endswith("S:0.5")  # it is flawed
        assert response == problem.reference_solution()


def test_refinement_prompts_of_the_prose_format_show_every_review() -> None:
    task = make_task(load_config(None, ["task.name=arithmetic_nl"]).task)
    fmt = make_format("prose", task)
    problem = task.heldout(1, 0)[0]
    _, steps = task.synthetic_solution(problem, random.Random(0), correct_fraction=0.0)
    reviews = [fmt.reference_analysis(problem, steps), "Step 1: fine. Correct.\nScore: 1"]
    prompt = fmt.refine_prompt(problem.text, steps, reviews)
    assert problem.text in prompt and "Review 1:" in prompt and "Review 2:" in prompt
    assert all(" ".join(step.split()) in prompt for step in steps)


def test_a_candidate_scores_the_mean_of_its_kept_analyses() -> None:
    c = Candidate(0, 0, None, "A:1", 4, "1", True)
    c.analyses = [Analysis("", 1.0, 0), Analysis("", 0.0, 0, [0.0], False), Analysis("", None, 0)]
    assert c.score == 1.0 and not c.passes(3)  # the unconfirmed issue and the unparsed one are dropped
    c.analyses[1].confirmed = True
    assert c.score == 0.5
    assert Candidate(1, 0, None, "", 1, None, None).score == 0.0
    passing = Candidate(2, 0, None, "", 1, None, None, analyses=[Analysis("", 1.0, 0)] * 2)
    assert passing.passes(2) and not passing.passes(3)


def _scored(id: int, answer: str | None, scores: list[float], tokens: int = 10) -> Candidate:
    c = Candidate(id, 0, None, f"A:{answer}", tokens, answer, None)
    c.analyses = [Analysis("", s, 0) for s in scores]
    return c


def test_choose_lets_agreement_among_the_best_decide_not_length() -> None:
    """DeepSeekMath-V2's aggregation: among the candidates that pass (or share the best score), the
    answer most of them agree on wins; the shortest passing candidate does not."""
    short = _scored(0, "7", [1.0, 1.0], tokens=3)
    agreeing = [_scored(1, "9", [1.0, 1.0]), _scored(2, "9", [1.0, 1.0])]
    failing = [_scored(3, "7", [0.0, 1.0]), _scored(4, "7", [0.0, 0.0])]
    assert choose([short, *agreeing, *failing], verifications=2).id == 1
    # Without passing ones the best score's pool votes; a tie between answers goes to the answer all
    # candidates giving it score more for (7: 0.75 + 0.5 against 9: 0.75).
    pool = [_scored(0, "9", [1.0, 0.5]), _scored(1, "7", [1.0, 0.5]), _scored(2, "7", [0.5, 0.5])]
    assert choose(pool, verifications=2).id == 1
    assert choose(pool).id == 1  # best_of_n: no verification count, the same pool
    # Equal support: the earlier; no answers at all: the earliest of the pool.
    assert choose([_scored(0, "1", [1.0]), _scored(1, "2", [1.0])]).id == 0
    assert choose([_scored(0, None, [0.0]), _scored(1, None, [1.0])]).id == 1


def test_judge_misses_accounts_for_every_wrong_sample_by_kind(run_dir: Path) -> None:
    """scripts/judge_misses.py on the tiny run: every wrong sample of the generator counted once, under
    its kind of error, with one of the named outcomes of the judge's analysis."""
    import subprocess
    import sys

    from selfverify.tasks.arithmetic import ERROR_KINDS

    script = Path(__file__).parents[1] / "scripts" / "judge_misses.py"
    cmd = [sys.executable, str(script), str(run_dir), "--samples", "12"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out and set(out) <= set(ERROR_KINDS)  # the tiny generator errs
    named = {"located", "claim_from_itself", "claim_other", "derived_right_passed", "derived_as_given"}
    named |= {"derived_otherwise", "before", "stopped", "unparsed"}
    for counts in out.values():
        assert set(counts) - {"wrong"} <= named
        assert sum(v for k, v in counts.items() if k != "wrong") == counts["wrong"]
    assert sum(c["wrong"] for c in out.values()) <= 12


def test_headroom_reports_greedy_and_the_oracle_over_samples(run_dir: Path) -> None:
    """scripts/headroom.py on the tiny run's generator: greedy, pass@k rising with k, majority."""
    import subprocess
    import sys

    script = Path(__file__).parents[1] / "scripts" / "headroom.py"
    cmd = [sys.executable, str(script), str(run_dir), "--k", "4", "--problems", "6"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["problems"] == 6 and 0.0 <= out["greedy"] <= 1.0
    passes = [out[f"pass@{k}"] for k in (1, 2, 4)]
    assert passes == sorted(passes) and out["pass@1"] <= passes[-1] <= 1.0
    assert 0.0 <= out["majority@4"] <= passes[-1]  # a vote is right only where some sample is
    assert sum(out["greedy_errors"].values()) == pytest.approx(1.0 - out["greedy_valid"])
    missing = subprocess.run([*cmd, "--model", "nowhere"], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "no model at" in missing.stderr  # not a hub lookup's traceback
    spread = {int(right): problems for right, problems in out["problems_by_right_samples"].items()}
    assert sum(spread.values()) == 6 and set(spread) <= set(range(5))
    assert 1.0 - spread.get(0, 0) / 6 == pytest.approx(out["pass@4"])
