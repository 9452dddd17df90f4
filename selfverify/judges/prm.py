"""Discriminative process reward model (PRM): a step-score head on a Hugging Face decoder backbone.

The method is the PRM of Lightman et al. 2023, "Let's Verify Step by Step" (arXiv 2305.20050): a
language model reads the problem and the solution and predicts, at the end of every step, whether
that step is correct, trained with binary cross-entropy on step labels. Math-Shepherd (Wang et al.
2023, arXiv 2312.08935) trains the same architecture; only the source of its labels differs. Here
the labels come from ground truth (the embedded world's step checker) or from ProcessBench-style
records (``label`` = earliest wrong step: the steps before it are correct, it is wrong, the steps
after it carry no label).

Input format (one sequence per solution)::

    <bos> problem \\n step_1 \\n step_2 \\n ... \\n step_n <eos>
                   ^sep      ^s_1      ^s_2          ^s_{n-1}   ^s_n

The score of step i is read from the hidden state of the token that ends it: the newline separator
after it, or the end-of-sequence token after the last step. Ending the last step with ``<eos>``
tells the head that the solution stops there, so it can learn that an unfinished solution is wrong
at its last step, which a causal model reading only a newline could not know. A tokenizer without
an end-of-sequence token ends the last step with a newline too; ``<bos>`` is left out when the
tokenizer has none. Every segment is tokenised on its own and the separator id is inserted between
segments, so a BPE tokenizer cannot merge the newline into a neighbouring token; newlines inside the
problem or a step become spaces, so every separator in the input is a step boundary.

The head is ``Linear(hidden_size, 1)`` on the backbone's last hidden state; the step score is the
sigmoid of its logit, the probability that the step is correct. ``earliest_error`` is the first step
scored below the threshold stored in the checkpoint (default 0.5, chosen on a dev split by
``python -m selfverify.prm_train --threshold-dev``), and the overall score is 1 when no step falls
below it, else 0. A solution with no steps scores 0 (nothing was shown).

Bounded input: a sequence never exceeds ``max_length`` tokens (verifier.json; by default the
backbone's ``max_position_embeddings``, at most 4096). The problem keeps its last ``max_length // 2``
tokens and each step its last ``max_length - 3 - len(problem)`` tokens (the end of a step, where its
result stands, is nearest the score token). When the steps do not fit in one sequence they are split
into windows that each start with the problem again, so every step is scored, with the steps of its
own window as context. ``Verdict.extra`` reports ``{"truncated": True, "windows": k}`` for a record
that lost tokens or needed more than one window (and is empty otherwise).

Checkpoint directory (written under a temporary name and renamed into place)::

    config.json, model.safetensors        the backbone (``AutoModel.from_pretrained`` loads it)
    tokenizer.json, tokenizer_config.json  ``AutoTokenizer.from_pretrained`` loads it
    prm_head.safetensors                   the head: ``weight`` [1, hidden], ``bias`` [1]
    verifier.json                          {"kind": "prm", "threshold", "max_length", "separator", ...}

``load_verifier(DIR)`` (``selfverify.judges.registry``) loads it through :meth:`PRMVerifier.from_pretrained`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from selfverify.judges.base import Verdict, VerifyInput, earliest_error_from_scores, threshold_verdict
from selfverify.judges.metrics import processbench_metrics

KIND = "prm"
MANIFEST = "verifier.json"  # selfverify.judges.registry.CHECKPOINT_MANIFEST (not imported: no cycle)
HEAD_FILE = "prm_head.safetensors"
SEPARATOR = "\n"
DEFAULT_THRESHOLD = 0.5
MAX_DEFAULT_LENGTH = 4096
FORMAT_VERSION = 1

hf_logging.disable_progress_bar()  # a weight-loading bar per checkpoint is noise in the score CLI's output


class PRMModel(nn.Module):
    """A decoder backbone (the base model, without its LM head) and a linear step-score head."""

    def __init__(self, backbone: PreTrainedModel, head: nn.Linear | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head if head is not None else nn.Linear(backbone.config.hidden_size, 1)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states [B, T, H]."""
        return self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits [B, T] of "this token ends a correct step", at every position."""
        return self.head(self.hidden(input_ids, attention_mask)).squeeze(-1)


def base_model(model: PreTrainedModel) -> PreTrainedModel:
    """The decoder of an HF model (``LlamaForCausalLM`` -> ``LlamaModel``); a base model is itself."""
    return model.base_model


def normalize_segment(text: str) -> str:
    """A problem or step as the encoder tokenises it: one line (newlines become spaces), stripped."""
    return text.replace("\r", " ").replace("\n", " ").strip()


@dataclass(frozen=True)
class Window:
    """One encoded sequence: token ids, the positions of its score tokens and the steps they score."""

    record: int
    ids: list[int]
    positions: list[int]
    steps: list[int]
    first: int  # index of the window's first step token (after the problem and its separator)
    cut: bool = False  # the problem or a step lost tokens to the length bound


@dataclass(frozen=True)
class ScoreWindows:
    """Right-padded windows and where their score tokens are."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    rows: torch.Tensor  # [S] window index of each score token
    cols: torch.Tensor  # [S] position of each score token
    records: list[int]  # [S] record index of each score token
    steps: list[int]  # [S] step index (within its record) of each score token


