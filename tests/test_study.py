"""The study command: arms × seeds -> markdown table, curves and a resumable set of runs."""

import json
import math

import pytest

from selfverify.study import behaviour, main, mean_ci, paired_difference, plan_runs, startable, steps_to


def test_mean_ci_hand_case():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302653 / 3**0.5, rel=1e-5)  # t(0.975, 2) · s / √n with s = 1
    assert mean_ci([0.5]) == (0.5, 0.0)


def test_paired_difference_is_the_ci_of_per_seed_differences():
    diff, half = paired_difference([0.5, 0.6, 0.9], [0.4, 0.5, 0.7])
    assert (diff, half) == pytest.approx(mean_ci([0.1, 0.1, 0.2]))
    # Seed-to-seed spread shared by both arms cancels: a constant lead has no interval.
    assert paired_difference([0.3, 0.8], [0.2, 0.7]) == pytest.approx((0.1, 0.0))


def test_steps_to_threshold():
    assert steps_to(([0, 20, 40], [0.1, 0.45, 0.5]), 0.4) == 20
    assert steps_to(([0, 20], [0.1, 0.2]), 0.4) is None


def test_behaviour_reads_the_first_and_last_steps_and_leaves_out_what_is_not_logged():
    rl = [{"entropy": float(i), "response_length": 10.0, "gen_rounds": 1.0 + (i == 0)} for i in range(40)]
    seen = behaviour(rl)
    assert seen["entropy_first"] == pytest.approx(9.5) and seen["entropy_last"] == pytest.approx(29.5)
    assert seen["length_first"] == seen["length_last"] == 10.0 and seen["gen_rounds"] == pytest.approx(
        41 / 40
    )
    assert math.isnan(seen["explained_variance"]) and math.isnan(seen["clipfrac_high"])


def test_study_runs_arms_and_seeds(tmp_path, tiny_overrides, capsys):
    out = tmp_path / "study"
    argv = ["--objectives", "grpo", "--arm", "lowlr=rl.lr=1e-7", "--seeds", "0,1", "--out", str(out)]
    assert main([*argv, *tiny_overrides]) == 0
    text = (out / "study.md").read_text()
    assert "| grpo | 2 |" in text and "| lowlr | 2 |" in text and "±" in text
    assert "− grpo (paired)" in text  # lowlr compared seed by seed with the first arm
    assert "generation rounds per step" in text and "| lowlr | " in text.split("clipped tokens")[1]
    assert (out / "curves.png").stat().st_size > 5000
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results] == ["grpo", "lowlr"] and len(results[0]["finals"]) == 2
    assert "lr: 1.0e-07" in (out / "runs" / "lowlr-seed1" / "config.yaml").read_text()
    capsys.readouterr()
    before = (out / "runs" / "grpo-seed0" / "metrics.jsonl").stat().st_mtime
    assert main([*argv, *tiny_overrides]) == 0  # finished runs are not run again
    assert (out / "runs" / "grpo-seed0" / "metrics.jsonl").stat().st_mtime == before
    # Another report on the same runs, against the other baseline: nothing runs, nothing is overwritten.
    report = tmp_path / "report"
    argv = [
        "--arm",
        "lowlr=rl.lr=1e-7",
        "--arm",
        "grpo=objective=grpo",
        "--seeds",
        "0,1",
        "--out",
        str(report),
    ]
    assert main([*argv, "--runs", str(out / "runs"), *tiny_overrides]) == 0
    assert "− lowlr (paired)" in (report / "study.md").read_text() and not (report / "runs").exists()
    assert (out / "runs" / "grpo-seed0" / "metrics.jsonl").stat().st_mtime == before
    assert (out / "study.md").read_text() == text  # the first report is as it was


def test_study_shares_one_cold_start_per_seed(tmp_path, tiny_overrides):
    out = tmp_path / "study"
    argv = ["--objectives", "grpo,rloo", "--seeds", "0", "--out", str(out), "--share-cold-start"]
    assert main([*argv, *tiny_overrides]) == 0
    runs = out / "runs"
    cold = json.loads((runs / "cold-start-seed0" / "summary.json").read_text())["cold_start_accuracy"]
    for arm in ("grpo", "rloo"):
        phases = {json.loads(line)["phase"] for line in (runs / f"{arm}-seed0" / "metrics.jsonl").open()}
        assert "sft" not in phases  # the arm started from the shared cold start
        summary = json.loads((runs / f"{arm}-seed0" / "summary.json").read_text())
        assert summary["cold_start_accuracy"] == cold
    for arm in json.loads((out / "results.json").read_text()):  # curves start from the shared cold start
        assert all(steps[0] == 0 and acc[0] == cold for steps, acc in arm["curves"])


