"""The LM judges (DeepSeekMath-V2, 2025): a causal LM as the verifier and the meta-verifier, behind a
judge format (``compact_judge`` for the embedded world, ``prose_judge`` for natural language; both the
``JudgeFormat`` protocol of ``selfverify.judges.base``), and the scaled-verification rule that turns
their analyses into auto-labels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from selfverify.config.schema import ModelSpec
from selfverify.judges.base import JudgeFormat, Verdict, VerifyInput
from selfverify.judges.compact_judge import CompactFormat, require_format
from selfverify.judges.prose_judge import VERSION as PROSE_VERSION
from selfverify.judges.prose_judge import ProseFormat
from selfverify.runtime.checkpoint import CheckpointError
from selfverify.runtime.models import DTYPES, chat_prompter
from selfverify.runtime.workers import LMWorker, build
from selfverify.tasks.base import Prompter, Task
from selfverify.utils.io import atomic_write_json


def verdict_agreement(own: Verdict, audited: Verdict) -> float:
    """A blind audit's score: how far the audited analysis agrees with the auditor's own analysis of the
    same solution, scored as :func:`meta_label` scores it against the truth (half for the step it names,
    half for its score); 0 when either does not parse, as an unparsable meta-verification scores 0."""
    if not (own.parsed and audited.parsed):
        return 0.0
    return ((own.earliest_error == audited.earliest_error) + (own.score == audited.score)) / 2


@dataclass(frozen=True)
class ScaledLabel:
    """Outcome of scaled verification for one solution: a score label, or discarded (None)."""

    score: float | None
    analysis: str | None  # the analysis that carries the label (verifier training target)


def scaled_verification_label(
    analyses: Sequence[Verdict], meta_scores: Sequence[Sequence[float]], k: int
) -> ScaledLabel:
    """DeepSeekMath-V2's auto-labelling rule (docs/guides/architecture.md, 'Scaled verification').

    ``analyses``: n independent verifier analyses of one solution; ``meta_scores[i]``: m meta-verifier
    scores of analysis i. An analysis that reports an issue (score < 1) is *valid* when a strict
    majority of its meta scores confirm it (score 1). If no analysis reports an issue the label is 1;
    if at least ``k`` valid analyses agree on the lowest score among the valid ones, that score is the
    label; otherwise the solution is discarded. Unparsable analyses are ignored.
    """
    parsed = [(a, ms) for a, ms in zip(analyses, meta_scores, strict=True) if a.parsed]
    issues = [(a, ms) for a, ms in parsed if a.score < 1.0]
    if parsed and not issues:
        return ScaledLabel(1.0, parsed[0][0].analysis)
    valid = [a for a, ms in issues if sum(s == 1.0 for s in ms) * 2 > len(ms)]
    if not valid:
        return ScaledLabel(None, None)
    lowest = min(a.score for a in valid)
    agreeing = [a for a in valid if a.score == lowest]
    return ScaledLabel(lowest, agreeing[0].analysis) if len(agreeing) >= k else ScaledLabel(None, None)


FORMATS = ("compact", "prose")


def make_format(name: str, task: Task | None = None, prompter: Prompter | None = None) -> JudgeFormat:
    """The judge format ``name``: ``compact`` (the embedded world) or ``prose`` (natural language,
    its prompts through ``prompter``, the judge's chat template)."""
    if name == "compact":
        return CompactFormat()
    if name == "prose":
        return ProseFormat(task, prompter or (lambda text: text))
    raise ValueError(f"unknown judge format {name!r}; known: {', '.join(FORMATS)}")


def require_version(fmt: JudgeFormat, manifest: dict, where: str) -> None:
    """Refuse a judge trained under another format or version: its outputs would be misread."""
    name, version = manifest.get("format", "compact"), manifest.get("format_version")
    if fmt.name == "compact" and name == "compact":
        require_format(version, where)
    elif (name, version) != (fmt.name, fmt.version):
        raise CheckpointError(
            f"{where}: a judge of format {name} version {version}; this run reads {fmt.name} version "
            f"{fmt.version}: retrain it or choose loop.judge_format={name}"
        )


@dataclass
class LMJudge:
    """A causal LM (a worker, ``selfverify.runtime.workers``: in this process or a Ray actor) that continues
    verifier or meta-verifier prompts of a judge format, batched."""

    lm: LMWorker
    max_new_tokens: int = 80
    batch_size: int = 256
    fmt: JudgeFormat = field(default_factory=CompactFormat)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        greedy: bool = True,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        return self.lm.generate_texts(
            list(prompts),
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            greedy=greedy,
            temperature=temperature,
            seed=seed,
        )

    def analyse(
        self,
        problem_texts: Sequence[str],
        steps: Sequence[Sequence[str]],
        *,
        greedy: bool = True,
        seed: int | None = None,
    ) -> list[Verdict]:
        """One analysis of each solution, prompted as the verifier is (``Verdict.analysis`` holds the
        text as written)."""
        prompts = [self.fmt.verifier_prompt(q, s) for q, s in zip(problem_texts, steps, strict=True)]
        texts = self.generate(prompts, greedy=greedy, seed=seed)
        return [self.fmt.parse_analysis(t, len(s)) for t, s in zip(texts, steps, strict=True)]


class GenerativeVerifier(LMJudge):
    """The verifier interface over an LM that writes analyses in its judge format."""

    name = "generative"
    kind = "generative"

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        return self.analyse([it.problem for it in items], [it.steps for it in items])

    def save(self, path: Path) -> None:
        """An HF model directory plus ``verifier.json``; ``load_verifier(path)`` reads it back."""
        self.lm.save(path)
        manifest = {
            "kind": self.kind,
            "max_new_tokens": self.max_new_tokens,
            "format": self.fmt.name,
            "format_version": self.fmt.version,
        }
        atomic_write_json(path / "verifier.json", manifest)

    @classmethod
    def from_pretrained(
        cls, path: Path, *, device: str = "cpu", dtype: str = "float32", **kwargs: object
    ) -> GenerativeVerifier:
        """A saved judge, or any Hugging Face instruct model (no ``verifier.json``) as a prompted judge
        in the prose format, on ``device`` in ``dtype`` (float32 or bfloat16)."""
        if dtype not in DTYPES:
            raise CheckpointError(f"judge {path}: dtype {dtype!r} is not one of {list(DTYPES)}")
        lm = build(ModelSpec(device=device, dtype=dtype), seed=0, path=path)
        manifest_path = Path(path) / "verifier.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"format": "prose"}
        if manifest.get("format") == "prose":
            manifest.setdefault("format_version", PROSE_VERSION)
        prompter = chat_prompter(lm.tokenizer, ModelSpec())
        fmt = make_format(manifest.get("format", "compact"), prompter=prompter)
        require_version(fmt, manifest, str(path))
        default_tokens = 80 if fmt.name == "compact" else 256
        kwargs.setdefault("max_new_tokens", manifest.get("max_new_tokens", default_tokens))
        return cls(lm, fmt=fmt, **kwargs)


@dataclass
class MetaVerifier(LMJudge):
    """Scores whether an analysis of a solution is faithful, in its judge format: prompted with the
    analysis (its meta-verifier prompt), or ``blind``: it analyses the solution itself, as a verifier,
    without seeing the analysis, which is then scored by :func:`verdict_agreement` with its own. A blind
    auditor that is the verifier's own model would confirm every analysis that model writes greedily;
    it needs a model of its own (``loop.meta_audit``)."""

    blind: bool = False

    def judge(
        self,
        prompts: Sequence[str],
        *,
        greedy: bool = True,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[tuple[float, bool]]:
        texts = self.generate(prompts, greedy=greedy, temperature=temperature, seed=seed)
        return [self.fmt.parse_meta(t) for t in texts]

    def meta_verify(
        self,
        problem_texts: Sequence[str],
        steps: Sequence[Sequence[str]],
        analyses: Sequence[str],
        *,
        greedy: bool = True,
        seed: int | None = None,
    ) -> list[tuple[float, bool]]:
        """(meta score, parsed) of each analysis of a solution, prompted in this judge's format (blind:
        parsed is whether its own analysis parses)."""
        if self.blind:
            own = self.analyse(problem_texts, steps, greedy=greedy, seed=seed)
            audited = [self.fmt.parse_analysis(a, len(s)) for a, s in zip(analyses, steps, strict=True)]
            return [(verdict_agreement(o, a), o.parsed) for o, a in zip(own, audited, strict=True)]
        prompts = [
            self.fmt.meta_prompt(q, s, a) for q, s, a in zip(problem_texts, steps, analyses, strict=True)
        ]
        return self.judge(prompts, greedy=greedy, seed=seed)
