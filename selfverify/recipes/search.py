"""Test-time search with a self-verifier (DeepSeekMath-V2, 2025, §3.3; docs/guides/solve.md).

Five methods over the same problems, so they compare at equal generated tokens:

- ``greedy``: one greedy decode.
- ``majority``: N samples; the most frequent final answer wins (self-consistency, Wang et al. 2023).
- ``best_of_n``: N samples, each verified n times; the best mean verification score wins.
- ``self_refine``: N chains; each solution is judged by the generator itself (the self-evaluation a
  ``reward.mode=self_verify`` generator writes after its solution, else the verifier prompt put to the
  generator), and revised from that analysis until it scores itself 1 or R rounds; the best self-score
  wins (the paper's sequential refinement and Best@K).
- ``search``: the paper's pool: N candidates × n verifications; analyses that report an issue are
  meta-verified m times and kept only when a strict majority confirms them (the auto-labelling rule,
  ``judges.generative.scaled_verification_label``); each round the best candidates with issues are
  refined with their confirmed analyses (score 0 first), the revisions verified and added to the pool;
  it stops when a candidate passes all n verifications, or after R rounds.

A candidate's score is the mean of its kept analyses (unparsed ones and issues the meta-verifier did
not confirm are dropped; none kept: 0). ``best_of_n`` and ``search`` pick as the paper aggregates
(:func:`choose`): among the candidates that pass (``search``: every verification scored 1) or else
share the best score, the answer most of them agree on wins, not the shortest candidate. Every model
call is batched across the problems solved together, and every generated token is counted by role
(generator, verifier, meta-verifier).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from selfverify.config.schema import SolveConfig
from selfverify.judges.base import JudgeFormat
from selfverify.runtime.textgen import Completion, TextModel
from selfverify.tasks.base import Task, TaskProblem
from selfverify.utils.seeds import stream_seed


@dataclass
class Analysis:
    """One verification of a candidate: its text, its score (None: it did not parse), the meta scores
    it got and whether they confirm it (None: not meta-verified)."""

    text: str
    score: float | None
    round: int
    meta: list[float] = field(default_factory=list)
    confirmed: bool | None = None

    @property
    def kept(self) -> bool:
        return self.score is not None and self.confirmed is not False

    @property
    def issue(self) -> bool:
        """It reports an issue the meta-verifier did not reject: what a refinement is shown."""
        return self.score is not None and self.score < 1.0 and self.confirmed is not False


@dataclass
class Candidate:
    id: int
    round: int
    parent: int | None
    solution: str
    tokens: int
    answer: str | None
    correct: bool | None
    self_analysis: str | None = None  # self_refine: the generator's own analysis
    self_score: float | None = None
    analyses: list[Analysis] = field(default_factory=list)
    refined: bool = False

    @property
    def score(self) -> float:
        kept = [a.score for a in self.analyses if a.kept]
        return sum(kept) / len(kept) if kept else 0.0  # type: ignore[arg-type]

    def passes(self, n: int) -> bool:
        """Every one of its n verifications parsed and scored it 1."""
        return len(self.analyses) >= n and all(a.score == 1.0 for a in self.analyses)


@dataclass
class Attempt:
    """One problem's search: its candidates, the tokens each role generated, the failures counted."""

    problem: TaskProblem
    candidates: list[Candidate] = field(default_factory=list)
    tokens: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    rounds: int = 0
    chosen: Candidate | None = None


def wins_by_score(c: Candidate) -> tuple[float, int, int]:
    """The order in which ``search`` refines candidates: the best score first, then the cheaper."""
    return (-c.score, c.tokens, c.id)


