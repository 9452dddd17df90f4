"""Tiny causal LMs and a character tokenizer, built locally (no hub), saved in Hugging Face format.

Every checkpoint directory holds ``config.json``, ``model.safetensors`` and the tokenizer files, so
``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)`` load it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

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


@dataclass
class ModelSpec:
    """Shape of the tiny Llama-style model (configured under ``model``)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 256


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
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def save_pretrained(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, path: str | Path) -> None:
    """Write model (safetensors) and tokenizer into ``path`` (see ``checkpoint.atomic_dir`` for atomicity)."""
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_pretrained(path: str | Path) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    return model, tokenizer