def test_a_run_starts_once_its_own_cold_start_has_finished(tmp_path):
    arms = [("outcome", ["reward.mode=outcome"]), ("mix", ["reward.mode=mix"])]
    planned, _ = plan_runs(arms, [0, 1, 2], tmp_path, None, [], share_cold_start=True)
    names = [r.run_dir.name for r in planned]
    assert names[:3] == [f"loop-cold-start-seed{s}" for s in range(3)]  # cold starts first
    cold = planned[:3]
    # Seed 0's cold start has finished, seeds 1 and 2's run: seed 0's arms may start beside them.
    waiting = planned[3:]
    assert [r.run_dir.name for r in startable(waiting, cold[1:], 2)] == ["outcome-seed0", "mix-seed0"]
    assert [r.run_dir.name for r in startable(waiting, cold[1:], 1)] == ["outcome-seed0"]
    # A waiting cold start goes first and holds back its own seed's arms only.
    waiting = [cold[2], *planned[3:]]
    assert [r.run_dir.name for r in startable(waiting, cold[1:2], 3)] == [
        "loop-cold-start-seed2",
        "outcome-seed0",
        "mix-seed0",
    ]


def test_study_jobs_run_in_parallel_processes_to_the_same_metrics(tmp_path, tiny_overrides, capsys):
    argv = ["--objectives", "grpo,rloo", "--seeds", "0,1", "--share-cold-start", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "one"), *tiny_overrides]) == 0
    in_process = capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "two"), "--jobs", "2", *tiny_overrides]) == 0
    names = [f"{run}-seed{seed}" for run in ("cold-start", "grpo", "rloo") for seed in (0, 1)]
    for name in names:
        one, two = (tmp_path / study / "runs" / name for study in ("one", "two"))
        assert (one / "metrics.jsonl").read_bytes() == (two / "metrics.jsonl").read_bytes()
        assert "run directory:" in two.with_name(name + ".log").read_text()  # each run's own output
    one, two = (json.loads((tmp_path / study / "results.json").read_text()) for study in ("one", "two"))
    assert [(r["finals"], r["curves"]) for r in one] == [(r["finals"], r["curves"]) for r in two]
    err = capsys.readouterr().err  # a line as each run starts and ends, in this process or not
    assert all(f"started {n}" in e and f"finished {n} in" in e for e in (in_process, err) for n in names)
    # A run that fails names its log, and the study stops with its exit code after the runs under way.
    bad = [
        "--arm",
        "bad=init_from=" + str(tmp_path / "missing"),
        "--seeds",
        "0,1,2",
        "--jobs",
        "2",
        "--no-progress",
    ]
    assert main([*bad, "--out", str(tmp_path / "bad"), *tiny_overrides]) == 2
    assert "bad-seed0 stopped with exit code 2" in capsys.readouterr().err
    runs = tmp_path / "bad" / "runs"
    assert "error" in (runs / "bad-seed0.log").read_text()
    assert not (runs / "bad-seed2.log").exists()  # nothing started after the first failure


def test_study_shares_the_loop_cold_start_except_with_self_verify(tmp_path, tiny_overrides, tiny_loop):
    out = tmp_path / "study"
    arms = [f"--arm={m}=pipeline=selfverify,reward.mode={m}" for m in ("outcome", "process", "self_verify")]
    argv = [*arms, "--seeds", "0", "--out", str(out), "--share-cold-start", "--no-progress"]
    assert main([*argv, *tiny_overrides, *[o for o in tiny_loop if o != "pipeline=selfverify"]]) == 0
    runs = out / "runs"
    cold = json.loads((runs / "loop-cold-start-seed0" / "summary.json").read_text())
    assert cold["rounds"] == [] and not (runs / "cold-start-seed0").exists()
    for arm in ("outcome", "process", "self_verify"):
        phases = {json.loads(line)["phase"] for line in (runs / f"{arm}-seed0" / "metrics.jsonl").open()}
        shared = arm != "self_verify"  # its demonstrations differ: its own cold starts
        assert ("sft" in phases, "judge_sft" in phases) == (not shared, not shared)
        summary = json.loads((runs / f"{arm}-seed0" / "summary.json").read_text())
        assert len(summary["rounds"]) == 2
        if shared:
            assert summary["cold_start_accuracy"] == cold["cold_start_accuracy"]
    text = (out / "study.md").read_text()
    assert "| process | 1 |" in text and "meta-verifier acc | auto-label agreement" in text
    results = json.loads((out / "results.json").read_text())
    assert all(len(r["meta_accuracy"]) == len(r["agreement"]) == 1 for r in results)