def choose(candidates: Sequence[Candidate], verifications: int | None = None) -> Candidate:
    """DeepSeekMath-V2's aggregation: the candidates that pass all ``verifications`` (None: none is
    asked to), else those that share the best score, vote with their answers; the answer most of them
    give wins (ties: the answer all candidates giving it score more for, then the earlier), and its
    earliest candidate is chosen. Agreement among verified candidates decides, not their length."""
    pool = [c for c in candidates if verifications is not None and c.passes(verifications)]
    if not pool:
        best = max(c.score for c in candidates)
        pool = [c for c in candidates if c.score == best]
    votes = Counter(c.answer for c in pool if c.answer is not None)
    if not votes:
        return pool[0]
    support: Counter = Counter()
    for c in candidates:
        if c.answer is not None:
            support[c.answer] += c.score
    answer = max(votes, key=lambda x: (votes[x], support[x]))  # max keeps the first of equals
    return next(c for c in pool if c.answer == answer)


@dataclass
class Solver:
    """The methods over a task, a judge format and the models of the three roles."""

    task: Task
    fmt: JudgeFormat  # the judge's: verifier and meta-verifier prompts and parsers
    refine_fmt: JudgeFormat  # the generator's: its refinement prompts (its own chat template)
    generator: TextModel
    verifier: TextModel
    meta: TextModel
    cfg: SolveConfig
    solution_tokens: int
    analysis_tokens: int
    seed: int
    self_verifying: bool  # the generator writes its own analysis after its solution
    batch: int = 0  # the batch of problems of the run being solved: every draw is keyed by it

    def solve(self, problems: Sequence[TaskProblem], batch: int) -> list[Attempt]:
        """Solve ``problems`` together (batch ``batch`` of the run)."""
        attempts = [Attempt(p) for p in problems]
        METHODS[self.cfg.method](replace(self, batch=batch), attempts)
        return attempts

    # --- the methods ------------------------------------------------------------------------------
    def greedy(self, attempts: list[Attempt]) -> None:
        self._sample(attempts, 1, greedy=True)
        for a in attempts:
            a.chosen = a.candidates[0]

    def majority(self, attempts: list[Attempt]) -> None:
        self._sample(attempts, self.cfg.candidates)
        for a in attempts:
            votes = Counter(c.answer for c in a.candidates if c.answer is not None)
            if not votes:
                a.chosen = a.candidates[0]
                continue
            top = max(votes.values())
            a.chosen = next(c for c in a.candidates if c.answer is not None and votes[c.answer] == top)

    def best_of_n(self, attempts: list[Attempt]) -> None:
        self._sample(attempts, self.cfg.candidates)
        self._verify([(a, c) for a in attempts for c in a.candidates], round=0)
        for a in attempts:
            a.chosen = choose(a.candidates)

    def self_refine(self, attempts: list[Attempt]) -> None:
        self._sample(attempts, self.cfg.candidates)
        chains = [(a, c) for a in attempts for c in a.candidates]
        self._self_evaluate(chains, round=0)
        for r in range(1, self.cfg.rounds + 1):
            chains = [(a, c) for a, c in chains if c.self_score is not None and c.self_score < 1.0]
            if not chains:
                break
            chains = self._refine([(a, c, [c.self_analysis or ""]) for a, c in chains], round=r)
            self._self_evaluate(chains, round=r)
            for a in {id(a): a for a, _ in chains}.values():
                a.rounds = r
        for a in attempts:  # the best self-score; ties: the latest revision, then fewer tokens
            a.chosen = min(a.candidates, key=lambda c: (-(c.self_score or 0.0), -c.round, c.tokens, c.id))

    def search(self, attempts: list[Attempt]) -> None:
        n = self.cfg.verifications
        self._sample(attempts, self.cfg.candidates)
        self._verify([(a, c) for a in attempts for c in a.candidates], round=0)
        self._meta_verify([(a, c) for a in attempts for c in a.candidates], round=0)
        for r in range(1, self.cfg.rounds + 1):
            open_ = [a for a in attempts if not any(c.passes(n) for c in a.candidates)]
            jobs = []
            for a in open_:
                ranked = sorted(
                    (c for c in a.candidates if not c.refined and any(x.issue for x in c.analyses)),
                    key=wins_by_score,
                )
                for c in ranked[: self.cfg.refine_top]:
                    c.refined = True
                    issues = sorted((x for x in c.analyses if x.issue), key=lambda x: x.score)
                    jobs.append((a, c, [x.text for x in issues[: self.cfg.analyses_per_refine]]))
            if not jobs:
                break
            new = self._refine(jobs, round=r)
            self._verify(new, round=r)
            self._meta_verify(new, round=r)
            for a in {id(a): a for a, _ in new}.values():
                a.rounds = r
        for a in attempts:
            a.chosen = choose(a.candidates, n)

    # --- the stages: each one batched call per role -----------------------------------------------
    def _seed(self, stage: str, round: int) -> int:
        return stream_seed(self.seed, f"solve-{stage}", round, self.batch)

    def _complete(
        self,
        model: TextModel,
        role: str,
        prompts: list[str],
        *,
        tokens: int,
        temperature: float,
        greedy: bool,
        stage: str,
        round: int,
        owners: list[Attempt],
    ) -> list[Completion]:
        out = model.complete(
            prompts,
            max_new_tokens=tokens,
            greedy=greedy,
            temperature=temperature,
            seed=self._seed(stage, round),
        )
        for owner, c in zip(owners, out, strict=True):
            owner.tokens[role] += c.tokens
            if c.error is not None:
                owner.failures[f"{role}_errors"] += 1
        return out

    def _candidate(self, a: Attempt, text: str, tokens: int, round: int, parent: int | None) -> Candidate:
        solution, own = self.fmt.split_self_evaluation(text) if self.self_verifying else (text.strip(), None)
        check = self.task.check(a.problem, solution)
        if check.answer is None:
            a.failures["no_answer"] += 1
        c = Candidate(
            len(a.candidates),
            round,
            parent,
            solution,
            tokens,
            None if check.answer is None else str(check.answer),
            check.correct if _has_reference(a.problem) else None,
            self_analysis=own,
        )
        a.candidates.append(c)
        return c

    def _sample(self, attempts: list[Attempt], k: int, greedy: bool = False) -> None:
        owners = [a for a in attempts for _ in range(k)]
        out = self._complete(
            self.generator,
            "generator",
            [a.problem.prompt for a in owners],
            tokens=self.solution_tokens,
            temperature=self.cfg.temperature,
            greedy=greedy,
            stage="sample",
            round=0,
            owners=owners,
        )
        for a, c in zip(owners, out, strict=True):
            self._candidate(a, c.text, c.tokens, 0, None)

    def _refine(
        self, jobs: list[tuple[Attempt, Candidate, list[str]]], round: int
    ) -> list[tuple[Attempt, Candidate]]:
        prompts = [
            self.refine_fmt.refine_prompt(a.problem.text, self.task.split_steps(c.solution), shown)
            for a, c, shown in jobs
        ]
        owners = [a for a, _, _ in jobs]
        out = self._complete(
            self.generator,
            "generator",
            prompts,
            tokens=self.solution_tokens,
            temperature=self.cfg.temperature,
            greedy=False,
            stage="refine",
            round=round,
            owners=owners,
        )
        return [
            (a, self._candidate(a, o.text, o.tokens, round, c.id))
            for (a, c, _), o in zip(jobs, out, strict=True)
        ]

    def _verify(self, items: list[tuple[Attempt, Candidate]], round: int) -> None:
        n = self.cfg.verifications
        jobs = [(a, c) for a, c in items for _ in range(n)]
        prompts = [
            self.fmt.verifier_prompt(a.problem.text, self.task.split_steps(c.solution)) for a, c in jobs
        ]
        out = self._complete(
            self.verifier,
            "verifier",
            prompts,
            tokens=self.analysis_tokens,
            temperature=self.cfg.verify_temperature,
            greedy=n == 1,
            stage="verify",
            round=round,
            owners=[a for a, _ in jobs],
        )
        for (a, c), o in zip(jobs, out, strict=True):
            verdict = self.fmt.parse_analysis(o.text, len(self.task.split_steps(c.solution)))
            if not verdict.parsed:
                a.failures["unparsed_analyses"] += 1
            c.analyses.append(Analysis(o.text, verdict.score if verdict.parsed else None, round))

    def _meta_verify(self, items: list[tuple[Attempt, Candidate]], round: int) -> None:
        """Meta-verify the analyses of this round that report an issue; a strict majority of meta
        scores of 1 confirms one. m = 0: every issue stands."""
        m = self.cfg.meta_verifications
        todo = [
            (a, c, x)
            for a, c in items
            for x in c.analyses
            if x.round == round and x.score is not None and x.score < 1.0
        ]
        if m == 0 or not todo:
            return
        jobs = [(a, c, x) for a, c, x in todo for _ in range(m)]
        prompts = [
            self.fmt.meta_prompt(a.problem.text, self.task.split_steps(c.solution), x.text)
            for a, c, x in jobs
        ]
        out = self._complete(
            self.meta,
            "meta",
            prompts,
            tokens=self.analysis_tokens,
            temperature=self.cfg.verify_temperature,
            greedy=m == 1,
            stage="meta",
            round=round,
            owners=[a for a, _, _ in jobs],
        )
        for (a, _, x), o in zip(jobs, out, strict=True):
            score, parsed = self.fmt.parse_meta(o.text)
            if not parsed:
                a.failures["unparsed_meta"] += 1
            x.meta.append(score)
        for _, _, x in todo:
            x.confirmed = sum(s == 1.0 for s in x.meta) * 2 > len(x.meta)

    def _self_evaluate(self, items: list[tuple[Attempt, Candidate]], round: int) -> None:
        """The generator's own analysis of each candidate: the one it wrote after its solution, else
        the verifier prompt put to it."""
        asked = [(a, c) for a, c in items if c.self_analysis is None]
        if asked:
            prompts = [
                self.fmt.verifier_prompt(a.problem.text, self.task.split_steps(c.solution)) for a, c in asked
            ]
            out = self._complete(
                self.generator,
                "generator",
                prompts,
                tokens=self.analysis_tokens,
                temperature=1.0,
                greedy=True,
                stage="self-evaluate",
                round=round,
                owners=[a for a, _ in asked],
            )
            for (_, c), o in zip(asked, out, strict=True):
                c.self_analysis = o.text
        for a, c in items:
            verdict = self.fmt.parse_analysis(c.self_analysis or "", len(self.task.split_steps(c.solution)))
            if not verdict.parsed:
                a.failures["unparsed_self_analyses"] += 1
            c.self_score = verdict.score if verdict.parsed else None


