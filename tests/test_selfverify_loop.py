"""The self-verification loop (pipeline=selfverify) end to end on a tiny job: every reward mode,
per-round figures, resume after a kill."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from selfverify.judges.base import Verdict
from selfverify.judges.compact_judge import FORMAT_VERSION
from selfverify.loop import main
from selfverify.recipes import generator as generator_recipe
from selfverify.recipes import selfverify as selfverify_recipe
from selfverify.recipes.judge_data import located_by_kind, misjudgement
from selfverify.runtime.checkpoint import CheckpointError, read_state, write_state
from selfverify.utils.tracking import read_metrics

ROUND_KEYS = {
    "generator_accuracy",
    "verifier_f1",
    "meta_accuracy",
    "meta_parse_rate",
    "verifier_parse_rate",
    "auto_label_agreement",
    "auto_label_discard_rate",
    "reward_hacking_gap",
}


def _run(run_dir: Path, overrides: list[str]) -> dict:
    assert main(["--run-dir", str(run_dir), "--no-progress", *overrides]) == 0
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(
    "mode",
    [
        "outcome",
        "process",
        "self_verify",
        "mix",
        "process objective=ppo",
        "process objective=dapo",
        # refinements of the generator's own drafts in its RL; the verifier's RL without R_meta
        "process loop.refine_rl_fraction=0.5 loop.verifier_meta_reward=false",
    ],
)
def test_every_reward_mode_completes_with_round_figures(tmp_path, tiny_overrides, tiny_loop, mode):
    summary = _run(tmp_path / "run", [*tiny_overrides, *tiny_loop, *f"reward.mode={mode}".split()])
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    assert set(summary["rounds"][0]) >= ROUND_KEYS
    evals = [r for r in read_metrics(tmp_path / "run") if r["phase"] == "eval"]
    assert summary["cold_start_accuracy"] == evals[0]["accuracy"]
    assert summary["final_accuracy"] == summary["rounds"][-1]["generator_accuracy"] == evals[-1]["accuracy"]
    for r in summary["rounds"]:  # F1, the accuracies' harmonic mean: docs/guides/architecture.md, 'Scoring'
        err, corr = r["verifier_acc_err"], r["verifier_acc_corr"]
        if err is not None and corr is not None:
            assert r["verifier_f1"] == pytest.approx(2 * err * corr / (err + corr) if err + corr else 0.0)
        faithful, unfaithful = r["meta_accuracy_faithful"], r["meta_accuracy_unfaithful"]
        if faithful is not None and unfaithful is not None:
            assert r["meta_balanced_accuracy"] == pytest.approx((faithful + unfaithful) / 2)
        for kind in ("missed_errors", "false_alarms"):  # a rate exactly where there are analyses of the kind
            assert (r[f"meta_accuracy_{kind}"] is None) == (r[f"verifier_{kind}"] == 0)
    phases = {r["phase"] for r in read_metrics(tmp_path / "run")}
    assert {"sft", "judge_sft", "verifier_rl", "meta_rl", "rl", "round"} <= phases
    assert (tmp_path / "run" / "curves.png").stat().st_size > 10_000
    for role in ("generator", "judge"):
        assert (tmp_path / "run" / "checkpoints" / "latest" / role / "config.json").exists()


def test_killed_loop_resumes_to_the_same_result(tmp_path, tiny_overrides, tiny_loop, kill_midway):
    overrides = [*tiny_overrides, *tiny_loop, "reward.mode=process"]
    _run(tmp_path / "whole", overrides)
    run = tmp_path / "killed"
    # Kill it inside round 0's generator RL.
    kill_midway(run, overrides, lambda m: any(r["phase"] == "rl" for r in m))
    assert not (run / "summary.json").exists()
    _run(run, overrides)
    assert read_metrics(run) == read_metrics(tmp_path / "whole")


def _saved_step(run_dir: Path) -> tuple[str, int]:
    """The phase and step the run's latest checkpoint resumes at (("", 0) while there is none)."""
    try:
        state = read_state(run_dir / "checkpoints" / "latest")
    except (CheckpointError, FileNotFoundError):
        return "", 0
    return state["phase"], state["step"]


