"""The self-verification loop (DeepSeekMath-V2, 2025; DESIGN §4), top to bottom:

1. generator cold start: SFT on demonstrations (selfverify.recipes.coldstart);
2. verifier and meta-verifier cold start: one judge model (by default a copy of the cold-started
   generator; ``loop.judge_model`` names another, ``loop.meta_model`` a meta-verifier of its own;
   ``loop.meta_apart`` makes the meta-verifier a second whole judge, trained on a draw of its own, and
   ``loop.meta_audit=blind`` has it audit by its own unshown analysis of the solution; ``auto``: blind
   if it passes the cold start's check, prompted if not) is
   fine-tuned on a labelled pool of the generator's own samples (ground truth supplies the analyses
   and the meta labels: this pool is the seed data a human would label), joined by the labelled
   solutions of ``loop.judge_seed``;
3. rounds, each: verifier training (round > 0: SFT on the previous round's auto-labels, then RL
   with R_format·R_score·R_meta) and meta-verifier RL (R_format·R_score; blind: its own analysis's
   agreement with the labelled one) -> generator RL against the current verifier (``reward.mode``)
   -> scaled verification of fresh generator samples into auto-labels for the next round ->
   evaluation against ground truth (logged, never trained on).

With ``loop.labels=auto`` no ground truth reaches training after the cold-start pool: the verifier's
later data and its RL labels are auto-labels. ``loop.labels=truth`` uses ground-truth labels for the
same samples instead (the upper bound auto-labelling is measured against).

The models are workers (``selfverify.runtime.workers``) placed by ``backend`` (in this process or as Ray
actors); this module only sequences the phases, with the loop's data and measurements in
``selfverify.recipes.judge_data`` and every random stream seeded by ``selfverify.utils.seeds.derive_seed``.
A run resumes at the start of the phase it was killed in (``checkpoints/latest`` holds every model
and the state after each finished phase).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from selfverify.config.schema import Config
from selfverify.judges.generative import (
    GenerativeVerifier,
    LMJudge,
    MetaVerifier,
    make_format,
    require_version,
    verdict_agreement,
)
from selfverify.judges.rewards import (
    meta_verifier_reward,
    mix_step_rewards,
    outcome_rewards,
    self_verify_reward,
    verifier_reward,
)
from selfverify.recipes.coldstart import demonstrations
from selfverify.recipes.evaluate import evaluate_generator
from selfverify.recipes.judge_data import (
    Example,
    Labelled,
    MetaItem,
    World,
    evaluate_judges,
    generate_samples,
    generator_tokens,
    judge_format_name,
    meta_item,
    model_specs,
    scaled_verification,
    solution_part,
    truth_labelled,
    verifier_metrics,
)
from selfverify.recipes.rl_step import (
    ProblemSource,
    Scored,
    lr_decay_steps,
    rl_step,
    step_scored,
    uses_critic,
    value_pretrain_step,
)
from selfverify.runtime.backends import Backend, make_backend
from selfverify.runtime.checkpoint import STATE_FILE, CheckpointError, save_bundle
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.rollout import Rollout
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import make_task
from selfverify.tasks.base import TaskProblem as Problem
from selfverify.utils.io import recover, write_atomically
from selfverify.utils.seeds import derive_seed
from selfverify.utils.tracking import Tracker

# A judge SFT phase warms up over its first fifth, at most 20 steps.
JUDGE_SFT_MAX_WARMUP, JUDGE_SFT_WARMUP_DIVISOR = 20, 5
# An extended judge cold start (loop.judge_max_extends) starts at a quarter of its learning rate: the judge
# is past its first steep fall by then.
JUDGE_EXTEND_LR_FACTOR = 0.25
# The cold start's check figure and its stand-ins, in order: F1, else the accuracy on the one kind present.
JUDGE_CHECK_FIGURES = ("f1", "acc_err", "acc_corr")
SYNTHETIC_CORRECT_FRACTION = 0.4  # of the judge's synthetic solutions, the share left without an error
META_ITEMS_PER_SAMPLE = 3  # meta_items: the verifier's analysis, the faithful one and an unfaithful one


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the loop; returns the summary written to ``summary.json``."""
    run_dir = run_dir.resolve()  # workers in other processes (backend=ray) write checkpoints here
    clock = time.time()
    recover(run_dir / "checkpoints" / "latest")
    backend = make_backend(
        cfg.backend,
        cfg.threads,
        cfg.train,
        cfg.rollout,
        roles=("generator", "judge", "meta")
        if cfg.loop.meta_model.path is not None or cfg.loop.meta_apart
        else ("generator", "judge"),
    )
    try:
        return _run(cfg, run_dir, backend, clock, progress)
    finally:
        backend.shutdown()