METHODS: dict[str, Callable[[Solver, list[Attempt]], None]] = {
    "greedy": Solver.greedy,
    "majority": Solver.majority,
    "best_of_n": Solver.best_of_n,
    "self_refine": Solver.self_refine,
    "search": Solver.search,
}


def _has_reference(problem: TaskProblem) -> bool:
    """Whether the problem comes with a reference answer to score against (user problems may not)."""
    return problem.answer not in (None, "")


def record(attempt: Attempt, index: int, id: str, cfg: SolveConfig) -> dict[str, Any]:
    """One output line: the chosen solution, its answer and scores, the tokens by role, the failures,
    and every candidate with its analyses."""
    chosen = attempt.chosen
    assert chosen is not None
    tokens = dict(attempt.tokens)
    return {
        "index": index,
        "id": id,
        "problem": attempt.problem.text,
        "method": cfg.method,
        "n": cfg.candidates,
        "answer": chosen.answer,
        "reference_answer": str(attempt.problem.answer) if _has_reference(attempt.problem) else None,
        "correct": chosen.correct,
        "solution": chosen.solution,
        "score": chosen.score if chosen.analyses else chosen.self_score,
        "candidate": chosen.id,
        "rounds": attempt.rounds,
        "tokens": {
            **{r: tokens.get(r, 0) for r in ("generator", "verifier", "meta")},
            "total": sum(tokens.values()),
        },
        "failures": dict(attempt.failures),
        "candidates": [asdict(c) | {"score": c.score} for c in attempt.candidates],
    }
