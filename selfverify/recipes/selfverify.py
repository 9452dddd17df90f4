"""The self-verification loop (DeepSeekMath-V2, 2025), as a table of phases run top to bottom:

1. ``cold_start``: the generator's SFT on demonstrations;
2. ``judges``: the verifier and meta-verifier cold start. One judge model (by default a copy of the
   cold-started generator; ``loop.judge_model`` names another, ``loop.meta_model`` a meta-verifier of
   its own, ``loop.meta_apart`` makes the meta-verifier a second whole judge) is fine-tuned on a labelled
   pool of the generator's own samples (ground truth supplies the analyses and meta labels: the seed
   data a human would label), joined by the labelled solutions of ``loop.judge_seed``;
3. per round: ``verifier`` (round > 0: SFT on the previous round's auto-labels, then RL with
   R_format·R_score·R_meta, and the meta-verifier's RL) -> ``generator`` (RL against the current
   verifier, by ``reward.mode``) -> ``scaled`` (scaled verification of fresh samples into auto-labels
   for the next round) -> ``eval`` (against ground truth; logged, never trained on).

With ``loop.labels=auto`` no ground truth reaches training after the cold-start pool. ``PHASES`` and
``ROUND_PHASES`` are the order, written once: the driver runs them, and after each (and every
``checkpoint_every`` steps inside the two cold starts and the generator's RL) saves every model and the
run's ``RunState`` (JSON) to ``checkpoints/latest``, naming the phase and step to resume at. The models
are workers (``selfverify.runtime.workers``) placed by ``backend``; the rewards are built in
``selfverify.recipes.rewards``; the data and measurements live in ``selfverify.recipes.judge_data``.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from selfverify.config.schema import Config, RLConfig
from selfverify.judges.base import Verdict
from selfverify.judges.generative import (
    GenerativeVerifier,
    LMJudge,
    MetaVerifier,
    make_format,
    require_version,
)
from selfverify.recipes.evaluate import evaluate_generator
from selfverify.recipes.generator import GeneratorRL, cold_start, problem_source, refining_source
from selfverify.recipes.judge_data import (
    Example,
    Labelled,
    MetaItem,
    World,
    evaluate_judges,
    generate_samples,
    generator_tokens,
    judge_format_name,
    labelled_from_json,
    labelled_to_json,
    located_by_kind,
    meta_item,
    model_specs,
    problem_from_json,
    problem_to_json,
    scaled_verification,
    solution_part,
    truth_labelled,
    verifier_metrics,
)
from selfverify.recipes.rewards import generator_rewards, meta_rewards, own_check_rewards, verifier_rewards
from selfverify.recipes.rl_step import ProblemSource, RewardFn, lr_decay_steps, rl_step, uses_critic
from selfverify.runtime.backends import Backend, make_backend
from selfverify.runtime.checkpoint import CheckpointError, read_state, save_bundle
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Task
from selfverify.tasks.base import TaskProblem
from selfverify.tasks.registry import make_task
from selfverify.utils.io import recover, write_atomically
from selfverify.utils.seeds import stream_seed
from selfverify.utils.tracking import Tracker

# A judge SFT phase warms up over its first fifth, at most 20 steps.
JUDGE_SFT_MAX_WARMUP, JUDGE_SFT_WARMUP_DIVISOR = 20, 5
# An extended judge cold start (loop.judge_max_extends) starts at a quarter of its learning rate: the judge
# is past its first steep fall by then.
JUDGE_EXTEND_LR_FACTOR = 0.25
# The cold start's check figure and its stand-ins, in order: F1, else the accuracy on the one kind present.
JUDGE_CHECK_FIGURES = ("f1", "acc_err", "acc_corr")
SYNTHETIC_CORRECT_FRACTION = 0.4  # of the judge's synthetic solutions, the share left without an error
META_ITEMS_PER_SAMPLE = 3
# The rl settings that shape the generator's RL alone: the judges' RL runs with them off.
GENERATOR_ONLY_OFF = {
    "dynamic_sampling": False,
    "overlong_buffer": 0,
    "value_pretrain_steps": 0,
    "pos_lm_coef": 0.0,
}  # meta_items: the verifier's analysis, the faithful one and an unfaithful one


@dataclass
class RunState:
    """Everything a resumed run needs besides the models' weights, saved as JSON (``state.json``)."""

    phase: str = "cold_start"  # the phase to run next (``PHASES``, ``ROUND_PHASES``; "done" at the end)
    round: int = 0
    step: int = 0  # steps of ``phase`` already done (a phase saved part-way resumes there)
    lines: int = 0  # metrics.jsonl lines written (a resumed run drops any later ones)
    wall: float = 0.0  # seconds spent before the last save
    phase_seconds: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # the summary's figures so far
    rounds: list[dict[str, Any]] = field(default_factory=list)  # each finished round's figures
    judge_format: dict[str, Any] = field(default_factory=dict)  # the analyses' format and its version
    pool: list[dict[str, Any]] = field(default_factory=list)  # the judge's labelled seed pool (JSON)
    auto: list[dict[str, Any]] = field(default_factory=list)  # the latest round's auto-labels (JSON)
    scaled_stats: dict[str, Any] = field(default_factory=dict)  # the latest scaled verification's
    round_check: dict[str, Any] = field(default_factory=dict)  # the latest round's check of its judge
    # The judge cold start's batch streams where it was saved part-way (random.Random.getstate(), by name).
    streams: dict[str, Any] = field(default_factory=dict)