@pytest.mark.parametrize("saved_at", [4, 14])  # inside the judge cold start's 12 steps; inside its extension
def test_a_run_killed_in_the_judge_cold_start_resumes_where_it_saved(
    tmp_path, tiny_overrides, tiny_loop, kill_midway, monkeypatch, saved_at
):
    """The judge cold start saves every checkpoint_every steps with its optimizer and batch streams: a
    killed run goes on from there, not from the phase's start, to the same result."""
    overrides = [
        *tiny_overrides,
        *tiny_loop,
        "loop.judge_sft_steps=12",
        "loop.judge_extend_steps=8",
        "loop.judge_val_f1=1.0",  # one extension, the most allowed
    ]
    _run(tmp_path / "whole", overrides)
    whole = read_metrics(tmp_path / "whole")
    assert [r["step"] for r in whole if r["phase"] == "judge_sft" and r["round"] == 0] == list(range(1, 21))
    run = tmp_path / "killed"

    def saved_there(_: list[dict]) -> bool:
        phase, step = _saved_step(run)
        return phase == "judges" and step >= saved_at

    kill_midway(run, overrides, saved_there)
    phase, step = _saved_step(run)
    assert phase == "judges" and saved_at <= step < 20
    drawn: list[int] = []  # the batches the resumed run draws from the cold start's mix, by step
    real = selfverify_recipe.cold_start_batches

    def recording(*args):
        batches = real(*args)
        return lambda i, *rest: drawn.append(i) or batches(i, *rest)

    monkeypatch.setattr(selfverify_recipe, "cold_start_batches", recording)
    _run(run, overrides)
    assert read_metrics(run) == whole
    assert drawn[: 20 - step] == list(range(step, 20))  # then round 1's auto-label SFT draws its own


def test_a_judge_of_another_analysis_format_is_refused(tmp_path, tiny_overrides, tiny_loop, capsys):
    """Resuming, or starting the rounds from, a loop bundle whose judge writes another analysis format
    stops with the format named instead of training it on misread outputs."""
    cold = tmp_path / "cold"
    _run(cold, [*tiny_overrides, *tiny_loop, "loop.rounds=0"])
    latest = cold / "checkpoints" / "latest"
    state = read_state(latest)
    assert state["judge_format"] == {"format": "compact", "format_version": FORMAT_VERSION}
    write_state(latest, {**state, "judge_format": {"format": "compact", "format_version": 3}})
    # A one-line error naming the format, not a traceback.
    assert main(["--run-dir", str(tmp_path / "rounds"), "--no-progress", *tiny_overrides, *tiny_loop,
                 f"init_from={latest}"]) == 2  # fmt: skip
    assert "analysis format 3" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "rounds" / "metrics.jsonl").exists()
    # Resuming the run itself.
    assert main(["--run-dir", str(cold), "--no-progress", *tiny_overrides, *tiny_loop, "loop.rounds=0"]) == 2
    assert "analysis format 3" in " ".join(capsys.readouterr().err.split())


def test_the_kl_reference_is_used_by_generator_and_judge_rl(tmp_path, tiny_overrides, tiny_loop):
    """rl.kl_coef > 0 (the grpo preset's 0.04): every RL phase of the loop has a reference and logs the
    KL to it, which grows from 0 as the policy moves away from where the phase started (the tiny models
    earn no reward, so an entropy bonus moves them)."""
    run = tmp_path / "run"
    moving = ["rl.entropy_coef=0.1", "rl.lr=1e-2", "loop.judge_rl_lr=1e-2"]
    _run(run, [*tiny_overrides, *tiny_loop, "rl.kl_coef=0.5", *moving])
    for phase in ("rl", "verifier_rl", "meta_rl"):
        rows = [r for r in read_metrics(run) if r["phase"] == phase]
        assert rows and all("kl" in r and "kl_loss" in r for r in rows)
        assert max(r["kl"] for r in rows) > 0


