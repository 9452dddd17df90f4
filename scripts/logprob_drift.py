"""How far sequences' log-probs move under bfloat16 rounding, set against how far training moves them:
the scale a weight-sync check's tolerance (``rollout.logprob_tolerance``) has to sit between.

    python scripts/logprob_drift.py runs/x/checkpoints/cold_start runs/x/checkpoints/final \\
        --config configs/smollm2_rl.yaml --sequences 4

For each of a few training prompts and the first checkpoint's greedy response to it, three sets of
per-token log-probs: the first checkpoint in float32, the same weights in bfloat16, and the second
checkpoint in float32. It prints the largest and the mean gap of rounding (bfloat16 against float32)
and of training (second checkpoint against first).
"""

from __future__ import annotations

import argparse
import copy
import json

import torch

from selfverify.algos.utils import logprobs_from_logits
from selfverify.config.load import load_config
from selfverify.runtime.models import chat_prompter, load_pretrained
from selfverify.tasks import make_task


@torch.no_grad()
def logprobs(model: torch.nn.Module, seq: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of ``seq`` [1, T]."""
    return logprobs_from_logits(model(input_ids=seq).logits[0, :-1], seq[0, 1:])


def gaps(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    diff = (a - b).abs()
    return {"max": round(diff.max().item(), 4), "mean": round(diff.mean().item(), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a checkpoint directory (a Hugging Face model)")
    parser.add_argument("after", help="a later checkpoint of the same model")
    parser.add_argument("--config", default=None, help="the recipe whose task gives the prompts")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value)")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(cfg.threads)
    before, tok = load_pretrained(args.before)
    after, _ = load_pretrained(args.after)
    # A copy: casting ``before`` there and back would leave its weights rounded for what follows.
    rounded = copy.deepcopy(before).to(torch.bfloat16)
    task = make_task(cfg.task, chat_prompter(tok, cfg.model))
    rows = []
    for problem in task.train_problems(args.sequences, seed=cfg.seed, tag="drift", exclude=set()):
        prompt = tok(problem.prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            seq = before.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False)
        ref = logprobs(before, seq)
        rows.append(
            {
                "tokens": seq.shape[1],
                "bfloat16_rounding": gaps(ref, logprobs(rounded, seq)),
                "training": gaps(ref, logprobs(after, seq)),
            }
        )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