class PRMEncoder:
    """The input format of the module docstring: records -> windows -> padded batches."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
        if max_length < 8:
            raise ValueError(f"max_length must be at least 8, not {max_length}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        sep = tokenizer.encode(SEPARATOR, add_special_tokens=False)
        if not sep:
            raise ValueError("the tokenizer has no token for the newline separator")
        # SentencePiece tokenizers may prefix a word-start piece; the newline itself is the last id.
        self.sep_id = sep[-1]
        self.end_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else self.sep_id
        self.prefix = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.tokenizer([normalize_segment(t) for t in texts], add_special_tokens=False)["input_ids"]

    def encode(self, records: Sequence[tuple[str, Sequence[str]]]) -> list[Window]:
        """Windows for ``(problem, steps)`` records; a record with no steps has none."""
        windows: list[Window] = []
        problems = self._tokenize([problem for problem, _ in records])
        all_steps = self._tokenize([step for _, steps in records for step in steps])
        cursor = 0
        for r, ((_, steps), problem_ids) in enumerate(zip(records, problems, strict=True)):
            step_ids = all_steps[cursor : cursor + len(steps)]
            cursor += len(steps)
            windows.extend(self._windows(r, problem_ids, step_ids))
        return windows

    def _windows(self, record: int, problem_ids: list[int], step_ids: list[list[int]]) -> list[Window]:
        problem_cap = self.max_length // 2
        cut = len(problem_ids) > problem_cap
        head = self.prefix + problem_ids[-problem_cap:] + [self.sep_id]
        step_cap = self.max_length - len(head) - 1  # one step and its end token fit after the head
        out: list[Window] = []
        ids, positions, steps = list(head), [], []
        for i, tokens in enumerate(step_ids):
            if len(tokens) > step_cap:
                tokens, cut = tokens[-step_cap:], True
            if len(ids) + len(tokens) + 1 > self.max_length:
                out.append(Window(record, ids, positions, steps, len(head), cut))
                ids, positions, steps = list(head), [], []
            ids.extend(tokens)
            ids.append(self.end_id if i == len(step_ids) - 1 else self.sep_id)
            positions.append(len(ids) - 1)
            steps.append(i)
        if steps:
            out.append(Window(record, ids, positions, steps, len(head), cut))
        return out

    def collate(self, windows: Sequence[Window], device: torch.device | str = "cpu") -> ScoreWindows:
        width = max(len(w.ids) for w in windows)
        input_ids = torch.full((len(windows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(windows), width), dtype=torch.long)
        rows, cols, records, steps = [], [], [], []
        for b, w in enumerate(windows):
            input_ids[b, : len(w.ids)] = torch.tensor(w.ids)
            attention_mask[b, : len(w.ids)] = 1
            rows.extend([b] * len(w.positions))
            cols.extend(w.positions)
            records.extend([w.record] * len(w.steps))
            steps.extend(w.steps)
        return ScoreWindows(
            input_ids.to(device),
            attention_mask.to(device),
            torch.tensor(rows, dtype=torch.long, device=device),
            torch.tensor(cols, dtype=torch.long, device=device),
            records,
            steps,
        )


def step_logits(model: PRMModel, batch: ScoreWindows) -> torch.Tensor:
    """Logits [S] of the batch's score tokens, in ``batch.records`` / ``batch.steps`` order."""
    return model(batch.input_ids, batch.attention_mask)[batch.rows, batch.cols]