def test_a_cosine_rl_schedule_restarts_with_each_round(tmp_path, tiny_overrides, tiny_loop):
    """rl.lr_schedule=cosine: each round's generator RL phase (2 of rl.steps=4) starts at rl.lr and
    follows the cosine over its own 2 steps (half-way down at the second), and the next round starts
    again from rl.lr."""
    run = tmp_path / "run"
    _run(run, [*tiny_overrides, *tiny_loop, "rl.lr=1e-3", "rl.lr_schedule=cosine"])
    lrs = [r["lr"] for r in read_metrics(run) if r["phase"] == "rl"]
    assert lrs == pytest.approx([1e-3, 5.5e-4, 1e-3, 5.5e-4])


def test_init_from_brings_its_own_tokenizer(tmp_path, tiny_overrides, tiny_loop):
    """A policy given as init_from keeps its vocabulary: here the character tokenizer plus a token the
    built-in one lacks, which must survive into the run's checkpoints."""
    from selfverify.config.schema import ModelSpec
    from selfverify.runtime.models import build_char_tokenizer, build_model, save_pretrained

    tok = build_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<extra>"]})
    model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, 0)
    save_pretrained(model, tok, tmp_path / "init")
    run = tmp_path / "run"
    _run(run, [*tiny_overrides, *tiny_loop, "loop.rounds=1", f"init_from={tmp_path / 'init'}"])
    saved = AutoTokenizer.from_pretrained(run / "checkpoints" / "latest" / "generator")
    assert "<extra>" in saved.get_vocab() and len(saved) == len(tok)


def test_an_unfaithful_analysis_is_told_by_how_it_misjudges() -> None:
    """Missed: it passes the true earliest wrong step; false alarm: it names a step where the steps are
    right; neither: it names the true step (its score may still be wrong) or does not parse."""

    def named(step: int, parsed: bool = True) -> Verdict:
        return Verdict([1.0] * 4, step, 1.0, "", parsed=parsed)

    assert [misjudgement(named(k), 2) for k in (-1, 3, 2, 1, 0)] == [
        "missed",
        "missed",
        None,
        "false_alarm",
        "false_alarm",
    ]
    assert [misjudgement(named(k), -1) for k in (-1, 0, 3)] == [None, "false_alarm", "false_alarm"]
    assert misjudgement(named(-1, parsed=False), 2) is None


def test_the_errors_a_verifier_locates_are_counted_by_kind() -> None:
    """located/<kind>: of the wrong samples whose earliest error is of a kind, the share whose analysis
    names that step; right samples and unparsed analyses count as the checker says."""
    from selfverify.tasks import Problem, TaskSpec
    from selfverify.tasks.arithmetic import EmbeddedTask

    task, p = EmbeddedTask(TaskSpec()), Problem(12, (("+", 7), ("*", 3), ("-", 4)))
    solutions = [
        "12+7=19\n19*3=58\n58-4=54\nA:54",  # slip at step 1, located
        "12+7=19\n19*3=58\n58-4=54\nA:54",  # slip at step 1, passed
        "12+7=19\n19*3=57\nA:57",  # answered early at step 2, named a step late
        "12+7=19\n19*3=57\n57-4=53\nA:53",  # right: no kind
    ]
    checks = [task.check(p, s) for s in solutions]

    def named(step: int) -> Verdict:
        return Verdict([1.0] * 4, step, 0.0 if step >= 0 else 1.0, "")

    verdicts = [named(1), named(-1), named(3), named(-1)]
    assert located_by_kind(task, [p] * 4, verdicts, checks) == {"located/early": 0.0, "located/slip": 0.5}


