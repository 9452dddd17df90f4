"""The two public conventions for step-level process reward models, behind the verifier interface.

- :class:`MathShepherdPRM` (Wang et al. 2023, "Math-Shepherd", arXiv 2312.08935; hub
  ``peiyi9979/math-shepherd-mistral-7b-prm``): a causal LM. As its model card formats input, the text
  is ``problem + " " + "\\n".join(f"Step {i}: {step} ки")`` (a step that already starts with
  ``Step i:`` keeps it) and the step's score is P("+") from the softmax over the next-token logits of
  the ``+`` and ``-`` tokens (``tokenizer.encode("+ -")`` without special tokens) at each ``ки`` tag.
  Only those two rows of the LM head are applied, to the hidden states at the tags: the full-vocabulary
  logits (32k columns per token for Mistral) are never computed.
- :class:`QwenPRM` (Zhang et al. 2025, "The Lessons of Developing Process Reward Models in
  Mathematical Reasoning", arXiv 2501.07301; hub ``Qwen/Qwen2.5-Math-PRM-7B``): a token-classification
  head with two labels. The conversation (system prompt :data:`QWEN_SYSTEM`, user = problem,
  assistant = each step followed by ``<extra_0>``) goes through the tokenizer's chat template, and the
  step's score is ``softmax(logits)[1]`` at its ``<extra_0>``.

The tag positions are located from the tokenizer's character offsets of the tags this module wrote,
never by searching the ids, so a tag spelled inside a problem or step (Cyrillic text holds ``ки``) is
no step boundary; ``<extra_0>`` written in the input is removed, since it is a special token. A tag that
does not end up as one token of the tag's id is an error. Fast tokenizers only (offsets need them).

Verdict: ``earliest_error`` is the first step scored below ``threshold`` (default 0.5; the score CLI's
``--threshold`` re-derives it), ``score`` is 1 when no step falls below it and 0 otherwise (the 0.5 of
DeepSeekMath-V2's scale is never given; docs/guides/architecture.md, 'Scoring'), and a record with no steps
scores 0.

Bounded input: an encoded record longer than the model's limit (the smaller of the config's
``max_position_embeddings`` and the tokenizer's ``model_max_length``, or ``max_length``) is an error
and never truncated: cutting from the left would drop the problem (and Qwen's chat framing), and the
steps would be scored without their question. :meth:`validate` raises it per record, so the score CLI
skips such a record with its line number (or stops under ``--on-error fail``).

Batching: records sorted by length, ``batch_size`` sequences per forward pass, right padding (the pad
token, else end-of-sequence), so a causal model sees the same positions as unbatched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from selfverify.judges.base import Verdict, VerifyInput, threshold_verdict
from selfverify.judges.registry import VerifierSpecError

GOOD_TOKEN, BAD_TOKEN, STEP_TAG = "+", "-", "ки"
QWEN_SEPARATOR = "<extra_0>"
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULT_THRESHOLD = 0.5
DEFAULT_BATCH_SIZE = 8
FALLBACK_MAX_LENGTH = 4096
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
NUMBERED = re.compile(r"Step \d+:")

hf_logging.disable_progress_bar()  # a weight-loading bar is noise in the score CLI's output


@dataclass(frozen=True)
class Encoded:
    """One record's token ids and the positions whose outputs score its steps."""

    ids: list[int]
    positions: list[int]


def token_indices(offsets: Sequence[tuple[int, int]], ends: Sequence[int]) -> list[int]:
    """For each character offset in ``ends`` (ascending), the token holding the character before it."""
    out, i = [], 0
    for end in ends:
        while i < len(offsets) and not offsets[i][0] < end <= offsets[i][1]:
            i += 1
        if i == len(offsets):
            raise ValueError(f"no token ends at character {end}")
        out.append(i)
    return out