def _run(cfg: Config, run_dir: Path, backend: Backend, start: float, progress: bool) -> dict[str, Any]:
    clock = [start]  # wall time not yet added to state["wall"]
    lc, ckpt = cfg.loop, run_dir / "checkpoints"
    fmt_name = judge_format_name(cfg)
    specs = model_specs(cfg)

    def spawn_saved(bundle: Path) -> dict[str, LMWorker]:
        names = sorted(p.name for p in bundle.iterdir() if p.is_dir())
        return {name: backend.spawn(name, specs[name], cfg.seed, path=bundle / name) for name in names}

    if (ckpt / "latest").exists():
        state = torch.load(ckpt / "latest" / STATE_FILE, weights_only=False)
        require_version(make_format(fmt_name), state["judge_format"], str(ckpt / "latest"))
        workers = spawn_saved(ckpt / "latest")
    elif cfg.init_from is not None and (Path(cfg.init_from) / "judge").is_dir():
        # A loop's cold start (a run with loop.rounds=0): generator, judge and seed pool, so the
        # rounds start at once. Studies share one per seed across reward modes.
        state = torch.load(Path(cfg.init_from) / STATE_FILE, weights_only=False)
        require_version(make_format(fmt_name), state["judge_format"], str(cfg.init_from))
        if (state["phase"], state["round"]) != ("verifier", 0):
            raise CheckpointError(
                f"init_from={cfg.init_from}: not a checkpoint taken right after the judge cold start"
            )
        state.update(lines=0, rounds=[], wall=0.0, phase_seconds={})
        workers = spawn_saved(Path(cfg.init_from))
    else:  # init_from, an HF model directory: a given cold-started policy (no SFT)
        workers = {"generator": backend.spawn("generator", cfg.model, cfg.seed, path=cfg.init_from)}
        state = {"phase": "cold_start", "round": 0, "lines": 0, "figures": {}, "rounds": [], "wall": 0.0}
        fmt0 = make_format(fmt_name)  # the judge's analyses' format: checked when loaded
        state["judge_format"] = {"format": fmt0.name, "format_version": fmt0.version}
        state["auto"] = []  # the latest round's auto-labelled verifier data
    tracker = Tracker(run_dir, cfg, keep=state["lines"])
    generator = workers["generator"]
    tok = generator.get_tokenizer()
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    # Labelled solutions from a file (ProcessBench format); the task labels exactly those by the file.
    seed_data = task.processbench_seed(lc.judge_seed, on_error="fail") if lc.judge_seed else []
    # The format's references and tags need no prompter; its prompts get the judges' once they exist.
    fmt0 = make_format(fmt_name, task)
    world = World(task, fmt0, fmt0)
    fmt = world.fmt
    heldout = task.heldout(cfg.task.n_heldout, cfg.seed)
    exclude = set(heldout)
    figures: dict[str, Any] = state["figures"]

    def save(phase: str, **updates: Any) -> None:
        """Checkpoint every model and the state: a killed run resumes at ``phase``."""
        now = time.time()
        seconds = state.setdefault("phase_seconds", {})  # where the wall time went, per phase
        seconds[state["phase"]] = seconds.get(state["phase"], 0.0) + now - clock[0]
        state.update(phase=phase, lines=tracker.count, wall=state["wall"] + now - clock[0], **updates)
        clock[0] = now
        save_bundle(ckpt / "latest", workers, state)

    def evaluate() -> dict[str, float]:
        return evaluate_generator(
            generator,
            task,
            heldout,
            max_new_tokens=generator_tokens(cfg),
            batch_size=cfg.eval_batch_size,
            solution_of=lambda t: solution_part(cfg, world, t),
        )

    def source_for(tag: str) -> ProblemSource:
        """The RL prompts of one step, keyed by tag (and refill round), never held-out ones."""
        return lambda rr: task.train_problems(
            cfg.rl.prompts_per_step,
            seed=cfg.seed,
            tag=tag if rr == 0 else f"{tag}-r{rr}",
            exclude=exclude,
        )

    # 1. Generator cold start (or a given cold-started policy: init_from, an HF model directory).
    if state["phase"] == "cold_start":
        if cfg.init_from is None:
            sft = cfg.sft
            generator.start_sft(sft.lr, warmup_steps=sft.warmup_steps, total_steps=sft.steps)
            for step in tqdm(range(sft.steps), desc="generator cold start (SFT)", disable=not progress):
                m = generator.sft_step(*demonstrations(cfg, task, step, exclude, fmt))
                tracker.log("sft", step + 1, m)
            generator.end_training()
        cold = evaluate()
        figures["cold_start_accuracy"] = cold["accuracy"]
        tracker.log("eval", 0, cold)
        save("judges")
    if "judge" not in workers:
        # The judge starts as the cold-started generator (as saved), or is a model of its own (e.g. a
        # larger instruct model); so may the meta-verifier be.
        copied = ckpt / "latest" / "generator" if lc.judge_model.path is None else None
        workers["judge"] = backend.spawn("judge", specs["judge"], cfg.seed, path=copied)
        if lc.meta_model.path is not None or lc.meta_apart:
            start_meta = copied if lc.meta_model.path is None else None
            workers["meta"] = backend.spawn("meta", specs["meta"], cfg.seed, path=start_meta)
    # By default one judge model is both the verifier (prompts ending ``#V``) and the meta-verifier
    # (``#M``), as in DeepSeekMath-V2, whose final verifier also meta-verifies: checking an analysis
    # needs the same skill as writing one, and one model trains once.
    meta_name = "meta" if "meta" in workers else "judge"
    judge_tok, meta_tok = workers["judge"].get_tokenizer(), workers[meta_name].get_tokenizer()
    world = World(
        task,
        make_format(fmt_name, task, chat_prompter(judge_tok, specs["judge"])),
        make_format(fmt_name, task, chat_prompter(meta_tok, specs["meta"])),
    )
    fmt = world.fmt
    judge_kw = {"max_new_tokens": lc.judge_max_new_tokens, "batch_size": lc.judge_batch_size}
    verifier = GenerativeVerifier(workers["judge"], fmt=fmt, **judge_kw)
    meta = MetaVerifier(workers[meta_name], fmt=world.meta_fmt, **judge_kw)  # how it audits: after its check
    # The labelled seed pool: the cold-started generator's samples, analysed by ground truth.
    pool_problems = task.train_problems(lc.judge_pool, seed=cfg.seed, tag="judge-pool", exclude=exclude)

    def labelled_pool() -> list[Labelled]:
        samples = generate_samples(
            cfg, world, generator, pool_problems, seed=derive_seed(cfg.seed, "judge_pool")
        )
        return [truth_labelled(world, p, s) for p, s in zip(pool_problems, samples, strict=True)]

    def meta_items(items: Sequence[Labelled], seed: int) -> list[MetaItem]:
        """Per labelled sample: the verifier's sampled analysis, the faithful analysis and an unfaithful
        one, each with its ground-truth meta label (all three classes present from the start)."""
        analyses = verifier.generate([it.prompt for it in items], greedy=False, seed=seed)
        rng = random.Random(seed)
        out = []
        for it, text in zip(items, analyses, strict=True):
            for analysis in (text.strip(), it.analysis, fmt.unfaithful_analysis(it.problem, it.steps, rng)):
                out.append(meta_item(world, it.problem, it.steps, analysis))
        return out

    # Who learns from which examples: one judge learns both kinds; a meta-verifier of its own, "meta"
    # (loop.meta_apart: each judge learns both kinds, from a draw of its own).
    trainees: dict[str, LMJudge] = {"judge_sft": verifier} | (
        {"meta_sft": meta} if meta_name == "meta" else {}
    )
    learns = {"verifier": "judge_sft", "meta": "meta_sft" if meta_name == "meta" else "judge_sft"}

    def judge_sft(
        batches: Callable[[int, random.Random], list[Example]], steps: int, lr: float, first: int = 0
    ) -> None:
        """Supervised fine-tuning of the judge (and the meta-verifier) on examples drawn per step; a phase
        that goes on from step ``first`` draws steps of its own."""
        for judge in trainees.values():
            warmup = min(JUDGE_SFT_MAX_WARMUP, steps // JUDGE_SFT_WARMUP_DIVISOR)
            judge.lm.start_sft(lr, warmup_steps=warmup, total_steps=steps)
        rng = random.Random(f"{cfg.seed}-judge_sft-{state['round']}" + (f"-from-{first}" if first else ""))
        apart_rng = random.Random(f"{cfg.seed}-apart-{state['round']}-{first}")
        desc = f"round {state['round']}: judge_sft" if state["phase"] != "judges" else "cold start: judge_sft"
        for step in tqdm(range(first, first + steps), desc=desc, disable=not progress):
            if lc.meta_apart:
                draws = {"judge_sft": batches(step, rng), "meta_sft": batches(step, apart_rng)}
            else:  # one draw, shared out by kind
                examples = batches(step, rng)
                draws = {phase: [ex for ex in examples if learns[ex[0]] == phase] for phase in trainees}
            for phase, judge in trainees.items():
                if not draws[phase]:
                    continue
                _, prompts, targets = zip(*draws[phase], strict=True)
                m = judge.lm.sft_step(list(prompts), list(targets))
                tracker.log(phase, step + 1, m | {"round": float(state["round"])})
        for judge in trainees.values():
            judge.lm.end_training()

    def meta_example(problem: Problem, steps: Sequence[str], rng: random.Random) -> Example:
        """A faithful or an unfaithful analysis of the solution (even odds) and its faithful
        meta-verification (the judge's own analysis, then the meta label)."""
        if rng.random() < 0.5:
            analysis = fmt.reference_analysis(problem, steps)
        else:
            analysis = fmt.unfaithful_analysis(problem, steps, rng)
        target = fmt.meta_reference(problem, steps, analysis)[0]
        return "meta", world.meta_fmt.meta_prompt(problem.text, steps, analysis), target

    # 2. Judge cold start. Each step's batch: solutions from the labelled pool, and fresh synthetic ones
    # (the reference, or the reference with one injected error: unlimited labelled data, so the judge
    # learns to check a step instead of memorising the pool); each solution becomes a verifier example
    # (its faithful analysis) or a meta-verifier example (a faithful or unfaithful analysis, labelled).
    if state["phase"] == "judges":
        seeded = [(p, tuple(steps)) for p, steps, _ in seed_data]
        state["pool"] = [(it.problem, it.steps) for it in labelled_pool()] + seeded
    pool = [truth_labelled(world, p, s) for p, s in state.get("pool", [])]

    def judge_examples(
        items: Sequence[Labelled], rng: random.Random, meta_source: Sequence[Labelled] | None = None
    ) -> list[Example]:
        """Per item, a verifier example (its prompt and analysis) or, a share ``judge_meta_fraction`` of
        the time, a meta-verifier example on the item or on a draw from ``meta_source``."""
        out = []
        for it in items:
            if rng.random() < lc.judge_meta_fraction:
                src = rng.choice(meta_source) if meta_source else it
                out.append(meta_example(src.problem, src.steps, rng))
            else:
                out.append(("verifier", it.prompt, it.analysis))
        return out

    def cold_start_batch(step: int, rng: random.Random, size: int | None = None) -> list[Example]:
        size = lc.judge_sft_batch_size if size is None else size
        n_syn = round(size * lc.judge_synthetic_fraction)
        tag = f"judge-{state['round']}-{step}"
        fresh = task.train_problems(n_syn, seed=cfg.seed, tag=tag, exclude=exclude)
        synthetic = [
            task.synthetic_solution(p, rng, SYNTHETIC_CORRECT_FRACTION, lc.judge_error_weights) for p in fresh
        ]
        items = [truth_labelled(world, p, steps) for p, (_, steps) in zip(fresh, synthetic, strict=True)]
        items += rng.sample(pool, min(len(pool), size - n_syn))
        return judge_examples(items, rng)

    # loop.meta_apart: the meta-verifier's check of a step is its own, so it is held to the same bar
    # (a second judge can pass its cold start without learning to compare a step, as a first one can).
    checked = {"": verifier} | (
        {"meta_": GenerativeVerifier(meta.lm, fmt=world.meta_fmt, **judge_kw)} if lc.meta_apart else {}
    )

    def judge_check(
        extends: int, problems: list[Problem], samples: list[tuple[str, ...]]
    ) -> dict[str, float]:
        """Per judge checked (prefix "" the verifier, "meta_" a meta-verifier apart, as a verifier): its F1
        on the check's samples (where they hold one kind of sample only, right or wrong, its accuracy on
        that kind). The figures are logged as ``judge_val``."""
        row: dict[str, float | None] = {}
        for prefix, judge in checked.items():
            pb = verifier_metrics(world, judge, problems, samples)[-1]
            row |= {prefix + k: pb[k] for k in JUDGE_CHECK_FIGURES}
        tracker.log("judge_val", extends, row)
        return {
            pre: next(row[pre + k] for k in JUDGE_CHECK_FIGURES if row[pre + k] is not None)
            for pre in checked
        }

    if state["phase"] == "judges":
        judge_sft(cold_start_batch, lc.judge_sft_steps, lc.judge_sft_lr)
        if lc.judge_val_f1 is not None:
            # Fresh generator samples of training problems, drawn once: the generator does not change here.
            val = task.train_problems(lc.judge_val_samples, seed=cfg.seed, tag="judge-val", exclude=exclude)
            val_samples = generate_samples(
                cfg, world, generator, val, seed=derive_seed(cfg.seed, "judge_val")
            )
            done = lc.judge_sft_steps
            for extends in range(lc.judge_max_extends + 1):
                checks = judge_check(extends, val, val_samples)
                score = min(checks.values())
                figures |= {"judge_val_f1": score, "judge_sft_extends": extends}
                if score >= lc.judge_val_f1 or extends == lc.judge_max_extends:
                    break
                lr = lc.judge_sft_lr * JUDGE_EXTEND_LR_FACTOR
                judge_sft(cold_start_batch, lc.judge_extend_steps, lr, first=done)
                done += lc.judge_extend_steps
            if lc.meta_audit == "auto":
                # A blind audit is as good as the auditor's own check (docs/RESULTS.md, "auditing blind"):
                # blind where the meta-verifier apart passed the bar, prompted where it did not.
                figures["meta_audit"] = "blind" if checks["meta_"] >= lc.judge_val_f1 else "prompted"
        save("verifier", round=0)
    if lc.meta_audit != "auto":
        figures["meta_audit"] = lc.meta_audit
    meta.blind = figures.get("meta_audit") == "blind"

    # Rewards the judges and the generator are trained with.
    def verifier_reward_fn(items: list[Labelled], rollout: Rollout) -> Scored:
        verdicts = [fmt.parse_analysis(t, len(it.steps)) for it, t in zip(items, rollout.texts, strict=True)]
        metas = meta.meta_verify([it.problem.text for it in items], [it.steps for it in items], rollout.texts)
        rewards = [
            verifier_reward(v.parsed, v.score, it.score, ms)
            for v, it, (ms, _) in zip(verdicts, items, metas, strict=True)
        ]
        return Scored(torch.tensor(rewards), torch.tensor([r == 1.0 for r in rewards]))

    def meta_reward_fn(items: list[MetaItem], rollout: Rollout) -> Scored:
        judged = [fmt.parse_meta(t) for t in rollout.texts]
        rewards = [meta_verifier_reward(ok, s, it.label) for it, (s, ok) in zip(items, judged, strict=True)]
        return Scored(torch.tensor(rewards), torch.tensor([r == 1.0 for r in rewards]))

    def own_check_reward_fn(items: list[Labelled], rollout: Rollout) -> Scored:
        """A blind meta-verifier's RL reward: its own analysis agrees with the label's (the step it names,
        its score), as an analysis it audits must agree with its own."""
        rewards = [
            verdict_agreement(
                world.meta_fmt.parse_analysis(it.analysis, len(it.steps)),
                world.meta_fmt.parse_analysis(t, len(it.steps)),
            )
            for it, t in zip(items, rollout.texts, strict=True)
        ]
        return Scored(torch.tensor(rewards), torch.tensor([r == 1.0 for r in rewards]))

    def generator_reward_fn(problems: list[Problem], rollout: Rollout) -> Scored:
        mode = cfg.reward.mode
        solutions = [task.split_steps(solution_part(cfg, world, t)) for t in rollout.texts]

        def outcome() -> torch.Tensor:
            return outcome_rewards(
                [task.check(p, "\n".join(s)) for p, s in zip(problems, solutions, strict=True)]
            )

        if mode == "outcome":
            rewards = outcome()
            return Scored(rewards, rewards > 0)
        verdicts = verifier.analyse([p.text for p in problems], solutions)
        judged_right = torch.tensor([v.score == 1.0 for v in verdicts])
        if mode == "self_verify":
            rewards = []
            evaluations = [fmt.split_self_evaluation(t)[1] for t in rollout.texts]
            metas = meta.meta_verify([p.text for p in problems], solutions, [z or "" for z in evaluations])
            for v, s, z, (ms, _) in zip(verdicts, solutions, evaluations, metas, strict=True):
                own = fmt.parse_analysis(z, len(s)) if z is not None else None
                formatted = own is not None and own.parsed
                rewards.append(
                    self_verify_reward(
                        formatted,
                        v.score,
                        own.score if own else 0.0,
                        ms,
                        alpha=cfg.reward.alpha,
                        beta=cfg.reward.beta,
                    )
                )
            return Scored(torch.tensor(rewards), judged_right)
        step_scores = [v.step_scores for v in verdicts]
        if mode == "mix":
            step_scores = mix_step_rewards(
                step_scores, outcome().tolist(), cfg.reward.process_weight, cfg.reward.outcome_weight
            )
        return step_scored(tok, rollout, step_scores, judged_right)

    def judge_rl(judge: LMJudge, items: Sequence[Any], reward_fn: Any, steps: int, tag: str) -> None:
        if steps == 0 or not items:
            return
        jcfg = dataclasses.replace(
            cfg.rl,
            advantage="grpo",
            policy_loss="ppo_clip",
            prompts_per_step=lc.judge_prompts_per_step,
            group_size=lc.judge_group_size,
            max_new_tokens=lc.judge_max_new_tokens,
            dynamic_sampling=False,
            overlong_buffer=0,
            value_pretrain_steps=0,
            pos_lm_coef=0.0,
        )
        # rl.kl_coef > 0: the KL penalty to the judge as this phase found it.
        judge.lm.start_rl(lc.judge_rl_lr, reference=jcfg.kl_coef > 0, grad_clip=jcfg.grad_clip)
        pad_id = (judge_tok if judge is verifier else meta_tok).pad_token_id
        rng = random.Random(f"{cfg.seed}-{tag}-{state['round']}")
        for step in tqdm(range(steps), desc=f"round {state['round']}: {tag} RL", disable=not progress):
            batch = rng.sample(list(items), min(len(items), lc.judge_prompts_per_step))
            m = rl_step(
                judge.lm,
                pad_id,
                jcfg,
                lambda _r, b=batch: b,
                reward_fn,
                derive_seed(cfg.seed, "rl_step", step),
            )
            tracker.log(f"{tag}_rl", state["round"] * steps + step + 1, m)
        judge.lm.end_training()

    # 3. Rounds. The generator's rl.steps are split evenly over them.
    per_round = cfg.rl.steps // max(lc.rounds, 1)  # loop.rounds=0: the cold starts only
    while state["round"] < lc.rounds:
        r = state["round"]
        if state["phase"] == "verifier":
            data = state["auto"] if r > 0 else pool
            if r > 0 and data:
                # The auto-labels join the cold start's data: a share of each batch is auto-labelled
                # samples (their meta-verifier examples drawn from the seed pool: the auto-labels carry no
                # meta label), the rest the cold start's mix, so a few hundred labels do not undo it.
                def auto_batch(step: int, rng: random.Random, data: list[Labelled] = data) -> list[Example]:
                    k = min(len(data), round(lc.judge_sft_batch_size * lc.auto_sft_fraction))
                    chosen = judge_examples(rng.sample(data, k), rng, meta_source=pool)
                    return chosen + cold_start_batch(step, rng, lc.judge_sft_batch_size - k)

                judge_sft(auto_batch, lc.auto_sft_steps, lc.auto_sft_lr)
            judge_rl(verifier, data, verifier_reward_fn, lc.verifier_rl_steps, "verifier")
            if meta.blind:  # its RL trains the analysis it audits with, on the verifier's data
                own_data = [
                    dataclasses.replace(it, prompt=world.meta_fmt.verifier_prompt(it.problem.text, it.steps))
                    for it in data
                ]
                judge_rl(meta, own_data, own_check_reward_fn, lc.meta_rl_steps, "meta")
            else:  # meta RL items: analyses of only as many pool samples as the steps consume
                need = -(-lc.meta_rl_steps * lc.judge_prompts_per_step // META_ITEMS_PER_SAMPLE)
                subset = random.Random(f"{cfg.seed}-meta-{r}").sample(pool, min(len(pool), need))
                meta_data = meta_items(subset, seed=derive_seed(cfg.seed, "meta_items", r))
                judge_rl(meta, meta_data, meta_reward_fn, lc.meta_rl_steps, "meta")
            save("generator", step=0)
        if state["phase"] == "generator":
            rl = dataclasses.replace(cfg.rl, max_new_tokens=generator_tokens(cfg))
            # rl.kl_coef > 0: the reference is the generator at the start of the round, as in DeepSeekMath's
            # iterative GRPO (§4.1.3), which resets π_ref to the policy before each iteration. PPO/VAPO: a
            # fresh critic from the current policy (or rl.critic_model) each round.
            generator.start_rl(
                rl.lr,
                warmup_steps=rl.warmup_steps,
                total_steps=lr_decay_steps(rl, per_round),
                reference=rl.kl_coef > 0,
                critic=rl.critic_model if uses_critic(rl) else None,
                critic_lr=rl.critic_lr,
                grad_clip=rl.grad_clip,
                seed=cfg.seed,
            )
            if uses_critic(rl):
                for step in tqdm(
                    range(rl.value_pretrain_steps), desc=f"round {r}: value pretraining", disable=not progress
                ):
                    m = value_pretrain_step(
                        generator,
                        tok.pad_token_id,
                        rl,
                        source_for(f"vp-{r}-{step}"),
                        generator_reward_fn,
                        derive_seed(cfg.seed, "rl_step", step),
                    )
                    tracker.log("value_pretrain", r * rl.value_pretrain_steps + step + 1, m)
            first = r * per_round
            for step in tqdm(range(per_round), desc=f"round {r}: generator RL", disable=not progress):
                g = first + step
                m = rl_step(
                    generator,
                    tok.pad_token_id,
                    rl,
                    source_for(f"rl-{g}"),
                    generator_reward_fn,
                    derive_seed(cfg.seed, "rl_step", g),
                )
                tracker.log("rl", g + 1, m)
                if (step + 1) % cfg.rl.eval_every == 0 and step + 1 < per_round:
                    tracker.log("eval", g + 1, evaluate())
            generator.end_training()
            save("scaled")
        if state["phase"] == "scaled":
            problems = task.train_problems(
                lc.scaled_samples, seed=cfg.seed, tag=f"scaled-{r}", exclude=exclude
            )
            samples = generate_samples(
                cfg, world, generator, problems, seed=derive_seed(cfg.seed, "scaled_samples", r)
            )
            auto, stats = scaled_verification(
                cfg,
                world,
                verifier,
                meta,
                problems,
                samples,
                seed=derive_seed(cfg.seed, "scaled_verification", r),
            )
            if lc.labels == "truth":
                auto = [truth_labelled(world, p, s) for p, s in zip(problems, samples, strict=True)]
            state["auto"] = auto
            state["scaled_stats"] = stats
            save("eval")
        if state["phase"] == "eval":
            figures_r = {
                "round": r,
                **state["scaled_stats"],
                **evaluate_judges(cfg, world, generator, verifier, meta, heldout),
            }
            gen = evaluate()
            figures_r |= {
                "generator_accuracy": gen["accuracy"],
                "valid_solution_rate": gen["valid_solution_rate"],
            }
            tracker.log("eval", (r + 1) * per_round, gen)
            tracker.log("round", r + 1, figures_r)
            state["rounds"].append(figures_r)
            save("verifier", round=r + 1)
    if "judge" in workers:  # python -m selfverify.score --verifier <run dir>/judge
        write_atomically(run_dir / "judge", verifier.save)
    final = state["rounds"][-1] if state["rounds"] else {}
    figures["final_accuracy"] = final.get("generator_accuracy")
    figures["final_valid_solution_rate"] = final.get("valid_solution_rate")
    figures |= generator.rollout_engine_stats()  # rollout.engine=vllm: the generator's syncs, checked
    tracker.close()
    summary = dict(figures)
    summary["rounds"] = state["rounds"]
    summary["wall_seconds"] = state["wall"] + time.time() - clock[0]
    summary["phase_seconds"] = {k: round(v, 1) for k, v in state.get("phase_seconds", {}).items()}
    return summary
