"""The vLLM side of the vLLM rollout engine: a process that holds one ``vllm.LLM`` and answers the
worker's requests (``selfverify.runtime.vllm_engine``) over a local authenticated connection.

It runs under the Python of an environment that has vLLM (``rollout.vllm_python``; vLLM's CPU build
pins its own torch and transformers, so it often cannot share the project's environment), and so it
imports nothing from selfverify: only the standard library and vLLM. Requests are (operation,
arguments) pairs; each answer is ("ok", result) or ("error", traceback).

- ``generate``: token ids in, token ids out (vLLM never sees a tokenizer: ``skip_tokenizer_init``).
- ``reload``: vLLM's own in-place weight reload (``reload_weights``) from the directory the worker
  has just written.
- ``prompt_logprobs``: the log-probability of every token of a sequence given its prefix, for the
  worker's check that the reload reached the model.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Client
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process: one fewer


def groups(lengths: list[int], max_seqs: int, max_tokens: int) -> list[list[int]]:
    """Consecutive request indices in groups of at most ``max_seqs`` requests and ``max_tokens`` tokens."""
    out: list[list[int]] = [[]]
    tokens = 0
    for i, n in enumerate(lengths):
        if out[-1] and (len(out[-1]) == max_seqs or tokens + n > max_tokens):
            out.append([])
            tokens = 0
        out[-1].append(i)
        tokens += n
    return out


def serve(address: tuple[str, int], authkey: bytes, options: dict[str, Any]) -> None:
    from vllm import LLM, SamplingParams

    conn = Client(address, authkey=authkey)
    try:
        llm = LLM(
            model=options["model"],
            skip_tokenizer_init=True,
            dtype=options["dtype"],
            seed=options["seed"],
            enforce_eager=options["enforce_eager"],
            enable_prefix_caching=False,  # cached prefixes would outlive a weight reload
            gpu_memory_utilization=options["memory_fraction"],
            max_model_len=options["max_model_len"],
            max_num_seqs=options["max_num_seqs"],
            max_num_batched_tokens=options["max_batch_tokens"],
        )
    except Exception:  # noqa: BLE001 - the worker reports it
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))

    def generate(prompts: list[list[int]], params: list[dict[str, Any]]) -> list[list[int]]:
        """In groups that one scheduling step prefills whole: a seeded request whose prefill is split
        crashes vLLM's CPU build (its generators have no offset to rewind)."""
        out: list[list[int]] = []
        for group in groups([len(p) for p in prompts], options["max_num_seqs"], options["max_batch_tokens"]):
            outs = llm.generate(
                [{"prompt_token_ids": prompts[i]} for i in group],
                [SamplingParams(detokenize=False, **params[i]) for i in group],
                use_tqdm=False,
            )
            out += [list(o.outputs[0].token_ids) for o in outs]
        return out

    def reload(path: str) -> None:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": path})

    def prompt_logprobs(ids: list[int]) -> list[float]:
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        return [step[tok].logprob for tok, step in zip(ids[1:], out.prompt_logprobs[1:], strict=True)]

    ops = {"generate": generate, "reload": reload, "prompt_logprobs": prompt_logprobs}
    while True:
        try:
            op, kwargs = conn.recv()
        except EOFError:  # the worker is gone
            return
        if op == "close":
            return
        try:
            conn.send(("ok", ops[op](**kwargs)))
        except Exception:  # noqa: BLE001 - the worker reports it
            conn.send(("error", traceback.format_exc()))


if __name__ == "__main__":  # vLLM's engine starts processes with spawn: guarded
    import json

    host, port = os.environ["SELFVERIFY_VLLM_ADDRESS"].rsplit(":", 1)
    serve((host, int(port)), bytes.fromhex(os.environ["SELFVERIFY_VLLM_AUTHKEY"]), json.loads(sys.argv[1]))