def test_a_judge_below_its_check_goes_on_training(tmp_path, tiny_overrides, tiny_loop):
    """loop.judge_val_f1: the judge cold start is checked on fresh generator samples and, below the
    bar, goes on for loop.judge_extend_steps more steps of data of their own, at most
    loop.judge_max_extends times; the check's figures are logged and summarised."""
    summary = _run(tmp_path / "run", [*tiny_overrides, *tiny_loop, "loop.rounds=1", "loop.judge_val_f1=1.0"])
    metrics = read_metrics(tmp_path / "run")
    checks = [r for r in metrics if r["phase"] == "judge_val"]
    assert [r["step"] for r in checks] == [0, 1]  # the check, one extension (the most allowed), the check
    # The figure checked: F1, or the accuracy on the one kind of sample the tiny generator wrote.
    scores = [next(r[k] for k in ("f1", "acc_err", "acc_corr") if r[k] is not None) for r in checks]
    assert scores[0] < 1.0 and summary["judge_val_f1"] == scores[1]
    located = [k for k in checks[0] if k.startswith("located/")]  # the tiny generator writes wrong samples
    assert located and all(0.0 <= checks[0][k] <= 1.0 for k in located)
    cold_start = [r["step"] for r in metrics if r["phase"] == "judge_sft" and r["round"] == 0]
    assert cold_start == [1, 2, 3, 4, 5]  # 3 steps, then 2 more
    assert summary["judge_sft_extends"] == 1


def test_each_round_checks_its_judge_on_the_generator_its_rl_moved(
    tmp_path, tiny_overrides, tiny_loop, kill_midway
):
    """loop.judge_round_extends: after each round's generator RL the judge is checked as in the cold
    start, on fresh samples of the generator as it now is, and below the bar goes on training on the
    cold start's mix (problems and streams of its own), before scaled verification; its figures are in
    the round's. A run killed in the check resumes to the same metrics."""
    overrides = [*tiny_overrides, *tiny_loop, "loop.judge_val_f1=1.0", "loop.judge_round_extends=1"]
    summary = _run(tmp_path / "whole", overrides)
    metrics = read_metrics(tmp_path / "whole")
    rechecks = [(r["round"], r["step"]) for r in metrics if r["phase"] == "judge_recheck"]
    assert rechecks == [(0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1)]  # each round: a check, an extension, a check
    sft = [(r["round"], r["step"]) for r in metrics if r["phase"] == "judge_sft"]
    # The cold start's 3 steps and its extension's 2, then round 0's check's 2; round 1's check numbers
    # its steps after the auto-label SFT's 2 (which the tiny run may not have labels for).
    assert sft[:7] == [(0.0, step) for step in range(1, 8)] and sft[-2:] == [(1.0, 3), (1.0, 4)]
    last = [r for r in metrics if r["phase"] == "judge_recheck"][-1]
    score = next(last[k] for k in ("f1", "acc_err", "acc_corr") if last[k] is not None)
    assert summary["rounds"][1]["judge_recheck_f1"] == score
    assert [r["judge_recheck_extends"] for r in summary["rounds"]] == [1, 1]
    run = tmp_path / "killed"
    kill_midway(run, overrides, lambda m: any(r["phase"] == "judge_recheck" for r in m))
    _run(run, overrides)
    assert read_metrics(run) == metrics


def test_the_rounds_check_their_judge_from_a_cold_start_that_was_not_checked(
    tmp_path, tiny_overrides, tiny_loop
):
    """Rounds started from a loop's cold start (init_from) that ran without the cold start's check still
    check their judge: round 0's check numbers its steps after the cold start's, which took none more."""
    cold = tmp_path / "cold"
    _run(cold, [*tiny_overrides, *tiny_loop, "loop.rounds=0", "loop.judge_val_f1=null"])
    latest = cold / "checkpoints" / "latest"
    overrides = ["loop.judge_val_f1=1.0", "loop.judge_round_extends=1", f"init_from={latest}"]
    summary = _run(tmp_path / "rounds", [*tiny_overrides, *tiny_loop, *overrides])
    assert [r["judge_recheck_extends"] for r in summary["rounds"]] == [1, 1]
    sft = [
        r["step"] for r in read_metrics(tmp_path / "rounds") if r["phase"] == "judge_sft" and r["round"] == 0
    ]
    assert sft == [4, 5]  # after the cold start's 3 steps