def model_max_length(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int:
    """The longest input both accept; ``model_max_length`` is a 1e30 sentinel when a tokenizer has none."""
    limits = [getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length]
    sane = [int(x) for x in limits if isinstance(x, int) and 0 < x < 10**8]
    return min(sane, default=FALLBACK_MAX_LENGTH)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise VerifierSpecError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def resolve_source(source: str) -> str:
    """A local directory, or a hub name; a path that exists but is no directory, or is no hub name, fails."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise VerifierSpecError(f"{source} is not a directory")
        return str(path)
    if source.startswith((".", "~", "/")) or not HUB_NAME.fullmatch(source):
        raise VerifierSpecError(f"no such directory: {source}")
    return source


def load_checked(auto_class: type, source: str, dtype: torch.dtype, **kwargs: object) -> PreTrainedModel:
    """``auto_class.from_pretrained`` that fails, instead of initialising at random, on missing weights."""
    try:
        model, info = auto_class.from_pretrained(source, dtype=dtype, output_loading_info=True, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        where = "" if Path(source).is_dir() else " (no local directory of that name; tried it as a hub name)"
        raise VerifierSpecError(f"cannot load {source} as {auto_class.__name__}{where}: {exc}") from None
    missing = sorted(info["missing_keys"])
    if missing:
        raise VerifierSpecError(
            f"{source} has no weights for {', '.join(missing[:3])}: not a {auto_class.__name__} checkpoint"
        )
    return model


def load_tokenizer(source: str) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise VerifierSpecError(f"cannot load a tokenizer from {source}: {exc}") from None
    if not tokenizer.is_fast:
        raise VerifierSpecError(f"{source}: a fast tokenizer (tokenizer.json) is needed for token offsets")
    return tokenizer


def single_token(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    """The id of ``text`` as the tokenizer writes it alone: its last token (after any word-start piece)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids or ids[-1] == tokenizer.unk_token_id:
        raise VerifierSpecError(f"the tokenizer has no token for {text!r}")
    return ids[-1]


class StepPRM:
    """What both conventions share: encoding with tag positions, batching, the threshold verdict."""

    name = "step-prm"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        tag_id: int,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.tag_id = tag_id
        self.threshold = float(threshold)
        self.batch_size = batch_size
        self.max_length = max_length or model_max_length(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = 0 if pad is None else pad  # padded positions are masked and never read
        try:  # the tag must survive tokenisation in context, not only alone
            self.tokenize(VerifyInput("1 + 1 = ?", ["1 + 1 = 2.", "The answer is 2."]))
        except ValueError as exc:
            raise VerifierSpecError(str(exc)) from None

    def render(self, item: VerifyInput) -> tuple[str, list[int]]:
        """The model's input text and the character offset where each step's tag ends."""
        raise NotImplementedError

    def tag_probs(
        self, input_ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """P(step correct) [S] at the tag positions ``(rows, cols)`` of a padded batch."""
        raise NotImplementedError

    def encode(self, item: VerifyInput) -> Encoded:
        """Token ids and tag positions; ``ValueError`` when over the length limit or a tag was merged."""
        encoded = self.tokenize(item)
        if len(encoded.ids) > self.max_length:
            raise ValueError(
                f"{self.name}: {len(encoded.ids)} tokens, over the model's limit of {self.max_length} "
                "(not truncated)"
            )
        return encoded

    def tokenize(self, item: VerifyInput) -> Encoded:
        text, ends = self.render(item)
        enc = self.tokenizer(text, return_offsets_mapping=True)
        ids = enc["input_ids"]
        positions = token_indices(enc["offset_mapping"], ends)
        if any(ids[p] != self.tag_id for p in positions):
            tag = self.tokenizer.decode([self.tag_id])
            raise ValueError(f"{self.name}: the step tag {tag!r} is not kept as one token in context")
        return Encoded(ids, positions)

    def validate(self, item: VerifyInput) -> None:
        """Raise ``ValueError`` for a record this model cannot read (the score CLI then skips it)."""
        self.encode(item)

    def step_scores(self, items: Sequence[VerifyInput]) -> list[list[float]]:
        """Per-step P(correct), one list per item."""
        encoded = [self.encode(item) for item in items]
        scores: list[list[float]] = [[] for _ in items]
        # Similar lengths share a batch, so little compute goes to padding.
        order = sorted((i for i, e in enumerate(encoded) if e.positions), key=lambda i: len(encoded[i].ids))
        with torch.no_grad():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                probs = iter(self.tag_probs(*self.collate([encoded[i] for i in chunk])).tolist())
                for i in chunk:
                    scores[i] = [next(probs) for _ in encoded[i].positions]
        return scores

    def collate(self, batch: Sequence[Encoded]) -> tuple[torch.Tensor, ...]:
        """Right-padded ids and mask [B, T], and the (row, column) of every tag."""
        width = max(len(e.ids) for e in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        rows, cols = [], []
        for b, e in enumerate(batch):
            input_ids[b, : len(e.ids)] = torch.tensor(e.ids)
            mask[b, : len(e.ids)] = 1
            rows.extend([b] * len(e.positions))
            cols.extend(e.positions)
        tensors = (input_ids, mask, torch.tensor(rows), torch.tensor(cols))
        return tuple(t.to(self.device) for t in tensors)

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        return [threshold_verdict(s, self.threshold) for s in self.step_scores(items)]


class MathShepherdPRM(StepPRM):
    """Math-Shepherd's convention: P("+") against "-" as the next token at each ``ки`` tag."""

    name = "math-shepherd"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **kwargs: Any) -> None:
        pair = tokenizer.encode(f"{GOOD_TOKEN} {BAD_TOKEN}", add_special_tokens=False)
        if len(pair) != 2 or pair[0] == pair[1] or tokenizer.unk_token_id in pair:
            raise VerifierSpecError(
                f"the tokenizer does not write {GOOD_TOKEN!r} and {BAD_TOKEN!r} as two tokens: {pair}"
            )
        head = model.get_output_embeddings()
        if not isinstance(head, nn.Linear) or head.out_features <= max(pair):
            raise VerifierSpecError(f"{type(model).__name__} has no LM head over the tokenizer's vocabulary")
        super().__init__(model, tokenizer, single_token(tokenizer, STEP_TAG), **kwargs)
        self.pair_weight = head.weight[pair].detach()  # [2, H]: the "+" and "-" rows, on the model's device
        self.pair_bias = None if head.bias is None else head.bias[pair].detach()

    @classmethod
    def from_pretrained(
        cls, source: str, *, dtype: str | torch.dtype = torch.float32, **kwargs: Any
    ) -> MathShepherdPRM:
        """A causal LM and its tokenizer from a local directory or a hub name."""
        source = resolve_source(source)
        model = load_checked(AutoModelForCausalLM, source, resolve_dtype(dtype))
        return cls(model, load_tokenizer(source), **kwargs)

    def render(self, item: VerifyInput) -> tuple[str, list[int]]:
        text, ends = item.problem.strip() + " ", []
        for i, step in enumerate(item.steps, 1):
            step = step.strip()
            numbered = step if NUMBERED.match(step) else f"Step {i}: {step}"
            text += ("\n" if i > 1 else "") + f"{numbered} {STEP_TAG}"
            ends.append(len(text))
        return text, ends

    def tag_probs(
        self, input_ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        logits = hidden[rows, cols] @ self.pair_weight.T  # [S, 2]
        if self.pair_bias is not None:
            logits = logits + self.pair_bias
        return logits.float().softmax(-1)[:, 0]


class QwenPRM(StepPRM):
    """Qwen2.5-Math-PRM's convention: label 1 of a two-label head at each ``<extra_0>`` separator."""

    name = "qwen-prm"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **kwargs: Any) -> None:
        if not tokenizer.chat_template:
            raise VerifierSpecError("the tokenizer has no chat template")
        ids = tokenizer.encode(QWEN_SEPARATOR, add_special_tokens=False)
        if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
            raise VerifierSpecError(f"the tokenizer does not write {QWEN_SEPARATOR!r} as one token: {ids}")
        super().__init__(model, tokenizer, ids[0], **kwargs)

    @classmethod
    def from_pretrained(
        cls, source: str, *, dtype: str | torch.dtype = torch.float32, **kwargs: Any
    ) -> QwenPRM:
        """The published checkpoint ships its own model class (``auto_map`` in its config.json), loaded
        with ``trust_remote_code``; any other directory loads as a plain transformers token classifier,
        which must have two labels. Decided from the config, not by trying the plain class first: that
        would load the published checkpoint with a freshly initialised head."""
        source = resolve_source(source)
        try:
            config, _ = PretrainedConfig.get_config_dict(source)
        except (OSError, ValueError) as exc:
            raise VerifierSpecError(f"cannot read the config of {source}: {exc}") from None
        if "AutoModel" in config.get("auto_map", {}):
            model = load_checked(AutoModel, source, resolve_dtype(dtype), trust_remote_code=True)
        else:
            model = load_checked(AutoModelForTokenClassification, source, resolve_dtype(dtype))
            if model.config.num_labels != 2:
                raise VerifierSpecError(f"{source} has {model.config.num_labels} labels, not 2")
        return cls(model, load_tokenizer(source), **kwargs)

    def render(self, item: VerifyInput) -> tuple[str, list[int]]:
        answer = "".join(step.replace(QWEN_SEPARATOR, "") + QWEN_SEPARATOR for step in item.steps)
        messages = [
            {"role": "system", "content": QWEN_SYSTEM},
            {"role": "user", "content": item.problem.replace(QWEN_SEPARATOR, "")},
            {"role": "assistant", "content": answer},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        ends = [m.end() for m in re.finditer(re.escape(QWEN_SEPARATOR), text)]
        if len(ends) != len(item.steps):
            raise ValueError(f"{self.name}: the chat template kept {len(ends)} of {len(item.steps)} tags")
        return text, ends

    def tag_probs(
        self, input_ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, attention_mask=mask)[0]
        if logits.dim() != 3 or logits.shape[-1] != 2:
            raise ValueError(f"{self.name}: expected logits [batch, tokens, 2], got {list(logits.shape)}")
        return logits[rows, cols].float().softmax(-1)[:, 1]
