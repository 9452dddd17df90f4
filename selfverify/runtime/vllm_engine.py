"""The vLLM rollout engine (``rollout.engine=vllm``): sampling by vLLM, training by the worker.

The worker starts a vLLM process (``selfverify/runtime/vllm_server.py``) under ``rollout.vllm_python`` on
its model, sends it prompts as token ids and builds from the answers the same :class:`Rollout` HF
generate gives. After every optimizer step the worker's weights are stale in vLLM; before the next
sampling call the worker writes them as a Hugging Face directory and vLLM reloads them in place
(its ``reload_weights``). Each reload is then checked: vLLM's log-probabilities of a fixed sequence
must match the trainer's within ``rollout.logprob_tolerance`` (by default :data:`LOGPROB_TOLERANCE`
of the precision vLLM serves in), or the run stops with
:class:`WeightSyncError` (weights that silently did not arrive would otherwise train on another
policy's samples). vLLM's own log-probabilities are never used for training: π_old is always the
trainer's recomputation (``LMWorker.rollout_stats``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import weakref
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerBase

from selfverify.algos.utils import logprobs_from_logits
from selfverify.config.schema import RolloutConfig
from selfverify.runtime.rollout import Rollout, encode_prompts, stop_mask, stop_token_ids

SERVER = Path(__file__).with_name("vllm_server.py")

# The check's default gap, by the precision vLLM serves in. In float32 vLLM and the trainer agree to
# about 3e-5, so a single missed update shows. In bfloat16, rounding alone moves a sequence's
# log-probs by up to about 0.7 (SmolLM2-135M: bfloat16 against float32 weights 0.55-0.68, vLLM against
# the trainer, both bfloat16, 0.26), as far as 20 RL steps move them (0.90-0.96; docs/results/engines.md,
# "The weight check in bfloat16"): there the check catches weights that did not load, not weights
# that lag behind.
LOGPROB_TOLERANCE = {"float32": 1e-3, "bfloat16": 1.0}


class WeightSyncError(RuntimeError):
    """vLLM's log-probabilities after a weight reload disagree with the trainer's."""


class VLLMError(RuntimeError):
    """The vLLM process failed to start or to answer; the message holds its traceback."""


class VLLMEngine:
    """One vLLM process serving one model (see the module docstring)."""

    def __init__(self, model_dir: Path, cfg: RolloutConfig, *, dtype: str, seed: int, max_model_len: int):
        python = cfg.vllm_python or sys.executable
        if not Path(python).exists():
            raise VLLMError(
                f"rollout.vllm_python {python}: no such interpreter; install vLLM there "
                "(docs/guides/engines.md, 'Rollout engines') or point the key at a Python that has it"
            )
        authkey = secrets.token_bytes(16)
        self.listener = Listener(("127.0.0.1", 0), authkey=authkey)
        host, port = self.listener.address
        options = {
            "model": str(model_dir),
            "dtype": dtype,
            "seed": seed,
            "enforce_eager": cfg.enforce_eager,
            "memory_fraction": cfg.memory_fraction,
            "max_model_len": max_model_len,
            "max_num_seqs": cfg.max_num_seqs,
            "max_batch_tokens": max(cfg.max_batch_tokens, max_model_len),
        }
        env = os.environ | {
            "SELFVERIFY_VLLM_ADDRESS": f"{host}:{port}",
            "SELFVERIFY_VLLM_AUTHKEY": authkey.hex(),
        }
        self.process = subprocess.Popen([python, str(SERVER), json.dumps(options)], env=env)
        self.conn = self.listener.accept()
        self._answer()  # the engine has started (or the error why not)

    def _answer(self) -> Any:
        try:
            status, result = self.conn.recv()
        except EOFError:
            raise VLLMError(
                f"the vLLM process exited (code {self.process.wait()}); see its output above"
            ) from None
        if status == "error":
            raise VLLMError(f"vLLM failed:\n{result}")
        return result

    def call(self, op: str, **kwargs: Any) -> Any:
        self.conn.send((op, kwargs))
        return self._answer()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # already gone
            self.conn.send(("close", {}))
        self.process.wait(timeout=60)
        self.listener.close()


def write_weights(model: torch.nn.Module, path: Path) -> None:
    """``model`` as the directory vLLM loads and reloads: its config and one safetensors file, with
    any tied output layer written out as a weight of its own (``tie_word_embeddings`` off). vLLM's
    in-place reload re-creates parameters layer by layer and would leave a tied output layer at its
    old weights; the log-prob check caught exactly that."""
    weights = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    config = model.config.to_dict() | {"tie_word_embeddings": False}
    tmp = path / "model.safetensors.tmp"
    save_file(weights, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps(config, indent=1))


class VLLMRollout:
    """The worker's vLLM: started on the model's first use, reloaded and checked after updates."""

    def __init__(self, cfg: RolloutConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self.engine: VLLMEngine | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="selfverify-vllm-"))  # the weights vLLM reads
        weakref.finalize(self, shutil.rmtree, self.dir, True)  # a model's size each: gone with the worker
        self.stale = True
        self.probe: list[int] | None = None  # a fixed sequence for the log-prob check
        self.syncs, self.max_diff = 0, 0.0
        self.tolerance = cfg.logprob_tolerance  # set by the precision served at start-up when None

    def sync(self, model: torch.nn.Module) -> None:
        """Bring vLLM to ``model``'s weights (under ZeRO-3, inside ``gathered``)."""
        write_weights(model, self.dir)
        if self.engine is None:
            dtype = str(model.dtype).removeprefix("torch.")
            if self.tolerance is None:
                self.tolerance = LOGPROB_TOLERANCE[dtype]
            max_len = min(self.cfg.max_model_len, getattr(model.config, "max_position_embeddings", 2**31))
            self.engine = VLLMEngine(self.dir, self.cfg, dtype=dtype, seed=self.seed, max_model_len=max_len)
        else:
            self.engine.call("reload", path=str(self.dir))
        self.stale = False
        self.syncs += 1

    @torch.no_grad()
    def probe_logprobs(self, model: torch.nn.Module) -> torch.Tensor:
        """The trainer's log-probs of the check sequence: a forward every ZeRO-3 rank takes part in."""
        assert self.probe is not None, "the check sequence comes from the first generation"
        ids = torch.tensor([self.probe], device=model.device)
        return logprobs_from_logits(model(input_ids=ids).logits[0, :-1], ids[0, 1:]).cpu()

    def check(self, trainer: torch.Tensor) -> None:
        """vLLM's log-probs of the check sequence against the trainer's (``probe_logprobs``)."""
        served = torch.tensor(self.engine.call("prompt_logprobs", ids=self.probe))
        diff = (trainer - served).abs().max().item()
        self.max_diff = max(self.max_diff, diff)
        if diff > self.tolerance:
            raise WeightSyncError(
                f"after weight sync {self.syncs} vLLM's log-probs of the check sequence differ from the "
                f"trainer's by up to {diff:.3g} (rollout.logprob_tolerance={self.tolerance:g}): "
                "the weights did not reach vLLM intact"
            )

    def generate(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        prompts: list[str],
        *,
        max_new_tokens: int,
        temperature: float,
        greedy: bool,
        seed: int | None,
    ) -> Rollout:
        """One response per prompt, laid out as ``rollout.sample`` lays HF generate's out, from the
        weights of the last ``sync``; the first call's first prompt and response become the check
        sequence."""
        enc = encode_prompts(tokenizer, prompts)
        ids = [
            row[mask.bool()].tolist()
            for row, mask in zip(enc["input_ids"], enc["attention_mask"], strict=True)
        ]
        stop = stop_token_ids(model, tokenizer)
        # Request i is seeded seed + i; greedy is temperature 0; top_k 0 and top_p 1: the full distribution.
        params = [
            {
                "max_tokens": max_new_tokens,
                "temperature": 0.0 if greedy else temperature,
                "top_k": 0,
                "top_p": 1.0,
                "seed": None if seed is None else seed + i,
                "stop_token_ids": list(stop),
            }
            for i in range(len(ids))
        ]
        outs = self.engine.call("generate", prompts=ids, params=params)
        if self.probe is None:
            self.probe = ids[0] + outs[0]
        width = max(1, max(len(o) for o in outs))
        responses = torch.full((len(outs), width), tokenizer.pad_token_id, dtype=torch.long)
        for i, o in enumerate(outs):
            responses[i, : len(o)] = torch.tensor(o, dtype=torch.long)
        response_mask, truncated = stop_mask(responses, stop)
        input_ids = torch.cat([enc["input_ids"], responses], dim=1)
        attention_mask = torch.cat([enc["attention_mask"], response_mask.long()], dim=1)
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        return Rollout(input_ids, attention_mask, response_mask, enc["input_ids"].shape[1], texts, truncated)

    def stats(self) -> dict[str, float | None]:
        return {
            "vllm_weight_syncs": float(self.syncs),
            "vllm_max_logprob_diff": self.max_diff,
            "vllm_logprob_tolerance": self.tolerance,
        }

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