def test_a_meta_verifier_apart_is_a_whole_judge_of_its_own(tmp_path, tiny_overrides, tiny_loop, kill_midway):
    """loop.meta_apart: the meta-verifier is a second model, trained in every judge SFT step beside the
    verifier and then by meta RL; it is saved with the run, and a killed run resumes to the same result."""
    overrides = [*tiny_overrides, *tiny_loop, "loop.meta_apart=true", "loop.judge_val_f1=1.0"]
    summary = _run(tmp_path / "whole", overrides)
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    metrics = read_metrics(tmp_path / "whole")
    steps = {
        phase: [(r["round"], r["step"]) for r in metrics if r["phase"] == phase]
        for phase in ("judge_sft", "meta_sft")
    }
    # The cold start's 3 steps and its extension's 2, for each judge.
    assert steps["judge_sft"] == steps["meta_sft"] == [(0.0, step) for step in range(1, 6)]
    assert [r["step"] for r in metrics if r["phase"] == "meta_rl"] == [1, 2, 3, 4]
    # Both judges are held to the cold start's check, the meta-verifier as a verifier.
    checks = [r for r in metrics if r["phase"] == "judge_val"]
    assert len(checks) == 2
    assert all({"f1", "meta_f1", "meta_acc_err", "meta_acc_corr"} <= set(r) for r in checks)
    latest = tmp_path / "whole" / "checkpoints" / "latest"
    judge, meta = (load_file(latest / role / "model.safetensors") for role in ("judge", "meta"))
    assert judge.keys() == meta.keys() and any(not torch.equal(judge[k], meta[k]) for k in judge)
    run = tmp_path / "killed"
    kill_midway(run, overrides, lambda m: any(r["phase"] == "rl" for r in m))
    assert not (run / "summary.json").exists()
    _run(run, overrides)
    assert read_metrics(run) == metrics


def test_a_blind_meta_verifier_is_trained_on_its_own_analyses(tmp_path, tiny_overrides, tiny_loop):
    """loop.meta_audit=blind: the meta-verifier apart trains at every judge SFT step and by RL on the
    verifier's prompts (its reward: agreeing with the labels), and each round reports its audit."""
    overrides = [*tiny_overrides, *tiny_loop, "loop.meta_apart=true", "loop.meta_audit=blind"]
    summary = _run(tmp_path / "run", [*overrides, "loop.judge_val_f1=1.0"])
    metrics = read_metrics(tmp_path / "run")
    sft = {phase: [r["step"] for r in metrics if r["phase"] == phase] for phase in ("judge_sft", "meta_sft")}
    assert sft["judge_sft"] == sft["meta_sft"] == [1, 2, 3, 4, 5]  # the cold start and its extension
    meta_rl = [r for r in metrics if r["phase"] == "meta_rl"]
    assert meta_rl and all(0.0 <= r["reward"] <= 1.0 for r in meta_rl)
    for r in summary["rounds"]:
        assert set(r) >= ROUND_KEYS and 0.0 <= r["meta_parse_rate"] <= 1.0
    latest = tmp_path / "run" / "checkpoints" / "latest"
    judge, meta = (load_file(latest / role / "model.safetensors") for role in ("judge", "meta"))
    assert any(not torch.equal(judge[k], meta[k]) for k in judge)


