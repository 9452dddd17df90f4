"""GPU check: a few RL steps of a ~0.5B-class model with vLLM rollouts and DeepSpeed training in bf16
on one GPU, and the figures that say whether the engines are used well.

    python scripts/gpu_check.py --vllm-python .venv-vllm/bin/python            # random-init Qwen2-0.5B shape
    python scripts/gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct              # a real checkpoint
    python scripts/gpu_check.py --smoke --vllm-python .venv-vllm/bin/python     # tiny, on the CPU

It prints (and writes with ``--out``) rollout tokens/s (vLLM, after the call that starts it), training
tokens/s (one DeepSpeed update: forward and backward over prompt and response tokens), the MFU of that
update (6 · parameters · tokens per second over ``--peak-tflops``, the GPU's dense bf16 peak; 989 for
an H100/H200 SXM), the weight syncs and their log-prob checks, and the wall time of each RL step.
Without ``--model`` the model is a random-init Qwen2 of Qwen2.5-0.5B's shape with the local SmolLM2
tokenizer (no hub needed); its rewards are zero, its throughput is the point.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from selfverify.config import RLConfig, RolloutConfig, TaskConfig, TrainConfig
from selfverify.engines import configure_torch
from selfverify.models import ModelSpec, chat_prompter
from selfverify.rl import rl_step
from selfverify.tasks import make_task
from selfverify.workers import build

TOKENIZER = Path(__file__).parents[1] / "tests" / "fixtures" / "smollm2_tokenizer"
QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14}
SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}


def random_init(path: Path, shape: dict[str, int]) -> Path:
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    config = Qwen2Config(
        num_key_value_heads=2,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        **shape,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local directory or hub name; default: random init")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU (fp32)")
    parser.add_argument("--vllm-python", default=None, help="the Python of vLLM's environment")
    parser.add_argument("--steps", type=int, default=3, help="RL steps")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--zero-stage", type=int, default=2)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    gpu = not args.smoke
    if gpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --smoke for the CPU check")
    configure_torch(2 if args.smoke else 8)

    tmp = Path(tempfile.mkdtemp(prefix="selfverify-gpu-check-"))
    path = args.model or str(random_init(tmp / "model", SMOKE if args.smoke else QWEN_05B))
    spec = ModelSpec(path=path, dtype="bfloat16" if gpu else "float32", device="cuda" if gpu else "cpu")
    rollout = RolloutConfig(engine="vllm", vllm_python=args.vllm_python, memory_fraction=0.3 if gpu else 0.1)
    worker = build(
        spec, seed=0, train=TrainConfig(engine="deepspeed", zero_stage=args.zero_stage), rollout=rollout
    )
    tok = worker.get_tokenizer()
    params = sum(p.numel() for p in worker.model.parameters())
    task = make_task(TaskConfig(name="arithmetic_nl", min_ops=2, max_ops=3), chat_prompter(tok, spec))
    problems = task.train_problems(args.prompts, seed=0, tag="gpu-check", exclude=set())
    prompts = [p.prompt for p in problems for _ in range(args.group)]
    cfg = RLConfig(
        prompts_per_step=args.prompts,
        group_size=args.group,
        max_new_tokens=args.new_tokens,
        micro_batch_size=16,
    )

    start = time.perf_counter()
    worker.generate(prompts[:1], max_new_tokens=8, seed=0)  # starts vLLM
    startup = time.perf_counter() - start
    worker.start_rl(1e-6, seed=0)
    start = time.perf_counter()
    batch = worker.generate(prompts, max_new_tokens=args.new_tokens, seed=1)
    gen_s = time.perf_counter() - start
    old, _, _ = worker.rollout_stats(batch, cfg)
    advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    if gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    worker.update(batch, old_logprobs=old, advantages=advantages, ref_logprobs=None, cfg=cfg, seed=0)
    if gpu:
        torch.cuda.synchronize()
    train_s = time.perf_counter() - start
    trained = int(batch.attention_mask.sum())

    def reward(ps: list, r: object) -> tuple[torch.Tensor, torch.Tensor]:
        correct = torch.tensor([task.check(p, t).correct for p, t in zip(ps, r.texts, strict=True)])
        return correct.float(), correct

    step_s = []
    for step in range(args.steps):
        start = time.perf_counter()
        rl_step(worker, tok.pad_token_id, cfg, lambda _r: problems, reward, seed=step)
        step_s.append(round(time.perf_counter() - start, 2))
    tflops = 6 * params * trained / train_s / 1e12
    result = {
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "model": args.model or ("random-init Qwen2, " + ("tiny" if args.smoke else "Qwen2.5-0.5B shape")),
        "parameters": params,
        "dtype": spec.dtype,
        "zero_stage": args.zero_stage,
        "vllm_startup_s": round(startup, 1),
        "rollout": {
            "responses": len(prompts),
            "tokens": int(batch.lengths.sum()),
            "seconds": round(gen_s, 2),
        },
        "rollout_tokens_per_s": round(float(batch.lengths.sum()) / gen_s, 1),
        "training": {"tokens": trained, "seconds": round(train_s, 2)},
        "training_tokens_per_s": round(trained / train_s, 1),
        "training_tflops": round(tflops, 2),
        "mfu": round(tflops / args.peak_tflops, 4) if gpu else None,
        "rl_step_seconds": step_s,
        **worker.rollout_engine_stats(),
    }
    worker.vllm.close()
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