class PRMVerifier:
    """A PRM behind the verifier interface (see the module docstring for format, threshold, limits)."""

    name = "prm"

    def __init__(
        self,
        model: PRMModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        max_length: int | None = None,
        batch_size: int = 64,
        device: str | torch.device | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.threshold = float(threshold)
        if max_length is None:
            max_length = min(int(getattr(model.backbone.config, "max_position_embeddings", 512)), 4096)
        self.encoder = PRMEncoder(tokenizer, max_length)
        self.batch_size = batch_size
        self.meta = dict(meta or {})

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        threshold: float | None = None,
        batch_size: int = 64,
        device: str | torch.device | None = None,
    ) -> PRMVerifier:
        """Load a checkpoint directory; ``threshold`` overrides the stored one."""
        path = Path(path)
        meta = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if meta.get("kind") != KIND:
            raise ValueError(f"{path / MANIFEST}: kind is {meta.get('kind')!r}, not {KIND!r}")
        backbone = AutoModel.from_pretrained(path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
        head = nn.Linear(backbone.config.hidden_size, 1)
        head.load_state_dict(load_file(path / HEAD_FILE))
        return cls(
            PRMModel(backbone, head),
            tokenizer,
            threshold=meta.get("threshold", DEFAULT_THRESHOLD) if threshold is None else threshold,
            max_length=meta.get("max_length"),
            batch_size=batch_size,
            device=device,
            meta=meta,
        )

    def save_pretrained(self, path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
        """Write the checkpoint directory atomically: a temporary sibling, then renamed into place.

        ``extra`` adds keys to verifier.json (e.g. how it was trained).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.model.backbone.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            head = {k: v.detach().cpu().contiguous() for k, v in self.model.head.state_dict().items()}
            save_file(head, tmp / HEAD_FILE)
            self.meta.update(extra or {})
            self.meta.update(
                kind=KIND,
                format_version=FORMAT_VERSION,
                threshold=self.threshold,
                max_length=self.encoder.max_length,
                separator=SEPARATOR,
                head=HEAD_FILE,
            )
            (tmp / MANIFEST).write_text(json.dumps(self.meta, indent=2) + "\n", encoding="utf-8")
            # A directory cannot be renamed over a non-empty one: move the old copy aside first.
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return path

    def score_steps(self, items: Sequence[VerifyInput]) -> list[list[float]]:
        """Per-step probabilities of being correct, one list per item."""
        return self._score(items)[0]

    def _score(self, items: Sequence[VerifyInput]) -> tuple[list[list[float]], list[dict[str, Any]]]:
        """Step scores, and per item the truncation report for ``Verdict.extra`` (empty when none)."""
        scores: list[list[float]] = [[0.0] * len(item.steps) for item in items]
        windows = self.encoder.encode([(item.problem, list(item.steps)) for item in items])
        n_windows, cut = [0] * len(items), [False] * len(items)
        for w in windows:
            n_windows[w.record] += 1
            cut[w.record] |= w.cut
        reports = [
            {"truncated": True, "windows": n} if c or n > 1 else {}
            for n, c in zip(n_windows, cut, strict=True)
        ]
        was_training = self.model.training
        self.model.eval()
        # Similar lengths share a batch, so little compute goes to padding.
        windows.sort(key=lambda w: len(w.ids))
        with torch.inference_mode():
            for start in range(0, len(windows), self.batch_size):
                batch = self.encoder.collate(windows[start : start + self.batch_size], self.device)
                probs = torch.sigmoid(step_logits(self.model, batch).float()).tolist()
                for r, i, p in zip(batch.records, batch.steps, probs, strict=True):
                    scores[r][i] = p
        self.model.train(was_training)
        return scores, reports

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        scores, reports = self._score(items)
        return [
            replace(threshold_verdict(s, self.threshold), extra=extra)
            for s, extra in zip(scores, reports, strict=True)
        ]


def choose_threshold(
    step_scores: Sequence[Sequence[float]], labels: Sequence[int]
) -> tuple[float, dict[str, Any]]:
    """The threshold that maximises ProcessBench F1 of ``earliest_error`` on a labelled dev set.

    A record with label ``y >= 0`` is predicted exactly when ``s_y < t <= min(s_0..s_{y-1})``; one with
    label -1 when ``t <= min(s)``. F1 only changes where ``t`` crosses a step score, so the candidates
    are the midpoints between consecutive distinct scores and the two ends (0: nothing flagged, 1:
    everything flagged). Ties go to the candidate nearest 0.5. With only one kind of record (all
    labelled -1, or none) F1 is undefined and that kind's accuracy is maximised instead. Returns
    ``(threshold, metrics)``.
    """
    if len(step_scores) != len(labels):
        raise ValueError(f"{len(step_scores)} score lists for {len(labels)} labels")
    intervals: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
    for scores, y in zip(step_scores, labels, strict=True):
        if not -1 <= y < len(scores):
            raise ValueError(f"label {y} is out of range for {len(scores)} steps")
        lo = scores[y] if y >= 0 else -np.inf
        hi = min(scores[:y] if y >= 0 else scores, default=np.inf)
        if lo < hi:  # else no threshold predicts this record right
            intervals[y >= 0][0].append(lo)
            intervals[y >= 0][1].append(hi)
    values = np.unique(np.asarray([s for scores in step_scores for s in scores], dtype=float))
    candidates = np.unique(np.concatenate([[0.0, 1.0], (values[1:] + values[:-1]) / 2]))

    def accuracy(is_err: bool) -> np.ndarray:
        n = sum((y >= 0) == is_err for y in labels)
        lo, hi = (np.sort(np.asarray(v, dtype=float)) for v in intervals[is_err])
        # Records with lo < t, less those with hi < t too (lo < hi, so hi < t implies lo < t).
        hits = np.searchsorted(lo, candidates, side="left") - np.searchsorted(hi, candidates, side="left")
        return hits / max(n, 1)

    acc_err, acc_corr = accuracy(True), accuracy(False)
    if all(y >= 0 for y in labels) or all(y == -1 for y in labels):
        objective = acc_err + acc_corr  # F1 is undefined with one subset empty: its accuracy then
    else:
        total = acc_err + acc_corr
        objective = np.divide(2 * acc_err * acc_corr, total, out=np.zeros_like(total), where=total > 0)
    best = np.flatnonzero(objective == objective.max())
    threshold = float(candidates[best[np.argmin(np.abs(candidates[best] - 0.5))]])
    preds = [earliest_error_from_scores(s, threshold) for s in step_scores]
    return threshold, processbench_metrics(preds, list(labels))