@pytest.mark.parametrize(("bar", "audit"), [("0.0", "blind"), ("1.0", "prompted")])
def test_auto_audits_blind_only_where_the_meta_verifier_passes_its_check(
    tmp_path, tiny_overrides, tiny_loop, kill_midway, bar, audit
):
    """loop.meta_audit=auto: a meta-verifier apart whose check as a verifier reaches loop.judge_val_f1
    audits blind, one below it prompted; the run is then exactly that audit's run, and a killed one
    resumes with the audit it chose."""
    apart = [*tiny_overrides, *tiny_loop, "loop.meta_apart=true", f"loop.judge_val_f1={bar}"]
    summary = _run(tmp_path / "auto", [*apart, "loop.meta_audit=auto"])
    assert summary["meta_audit"] == audit
    fixed = _run(tmp_path / audit, [*apart, f"loop.meta_audit={audit}"])
    assert fixed["meta_audit"] == audit and fixed["rounds"] == summary["rounds"]
    metrics = read_metrics(tmp_path / "auto")
    assert metrics == read_metrics(tmp_path / audit)
    run = tmp_path / "killed"
    kill_midway(run, [*apart, "loop.meta_audit=auto"], lambda m: any(r["phase"] == "rl" for r in m))
    assert _run(run, [*apart, "loop.meta_audit=auto"])["meta_audit"] == audit
    assert read_metrics(run) == metrics


def test_every_rl_phase_and_round_draws_its_own_samples(tmp_path, tiny_overrides, tiny_loop, monkeypatch):
    """The verifier's, the meta-verifier's and the generator's RL steps, in every round, sample with
    seeds of their own (they once shared ``rl_step`` seeds by step index alone)."""
    seeds: list[int] = []
    real = selfverify_recipe.rl_step

    def recording(*args, **kwargs):
        seeds.append(args[5])  # rl_step(worker, pad_id, cfg, source, reward_fn, seed): runs as ever
        return real(*args, **kwargs)

    monkeypatch.setattr(selfverify_recipe, "rl_step", recording)
    monkeypatch.setattr(generator_recipe, "rl_step", recording)
    _run(tmp_path / "run", [*tiny_overrides, *tiny_loop])
    # 2 rounds × (2 verifier + 2 meta + 2 generator) steps, less the verifier's in a round whose scaled
    # verification kept no auto-label
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds)


def test_refinement_prompts_pose_the_drafts_the_verifier_finds_an_issue_in() -> None:
    """loop.refine_rl_fraction: the last share of a step's problems whose draft the verifier scores
    below 1 become refinement prompts over that draft and its analysis, scored as their own problem.
    Drafts: the embedded world's synthetic solutions; the verifier: the ground-truth analysis."""
    import random

    from selfverify.config.schema import TaskSpec
    from selfverify.judges.compact_judge import CompactFormat, parse_analysis, reference_analysis
    from selfverify.tasks import EmbeddedTask

    task, fmt = EmbeddedTask(TaskSpec()), CompactFormat()
    problems = task.train_problems(8, seed=0, tag="refine", exclude=set())
    drafts: dict[int, list[list[str]]] = {}

    def draft(ps: list, refill: int) -> list[list[str]]:
        rng = random.Random(refill)
        drafts[refill] = [task.synthetic_solution(p, rng, correct_fraction=0.5)[1] for p in ps]
        return drafts[refill]

    def analyse(ps: list, steps: list[list[str]]) -> list[Verdict]:
        return [parse_analysis(reference_analysis(p, s), len(s)) for p, s in zip(ps, steps, strict=True)]

    source = generator_recipe.refining_source(lambda refill: problems, 0.5, draft, analyse, fmt.refine_prompt)
    posed = source(3)
    assert posed[:4] == problems[:4]
    revised = 0
    for p, q, steps in zip(problems[4:], posed[4:], drafts[3], strict=True):
        if task.check(p, "\n".join(steps)).earliest_error == -1:
            assert q is p
            continue
        revised += 1
        assert isinstance(q, generator_recipe.Revision) and (q.problem, q.text, q.answer) == (
            p,
            p.text,
            p.answer,
        )
        assert q.prompt == fmt.refine_prompt(p.text, steps, [reference_analysis(p, steps)])
    assert revised > 0 and generator_recipe.unrevised(posed) == problems
    assert source(3) == posed  # drafts keyed by the refill: a resumed step poses the same prompts