@dataclass
class Judges:
    """The judge models as the rounds use them: the verifier, the meta-verifier, and who learns what."""

    world: World
    verifier: GenerativeVerifier
    meta: MetaVerifier
    trainees: dict[str, LMJudge]  # "judge_sft" (and "meta_sft" for a meta-verifier of its own)
    learns: dict[str, str]  # example kind -> trainee
    checked: dict[str, GenerativeVerifier]  # the judges held to the cold start's check, by figure prefix


@dataclass
class Run:
    """One run's fixed inputs and its workers; the phases read these and update ``state``."""

    cfg: Config
    run_dir: Path
    backend: Backend
    workers: dict[str, LMWorker]
    task: Task
    heldout: list[TaskProblem]
    exclude: set[TaskProblem]  # the held-out problems: never a training prompt
    base_world: World  # the task and its judge format before the judges exist (the generator's prompter)
    tracker: Tracker
    state: RunState
    progress: bool
    clock: float  # when the wall time not yet in state.wall began
    judges: Judges | None = None

    @property
    def ckpt(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def generator(self) -> LMWorker:
        return self.workers["generator"]

    def save(self, phase: str, round: int | None = None, step: int = 0) -> None:
        """Checkpoint every model and the state: a killed run resumes at ``phase`` (of ``round``) after
        ``step`` of its steps."""
        now, s = time.time(), self.state
        s.phase_seconds[s.phase] = s.phase_seconds.get(s.phase, 0.0) + now - self.clock
        s.wall += now - self.clock
        self.clock = now
        s.phase, s.step, s.lines = phase, step, self.tracker.count
        s.round = s.round if round is None else round
        save_bundle(self.ckpt / "latest", self.workers, dataclasses.asdict(s), training=step > 0)

    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        world = self.judges.world if self.judges else self.base_world
        return evaluate_generator(
            self.generator,
            self.task,
            self.heldout,
            max_new_tokens=generator_tokens(cfg),
            batch_size=cfg.eval_batch_size,
            solution_of=lambda t: solution_part(cfg, world, t),
        )

    def source_for(self, tag: str):
        return problem_source(self.cfg, self.task, self.exclude, tag)


# --- phases run once -------------------------------------------------------------------------------


def generator_cold_start(run: Run) -> None:
    """SFT on demonstrations (or a given cold-started policy: init_from, an HF model directory), then
    the cold start's held-out accuracy."""
    cfg = run.cfg
    if cfg.init_from is None:
        cold_start(
            run.generator,
            cfg,
            run.task,
            run.exclude,
            run.tracker,
            first=run.state.step,
            checkpoint=lambda step: run.save("cold_start", step=step),
            fmt=run.base_world.fmt,  # self-evaluations and refinements are in the judge format
            progress=run.progress,
        )
    cold = run.evaluate()
    run.state.figures["cold_start_accuracy"] = cold["accuracy"]
    run.tracker.log("eval", 0, cold)


def judge_cold_start(run: Run) -> None:
    """The judge's SFT on the labelled pool and fresh synthetic solutions, checked (``loop.judge_val_f1``)
    and extended while below the bar; under ``loop.meta_audit=auto`` the audit mode it earns. Saved every
    ``checkpoint_every`` steps: a resumed run goes on from the step it saved (``state.step``)."""
    cfg, lc, state, task = run.cfg, run.cfg.loop, run.state, run.task
    judges, resumed = run.judges, state.step
    if not resumed:  # a run resumed part-way has its pool in the state
        seed_data = task.processbench_seed(lc.judge_seed, on_error="fail") if lc.judge_seed else []
        pool_problems = task.train_problems(
            lc.judge_pool, seed=cfg.seed, tag="judge-pool", exclude=run.exclude
        )
        samples = generate_samples(
            cfg, judges.world, run.generator, pool_problems, seed=stream_seed(cfg.seed, "judge_pool")
        )
        pool = [(p, tuple(s)) for p, s in zip(pool_problems, samples, strict=True)]
        pool += [(p, tuple(steps)) for p, steps, _ in seed_data]
        state.pool = [{"problem": problem_to_json(p), "steps": list(s)} for p, s in pool]
    batches = cold_start_batches(run, seed_pool(run))
    if resumed < lc.judge_sft_steps:
        judge_sft(run, batches, lc.judge_sft_steps, lc.judge_sft_lr, resume_at=resumed)
    if lc.judge_val_f1 is not None:
        checks, extends = check_judges(
            run,
            batches,
            lc.judge_sft_steps,
            lc.judge_max_extends,
            draw="judge_val",
            log="judge_val",
            resumed=resumed,
        )
        state.figures |= {"judge_val_f1": min(checks.values()), "judge_sft_extends": extends}
        if lc.meta_audit == "auto":
            # A blind audit is as good as the auditor's own check: blind where the meta-verifier apart
            # passed the bar, prompted where it did not.
            state.figures["meta_audit"] = "blind" if checks["meta_"] >= lc.judge_val_f1 else "prompted"
    state.streams = {}
    settle_audit(run)


def check_judges(
    run: Run,
    batches: Callable[..., list[Example]],
    done: int,
    max_extends: int,
    *,
    draw: str,
    log: str,
    stream_prefix: str = "",
    resumed: int | None = None,
    **logged: float,
) -> tuple[dict[str, float], int]:
    """Check the judges on fresh samples of the generator as it is (``judge_check``: the samples'
    stream ``draw``, the figures and ``logged`` logged as phase ``log``) and extend their SFT (on
    ``batches``, from step ``done`` of the round's, with ``judge_sft``'s ``stream_prefix``) while one is below
    ``loop.judge_val_f1``, at most ``max_extends`` times; the last checks and the extensions made.
    ``resumed`` (the judge cold start, which saves part-way): the judge SFT steps done before a resumed
    run started (the checks and extensions they cover were made then)."""
    cfg, lc, task, judges = run.cfg, run.cfg.loop, run.task, run.judges
    # Fresh generator samples of training problems, drawn once: the generator does not change here. The
    # problems' tag is the draw's name with dashes ("judge-val" for the cold start's "judge_val").
    val = task.train_problems(
        lc.judge_val_samples, seed=cfg.seed, tag=draw.replace("_", "-"), exclude=run.exclude
    )
    val_samples = generate_samples(cfg, judges.world, run.generator, val, seed=stream_seed(cfg.seed, draw))
    for extends in range(max_extends + 1):
        end = done + lc.judge_extend_steps
        if resumed is None or resumed <= done:  # else the run was saved in a later extension: checked
            checks = judge_check(run, log, extends, val, val_samples, **logged)
            if min(checks.values()) >= lc.judge_val_f1 or extends == max_extends:
                break
        if resumed is None or resumed < end:
            lr = lc.judge_sft_lr * JUDGE_EXTEND_LR_FACTOR
            judge_sft(
                run,
                batches,
                lc.judge_extend_steps,
                lr,
                first=done,
                resume_at=resumed,
                stream_prefix=stream_prefix,
            )
        done = end
    return checks, extends


# --- phases run every round ------------------------------------------------------------------------


def train_judges(run: Run) -> None:
    """Round > 0: judge SFT on the previous round's auto-labels beside the cold start's mix; then the
    verifier's RL and the meta-verifier's RL."""
    cfg, lc, r = run.cfg, run.cfg.loop, run.state.round
    judges = run.judges
    pool = seed_pool(run)
    data = [labelled_from_json(judges.world, d) for d in run.state.auto] if r > 0 else pool
    if r > 0 and data:
        # A share of each batch is auto-labelled samples (their meta-verifier examples drawn from the seed
        # pool: the auto-labels carry no meta label), the rest the cold start's mix, so a few hundred
        # labels do not undo it.
        mixed = cold_start_batches(run, pool)

        def auto_batch(step: int, rng: random.Random) -> list[Example]:
            k = min(len(data), round(lc.judge_sft_batch_size * lc.auto_sft_fraction))
            chosen = judge_examples(run, rng.sample(data, k), rng, meta_source=pool)
            return chosen + mixed(step, rng, lc.judge_sft_batch_size - k)

        judge_sft(run, auto_batch, lc.auto_sft_steps, lc.auto_sft_lr)
    fmt, meta = judges.world.fmt, judges.meta
    auditor = meta if lc.verifier_meta_reward else None
    judge_rl(run, judges.verifier, data, verifier_rewards(fmt, auditor), lc.verifier_rl_steps, "verifier")
    if meta.blind:  # its RL trains the analysis it audits with, on the verifier's data
        meta_fmt = judges.world.meta_fmt
        own = [
            dataclasses.replace(it, prompt=meta_fmt.verifier_prompt(it.problem.text, it.steps)) for it in data
        ]
        judge_rl(run, meta, own, own_check_rewards(meta_fmt), lc.meta_rl_steps, "meta")
    else:  # meta RL items: analyses of only as many pool samples as the steps consume
        need = -(-lc.meta_rl_steps * lc.judge_prompts_per_step // META_ITEMS_PER_SAMPLE)
        subset = random.Random(stream_seed(cfg.seed, "meta_subset", r)).sample(pool, min(len(pool), need))
        items = meta_items(run, subset, seed=stream_seed(cfg.seed, "meta_items", r))
        judge_rl(run, meta, items, meta_rewards(fmt), lc.meta_rl_steps, "meta")


def train_generator(run: Run) -> None:
    """The generator's RL against the current verifier (``reward.mode``); its share of ``rl.steps``.
    rl.kl_coef > 0: the reference is the generator at the start of the round, as in DeepSeekMath's
    iterative GRPO (§4.1.3). PPO/VAPO: a fresh critic from the current policy (or rl.critic_model)."""
    cfg, r, state = run.cfg, run.state.round, run.state
    rl = dataclasses.replace(cfg.rl, max_new_tokens=generator_tokens(cfg))
    per_round = rounds_share(cfg)
    gen, judges = run.generator, run.judges
    gen.start_rl(
        rl.lr,
        warmup_steps=rl.warmup_steps,
        total_steps=lr_decay_steps(rl, per_round),
        reference=rl.kl_coef > 0,
        critic=rl.critic_model if uses_critic(rl) else None,
        critic_lr=rl.critic_lr,
        grad_clip=rl.grad_clip,
        seed=cfg.seed,
        resume=state.step > 0,
    )
    reward_fn = generator_rewards(cfg, judges.world, gen.get_tokenizer(), judges.verifier, judges.meta)
    source_for = refinement_source_for(run, rl) if cfg.loop.refine_rl_fraction > 0 else run.source_for
    job = GeneratorRL(gen, rl, reward_fn, source_for, run.tracker, cfg.seed, r, run.progress)
    if uses_critic(rl) and state.step == 0:
        job.value_pretraining(
            tag=f"vp-{r}", log_offset=r * rl.value_pretrain_steps, desc=f"round {r}: value pretraining"
        )
    job.steps(
        offset=r * per_round,
        steps=per_round,
        first=state.step,
        eval_every=cfg.rl.eval_every,
        evaluate=run.evaluate,
        checkpoint=lambda step: run.save("generator", step=step),
        checkpoint_every=cfg.checkpoint_every,
        desc=f"round {r}: generator RL",
    )
    gen.end_training()


def refinement_source_for(run: Run, rl: RLConfig) -> Callable[[str], ProblemSource]:
    """The generator RL's prompts with ``loop.refine_rl_fraction`` of each step's posed as refinements of
    the generator's own drafts that the verifier finds an issue in (``refining_source``); each draft
    keyed by the step's tag, the round and the refill, so a resumed run draws it again."""
    cfg, judges, r = run.cfg, run.judges, run.state.round
    assert judges is not None

    def for_tag(tag: str) -> ProblemSource:
        def draft(problems: list[TaskProblem], refill: int) -> list[list[str]]:
            out = run.generator.generate(
                [p.prompt for p in problems],
                max_new_tokens=rl.max_new_tokens,
                temperature=rl.temperature,
                seed=stream_seed(cfg.seed, f"refine-draft-{tag}", r, refill),
            )
            return [run.task.split_steps(solution_part(cfg, judges.world, t)) for t in out.texts]

        def analyse(problems: list[TaskProblem], drafts: list[list[str]]) -> list[Verdict]:
            return judges.verifier.analyse([p.text for p in problems], drafts)

        fraction, refine_prompt = cfg.loop.refine_rl_fraction, run.base_world.fmt.refine_prompt
        return refining_source(run.source_for(tag), fraction, draft, analyse, refine_prompt)

    return for_tag


def recheck_judges(run: Run) -> None:
    """The cold start's check again, on the generator its RL has just moved (``loop.judge_round_extends``):
    below the bar the judge trains on the cold start's mix, with problems and streams of its own,
    before scaled verification and the round's evaluation use it."""
    lc, r = run.cfg.loop, run.state.round
    if lc.judge_val_f1 is None or lc.judge_round_extends == 0:
        return
    batches = cold_start_batches(run, seed_pool(run), tag="judge-recheck")
    # The round's judge SFT steps so far: the cold start's with its extensions (none where it was not
    # checked: a cold start given by init_from), or the auto-label SFT's.
    cold = lc.judge_sft_steps + run.state.figures.get("judge_sft_extends", 0) * lc.judge_extend_steps
    done = lc.auto_sft_steps if r > 0 else cold
    checks, extends = check_judges(
        run,
        batches,
        done,
        lc.judge_round_extends,
        draw=f"judge_recheck_{r}",
        log="judge_recheck",
        stream_prefix="judge_recheck/",
        round=float(r),
    )
    run.state.round_check = {"judge_recheck_f1": min(checks.values()), "judge_recheck_extends": extends}


def scaled_labels(run: Run) -> None:
    """Scaled verification of fresh generator samples: the next round's auto-labels (or, with
    ``loop.labels=truth``, ground-truth labels of the same samples)."""
    cfg, lc, r = run.cfg, run.cfg.loop, run.state.round
    judges = run.judges
    problems = run.task.train_problems(
        lc.scaled_samples, seed=cfg.seed, tag=f"scaled-{r}", exclude=run.exclude
    )
    samples = generate_samples(
        cfg, judges.world, run.generator, problems, seed=stream_seed(cfg.seed, "scaled_samples", r)
    )
    auto, stats = scaled_verification(
        cfg,
        judges.world,
        judges.verifier,
        judges.meta,
        problems,
        samples,
        seed=stream_seed(cfg.seed, "scaled_verification", r),
    )
    if lc.labels == "truth":
        auto = [truth_labelled(judges.world, p, s) for p, s in zip(problems, samples, strict=True)]
    run.state.auto = [labelled_to_json(it) for it in auto]
    run.state.scaled_stats = stats


def evaluate_round(run: Run) -> None:
    """The round's figures against ground truth: the judges', the generator's; logged, never trained on."""
    cfg, r, judges = run.cfg, run.state.round, run.judges
    figures = {
        "round": r,
        **run.state.round_check,
        **run.state.scaled_stats,
        **evaluate_judges(cfg, judges.world, run.generator, judges.verifier, judges.meta, run.heldout, r),
    }
    gen = run.evaluate()
    figures |= {"generator_accuracy": gen["accuracy"], "valid_solution_rate": gen["valid_solution_rate"]}
    run.tracker.log("eval", (r + 1) * rounds_share(cfg), gen)
    run.tracker.log("round", r + 1, figures)
    run.state.rounds.append(figures)


# The phase order, written once: the driver runs it and a checkpoint names where in it to resume.
PHASES: list[tuple[str, Callable[[Run], None]]] = [
    ("cold_start", generator_cold_start),
    ("judges", judge_cold_start),
]
ROUND_PHASES: list[tuple[str, Callable[[Run], None]]] = [
    ("verifier", train_judges),
    ("generator", train_generator),
    ("recheck", recheck_judges),
    ("scaled", scaled_labels),
    ("eval", evaluate_round),
]


def schedule(rounds: int) -> list[tuple[int, str, Callable[[Run], None]]]:
    """(round, phase name, phase) in running order (the driver saves "done" after the last)."""
    once = [(0, name, fn) for name, fn in PHASES]
    return once + [(r, name, fn) for r in range(rounds) for name, fn in ROUND_PHASES]


def run(cfg: Config, run_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the loop; returns the summary written to ``summary.json``."""
    run_dir = run_dir.resolve()  # workers in other processes (backend=ray) write checkpoints here
    clock = time.time()
    recover(run_dir / "checkpoints" / "latest")
    roles = ("generator", "judge", "meta") if meta_of_its_own(cfg) else ("generator", "judge")
    backend = make_backend(cfg.backend, cfg.threads, cfg.train, cfg.rollout, roles=roles)
    try:
        loop = start(cfg, run_dir, backend, clock, progress)
        steps = schedule(cfg.loop.rounds)
        at = next(
            (i for i, (r, name, _) in enumerate(steps) if (r, name) == (loop.state.round, loop.state.phase)),
            len(steps),
        )
        for i in range(at, len(steps)):
            r, name, phase = steps[i]
            if name != "cold_start":
                spawn_judges(loop)
            phase(loop)
            following = steps[i + 1] if i + 1 < len(steps) else (cfg.loop.rounds, "done", None)
            loop.save(following[1], round=following[0])
        return finish(loop)
    finally:
        backend.shutdown()


def start(cfg: Config, run_dir: Path, backend: Backend, clock: float, progress: bool) -> Run:
    """The run's workers and state: resumed from ``checkpoints/latest``, started from a loop's cold
    start (``init_from``, a loop.rounds=0 run) or from a given policy, or fresh."""
    ckpt, fmt_name, specs = run_dir / "checkpoints", judge_format_name(cfg), model_specs(cfg)

    def spawn_saved(bundle: Path) -> dict[str, LMWorker]:
        names = sorted(p.name for p in bundle.iterdir() if p.is_dir())
        return {name: backend.spawn(name, specs[name], cfg.seed, path=bundle / name) for name in names}

    if (ckpt / "latest").exists():
        state = RunState(**read_state(ckpt / "latest"))
        require_version(make_format(fmt_name), state.judge_format, str(ckpt / "latest"))
        workers = spawn_saved(ckpt / "latest")
    elif cfg.init_from is not None and (Path(cfg.init_from) / "judge").is_dir():
        # A loop's cold start (a run with loop.rounds=0): generator, judge and seed pool, so the rounds
        # start at once. Studies share one per seed across reward modes.
        state = RunState(**read_state(Path(cfg.init_from)))
        require_version(make_format(fmt_name), state.judge_format, str(cfg.init_from))
        if (state.phase, state.round) not in (("verifier", 0), ("done", 0)):
            raise CheckpointError(
                f"init_from={cfg.init_from}: not a checkpoint taken right after the judge cold start"
            )
        state = dataclasses.replace(state, phase="verifier", lines=0, rounds=[], wall=0.0, phase_seconds={})
        workers = spawn_saved(Path(cfg.init_from))
    else:  # init_from, an HF model directory: a given cold-started policy (no SFT)
        workers = {"generator": backend.spawn("generator", cfg.model, cfg.seed, path=cfg.init_from)}
        fmt = make_format(fmt_name)  # the judge's analyses' format: checked when loaded
        state = RunState(judge_format={"format": fmt.name, "format_version": fmt.version})
    tracker = Tracker(run_dir, cfg, keep=state.lines)
    prompter = chat_prompter(workers["generator"].get_tokenizer(), cfg.model)
    task = make_task(cfg.task, prompter)
    heldout = task.heldout(cfg.task.n_heldout, cfg.seed)
    fmt = make_format(fmt_name, task, prompter)  # the generator's: its refinement prompts are the generator's
    base = World(task, fmt, fmt)
    return Run(
        cfg, run_dir, backend, workers, task, heldout, set(heldout), base, tracker, state, progress, clock
    )


def spawn_judges(run: Run) -> None:
    """The judge (and a meta-verifier of its own) once the generator is cold-started: by default copies
    of it as saved, or models of their own (``loop.judge_model``, ``loop.meta_model``)."""
    if run.judges is not None:
        return
    cfg, lc, workers = run.cfg, run.cfg.loop, run.workers
    specs = model_specs(cfg)
    if "judge" not in workers:
        copied = run.ckpt / "latest" / "generator" if lc.judge_model.path is None else None
        workers["judge"] = run.backend.spawn("judge", specs["judge"], cfg.seed, path=copied)
        if meta_of_its_own(cfg):
            start_meta = copied if lc.meta_model.path is None else None
            workers["meta"] = run.backend.spawn("meta", specs["meta"], cfg.seed, path=start_meta)
    # By default one judge model is both the verifier (prompts ending ``#V``) and the meta-verifier
    # (``#M``), as in DeepSeekMath-V2, whose final verifier also meta-verifies: checking an analysis
    # needs the same skill as writing one, and one model trains once.
    meta_name = "meta" if "meta" in workers else "judge"
    fmt_name = judge_format_name(cfg)
    world = World(
        run.task,
        make_format(fmt_name, run.task, chat_prompter(workers["judge"].get_tokenizer(), specs["judge"])),
        make_format(fmt_name, run.task, chat_prompter(workers[meta_name].get_tokenizer(), specs["meta"])),
    )
    judge_kw = {"max_new_tokens": lc.judge_max_new_tokens, "batch_size": lc.judge_batch_size}
    verifier = GenerativeVerifier(workers["judge"], fmt=world.fmt, **judge_kw)
    meta = MetaVerifier(workers[meta_name], fmt=world.meta_fmt, **judge_kw)
    # Who learns from which examples: one judge learns both kinds; a meta-verifier of its own, "meta"
    # (loop.meta_apart: each judge learns both kinds, from a draw of its own).
    apart = meta_name == "meta"
    trainees: dict[str, LMJudge] = {"judge_sft": verifier} | ({"meta_sft": meta} if apart else {})
    learns = {"verifier": "judge_sft", "meta": "meta_sft" if apart else "judge_sft"}
    # loop.meta_apart: the meta-verifier's check of a step is its own, so it is held to the same bar.
    checked = {"": verifier} | (
        {"meta_": GenerativeVerifier(meta.lm, fmt=world.meta_fmt, **judge_kw)} if lc.meta_apart else {}
    )
    run.judges = Judges(world, verifier, meta, trainees, learns, checked)
    if run.state.phase not in ("cold_start", "judges"):
        settle_audit(run)


def settle_audit(run: Run) -> None:
    """How the meta-verifier audits from now on: ``loop.meta_audit``, or under ``auto`` what the judge
    cold start decided (in the figures)."""
    if run.cfg.loop.meta_audit != "auto":
        run.state.figures["meta_audit"] = run.cfg.loop.meta_audit
    run.judges.meta.blind = run.state.figures.get("meta_audit") == "blind"


def finish(run: Run) -> dict[str, Any]:
    """The judge for ``python -m selfverify.score --verifier <run dir>/judge``, and the summary."""
    state, figures = run.state, run.state.figures
    if "judge" in run.workers:
        spawn_judges(run)
        write_atomically(run.run_dir / "judge", run.judges.verifier.save)
    final = state.rounds[-1] if state.rounds else {}
    figures["final_accuracy"] = final.get("generator_accuracy")
    figures["final_valid_solution_rate"] = final.get("valid_solution_rate")
    figures |= run.generator.rollout_engine_stats()  # rollout.engine=vllm: the generator's syncs, checked
    run.tracker.close()
    summary = dict(figures)
    summary["rounds"] = state.rounds
    summary["wall_seconds"] = state.wall + time.time() - run.clock
    summary["phase_seconds"] = {k: round(v, 1) for k, v in state.phase_seconds.items()}
    return summary


# --- the judges' training pieces -------------------------------------------------------------------


def meta_of_its_own(cfg: Config) -> bool:
    """Whether the meta-verifier is a model of its own (``loop.meta_model``, ``loop.meta_apart``) rather
    than the judge model meta-verifying too."""
    return cfg.loop.meta_model.path is not None or cfg.loop.meta_apart


def rounds_share(cfg: Config) -> int:
    """The generator's RL steps per round (rl.steps split evenly; loop.rounds=0: the cold starts only)."""
    return cfg.rl.steps // max(cfg.loop.rounds, 1)


def seed_pool(run: Run) -> list[Labelled]:
    """The labelled seed pool, analysed by ground truth."""
    world = run.judges.world
    return [truth_labelled(world, problem_from_json(d["problem"]), d["steps"]) for d in run.state.pool]


def judge_sft(
    run: Run,
    batches: Callable[[int, random.Random], list[Example]],
    steps: int,
    lr: float,
    first: int = 0,
    resume_at: int | None = None,
    stream_prefix: str = "",
) -> None:
    """Supervised fine-tuning of the judge (and the meta-verifier) on examples drawn per step; a phase
    that goes on from step ``first`` draws steps of its own. ``resume_at`` (the judge cold start): the
    run is saved every ``checkpoint_every`` steps, and a run saved past ``first`` goes on from the step
    it saved with the optimizers and batch streams saved there. ``stream_prefix``: a prefix of the batch
    streams' names, for a phase whose steps draw streams of their own."""
    cfg, lc, r, judges, state = run.cfg, run.cfg.loop, run.state.round, run.judges, run.state
    start = first if resume_at is None else max(first, resume_at)
    for judge in judges.trainees.values():
        warmup = min(JUDGE_SFT_MAX_WARMUP, steps // JUDGE_SFT_WARMUP_DIVISOR)
        judge.lm.start_sft(lr, warmup_steps=warmup, total_steps=steps, resume=start > first)
    rngs = {
        "judge_sft": random.Random(stream_seed(cfg.seed, stream_prefix + "judge_sft", r, first)),
        "meta_sft_apart": random.Random(stream_seed(cfg.seed, stream_prefix + "meta_sft_apart", r, first)),
    }
    if start > first:
        for name, stream in rngs.items():
            version, internal, gauss = state.streams[name]  # JSON made the tuple a list
            stream.setstate((version, tuple(internal), gauss))
    rng, apart_rng = rngs["judge_sft"], rngs["meta_sft_apart"]
    desc = f"round {r}: judge_sft" if run.state.phase != "judges" else "cold start: judge_sft"
    for step in tqdm(range(start, first + steps), desc=desc, disable=not run.progress):
        if lc.meta_apart:
            draws = {"judge_sft": batches(step, rng), "meta_sft": batches(step, apart_rng)}
        else:  # one draw, shared out by kind
            examples = batches(step, rng)
            draws = {
                phase: [ex for ex in examples if judges.learns[ex[0]] == phase] for phase in judges.trainees
            }
        for phase, judge in judges.trainees.items():
            if not draws[phase]:
                continue
            _, prompts, targets = zip(*draws[phase], strict=True)
            m = judge.lm.sft_step(list(prompts), list(targets))
            run.tracker.log(phase, step + 1, m | {"round": float(r)})
        if resume_at is not None and (step + 1) % cfg.checkpoint_every == 0 and step + 1 < first + steps:
            state.streams = {name: stream.getstate() for name, stream in rngs.items()}
            run.save("judges", step=step + 1)
    for judge in judges.trainees.values():
        judge.lm.end_training()


def meta_example(run: Run, problem: TaskProblem, steps: Sequence[str], rng: random.Random) -> Example:
    """A faithful or an unfaithful analysis of the solution (even odds) and its faithful
    meta-verification (the judge's own analysis, then the meta label)."""
    world = run.judges.world
    fmt = world.fmt
    if rng.random() < 0.5:
        analysis = fmt.reference_analysis(problem, steps)
    else:
        analysis = fmt.unfaithful_analysis(problem, steps, rng)
    target = fmt.meta_reference(problem, steps, analysis)[0]
    return "meta", world.meta_fmt.meta_prompt(problem.text, steps, analysis), target


def judge_examples(
    run: Run, items: Sequence[Labelled], rng: random.Random, meta_source: Sequence[Labelled] | None = None
) -> list[Example]:
    """Per item, a verifier example (its prompt and analysis) or, a share ``judge_meta_fraction`` of
    the time, a meta-verifier example on the item or on a draw from ``meta_source``."""
    out = []
    for it in items:
        if rng.random() < run.cfg.loop.judge_meta_fraction:
            src = rng.choice(meta_source) if meta_source else it
            out.append(meta_example(run, src.problem, src.steps, rng))
        else:
            out.append(("verifier", it.prompt, it.analysis))
    return out


def cold_start_batches(
    run: Run, pool: Sequence[Labelled], tag: str = "judge"
) -> Callable[..., list[Example]]:
    """The judge cold start's batches. Each: solutions from the labelled pool, and fresh synthetic ones
    (the reference, or the reference with one injected error: unlimited labelled data, so the judge
    learns to check a step instead of memorising the pool); each solution becomes a verifier example
    (its faithful analysis) or a meta-verifier example (a faithful or unfaithful analysis, labelled).
    ``pool``: the labelled seed pool (``seed_pool``), labelled once by the caller; ``tag``: the fresh
    problems' (a step's: ``<tag>-<round>-<step>``)."""
    cfg, lc, task, world = run.cfg, run.cfg.loop, run.task, run.judges.world

    def batch(step: int, rng: random.Random, size: int | None = None) -> list[Example]:
        size = lc.judge_sft_batch_size if size is None else size
        n_syn = round(size * lc.judge_synthetic_fraction)
        fresh = task.train_problems(
            n_syn, seed=cfg.seed, tag=f"{tag}-{run.state.round}-{step}", exclude=run.exclude
        )
        synthetic = [
            task.synthetic_solution(p, rng, SYNTHETIC_CORRECT_FRACTION, lc.judge_error_weights) for p in fresh
        ]
        items = [truth_labelled(world, p, steps) for p, (_, steps) in zip(fresh, synthetic, strict=True)]
        items += rng.sample(pool, min(len(pool), size - n_syn))
        return judge_examples(run, items, rng)

    return batch


def judge_check(
    run: Run,
    log: str,
    extends: int,
    problems: list[TaskProblem],
    samples: list[tuple[str, ...]],
    **extra: float,
) -> dict[str, float]:
    """Per judge checked (prefix "" the verifier, "meta_" a meta-verifier apart, as a verifier): its F1
    on the check's samples (where they hold one kind of sample only, right or wrong, its accuracy on
    that kind). The figures, the wrong samples it locates by kind of error (``located_by_kind``) and
    ``extra`` are logged as phase ``log``, step ``extends``."""
    row: dict[str, float | None] = {}
    for prefix, judge in run.judges.checked.items():
        verdicts, truth, pb = verifier_metrics(run.judges.world, judge, problems, samples)
        row |= {prefix + k: pb[k] for k in JUDGE_CHECK_FIGURES}
        located = located_by_kind(run.task, problems, verdicts, truth)
        row |= {prefix + k: v for k, v in located.items()}
    run.tracker.log(log, extends, row | extra)
    return {
        pre: next(row[pre + k] for k in JUDGE_CHECK_FIGURES if row[pre + k] is not None)
        for pre in run.judges.checked
    }


def meta_items(run: Run, items: Sequence[Labelled], seed: int) -> list[MetaItem]:
    """Per labelled sample: the verifier's sampled analysis, the faithful analysis and an unfaithful
    one, each with its ground-truth meta label (all three classes present from the start)."""
    world = run.judges.world
    analyses = run.judges.verifier.generate([it.prompt for it in items], greedy=False, seed=seed)
    rng = random.Random(seed)
    out = []
    for it, text in zip(items, analyses, strict=True):
        for analysis in (text.strip(), it.analysis, world.fmt.unfaithful_analysis(it.problem, it.steps, rng)):
            out.append(meta_item(world, it.problem, it.steps, analysis))
    return out


def judge_rl(
    run: Run, judge: LMJudge, items: Sequence[Any], reward_fn: RewardFn, steps: int, tag: str
) -> None:
    """RL of a judge on ``items`` with its own objective (``loop.judge_advantage``,
    ``loop.judge_policy_loss``); its other settings come from ``rl``, without the generator-only ones
    (dynamic sampling, overlong shaping, value pretraining, the positive-example LM loss)."""
    if steps == 0 or not items:
        return
    cfg, lc, r = run.cfg, run.cfg.loop, run.state.round
    jcfg = dataclasses.replace(
        cfg.rl,
        advantage=lc.judge_advantage,
        policy_loss=lc.judge_policy_loss,
        prompts_per_step=lc.judge_prompts_per_step,
        group_size=lc.judge_group_size,
        max_new_tokens=lc.judge_max_new_tokens,
        **GENERATOR_ONLY_OFF,
    )
    # rl.kl_coef > 0: the KL penalty to the judge as this phase found it.
    judge.lm.start_rl(lc.judge_rl_lr, reference=jcfg.kl_coef > 0, grad_clip=jcfg.grad_clip)
    pad_id = judge.lm.get_tokenizer().pad_token_id
    rng = random.Random(stream_seed(cfg.seed, f"{tag}_rl_batches", r))
    for step in tqdm(range(steps), desc=f"round {r}: {tag} RL", disable=not run.progress):
        batch = rng.sample(list(items), min(len(items), lc.judge_prompts_per_step))
        m = rl_step(
            judge.lm,
            pad_id,
            jcfg,
            lambda _r, b=batch: b,
            reward_fn,
            stream_seed(cfg.seed, f"{tag}_rl", r, step),
        )
        run.tracker.log(f"{tag}_rl", r * steps + step + 1, m)
    judge.lm.end_training()
