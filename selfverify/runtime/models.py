"""The model seam: the tiny character model built locally, or any Hugging Face causal LM.

``model.path`` unset: a tiny Llama-style model with a character tokenizer, built from its shape in
``model.dtype`` (no hub). ``model.path`` set: a local Hugging Face directory or a hub name, loaded with
its own tokenizer in ``model.dtype`` on ``model.device``. Either way checkpoints are ordinary Hugging
Face directories (``config.json``, ``model.safetensors``, tokenizer files).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from selfverify.config.schema import ModelSpec
from selfverify.runtime.smollm2 import ensure_smollm2
from selfverify.utils.io import SourceError

hf_logging.disable_progress_bar()  # per-shard bars on tiny checkpoints are noise in our own progress display

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character (and newline): arithmetic stays digit-exact."""
    alphabet = list(SPECIAL_TOKENS.values()) + sorted(set(string.printable) - set("\t\r\x0b\x0c"))
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    # BPE without merges is a character model; Fuse joins characters back without spaces.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, padding_side="left", **SPECIAL_TOKENS)


SMOLLM2 = "smollm2"  # model.path alias: SmolLM2-135M-Instruct obtained offline (selfverify.smollm2)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
DEVICES = ("cpu", "cuda", "auto")


AUTOCAST_DTYPES = ("bfloat16",)  # float16 would need a gradient scaler


def autocast(dtype: str | None, device: torch.device) -> AbstractContextManager:
    """Mixed precision for the forward passes inside (``ModelSpec.autocast``); a no-op when None."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=DTYPES[dtype])


class Autocast:
    """A model (or training engine) whose calls run under ``autocast``: what a training engine
    differentiates through, so the backward pass runs outside autocast, as torch advises."""

    def __init__(self, model: Callable, dtype: str) -> None:
        self.inner, self.dtype = model, dtype

    def __call__(self, *args, **kwargs):
        with autocast(self.dtype, self.inner.device):
            return self.inner(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_model(spec: ModelSpec, seed: int) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """The model and tokenizer ``spec`` names: the tiny model built from ``seed``, or ``spec.path``."""
    if spec.path is None:
        tok = build_char_tokenizer()
        return build_model(spec, tok, seed), tok
    if spec.path == SMOLLM2:
        return load_pretrained(ensure_smollm2(), spec)
    return load_pretrained(spec.path, spec)


def chat_prompter(tokenizer: PreTrainedTokenizerBase, spec: ModelSpec) -> Callable[[str], str]:
    """User message -> the text the model continues: its chat template with the generation prompt when
    it has one and ``spec.chat_template`` is on, else the message itself."""
    if not (spec.chat_template and getattr(tokenizer, "chat_template", None)):
        return lambda text: text
    system = [] if spec.system_prompt is None else [{"role": "system", "content": spec.system_prompt}]

    def prompt(text: str) -> str:
        messages = [*system, {"role": "user", "content": text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    return prompt


def stop_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokens that end a response: the model's generation config's, and the tokenizer's end token."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    return sorted({i for i in [*ids, tokenizer.eos_token_id] if i is not None})


def attention(spec: ModelSpec) -> dict[str, str]:
    """The attention kernel ``spec`` asks for, as loading arguments (none: transformers' choice)."""
    return {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}


def build_model(spec: ModelSpec, tokenizer: PreTrainedTokenizerFast, seed: int) -> torch.nn.Module:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=DTYPES[spec.dtype], **attention(spec))


def save_pretrained(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, path: str | Path) -> None:
    """Write model (safetensors) and tokenizer into ``path`` (see ``checkpoint.atomic_dir`` for atomicity)."""
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_pretrained(
    path: str | Path, spec: ModelSpec | None = None
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """A Hugging Face causal LM and its tokenizer (left padding; a tokenizer without a pad token pads
    with its end token, which the response mask stops at anyway)."""
    spec = spec or ModelSpec()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[spec.dtype], **attention(spec))
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    except OSError as err:  # not a directory, not on a reachable hub
        raise SourceError(f"model {path}: cannot load it: {' '.join(str(err).split())[:300]}") from None
    model.to(resolve_device(spec.device))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
