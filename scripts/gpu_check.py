"""GPU check: a few RL steps of a ~0.5B-class model in bf16 on one GPU, the figures that say whether the
engines are used well, and one short self-verification loop on the GPU.

    python scripts/gpu_check.py                                                # HF rollouts, torch engine
    python scripts/gpu_check.py --rollout vllm --vllm-python .venv-vllm/bin/python --train deepspeed
    python scripts/gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct              # a real checkpoint
    python scripts/gpu_check.py --smoke                                         # tiny, on the CPU

It needs only torch, transformers and the selfverify package's pure-Python dependencies (a bare GPU
machine); DeepSpeed and vLLM are used when asked for. ``--train auto`` (the default) trains with
DeepSpeed where it imports, else with the torch engine. It prints (and writes with ``--out``) rollout
tokens/s (after the call that starts the engine), training tokens/s (one update: forward and backward
over prompt and response tokens), the MFU of that update (6 · parameters · tokens per second over
``--peak-tflops``, the GPU's dense bf16 peak; 989 for an H100/H200 SXM), vLLM's weight syncs and their
log-prob checks, the wall time of each RL step, and the loop's wall time and figures (``--loop``).
Without ``--model`` the model is a random-init Qwen2 of Qwen2.5-0.5B's shape with the local SmolLM2
tokenizer (no hub needed); its rewards are zero, its throughput is the point.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from selfverify import loop
from selfverify.config.schema import ModelSpec, RLConfig, RolloutConfig, TaskConfig, TrainConfig
from selfverify.recipes.rl_step import rl_step
from selfverify.runtime.engines import configure_torch
from selfverify.runtime.models import chat_prompter
from selfverify.runtime.workers import build
from selfverify.tasks.registry import make_task

TOKENIZER = Path(__file__).parents[1] / "tests" / "fixtures" / "smollm2_tokenizer"
QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14}
SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
# A short run of the embedded default's loop: every phase, one round, a few steps each.
LOOP = [
    "sft.steps=150",
    "rl.steps=10",
    "rl.eval_every=5",
    "loop.rounds=1",
    "loop.judge_sft_steps=150",
    "loop.judge_val_f1=null",
    "loop.judge_pool=256",
    "loop.scaled_samples=32",
    "loop.verifier_rl_steps=2",
    "loop.meta_rl_steps=2",
    "loop.eval_samples=64",
    "task.n_heldout=64",
    "checkpoint_every=5",
]


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


def run_loop(run_dir: Path, gpu: bool) -> dict[str, object]:
    """The embedded default's loop, shortened (LOOP), on the GPU: its wall time and its summary."""
    device = "cuda" if gpu else "cpu"
    start = time.perf_counter()
    code = loop.main(["--run-dir", str(run_dir), "--no-progress", f"model.device={device}", *LOOP])
    seconds = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text()) if code == 0 else {}
    figures = {k: v for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {"exit_code": code, "seconds": round(seconds, 1), "overrides": LOOP, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local directory or hub name; default: random init")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU (fp32)")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="the rollout engine")
    parser.add_argument("--vllm-python", default=None, help="the Python of vLLM's environment")
    parser.add_argument(
        "--train",
        choices=("auto", "torch", "deepspeed"),
        default="auto",
        help="the training engine; auto: deepspeed where it imports, else torch",
    )
    parser.add_argument("--loop", action="store_true", help="also run a short self-verification loop")
    parser.add_argument(
        "--nondeterministic", action="store_true", help="allow non-deterministic kernels (what they cost)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="print the update's top operators (torch.profiler)"
    )
    parser.add_argument("--steps", type=int, default=3, help="RL steps")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per RL step")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=256, help="max new tokens a sample")
    parser.add_argument("--zero-stage", type=int, default=2, help="ZeRO stage of the DeepSpeed engine")
    parser.add_argument(
        "--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak, for MFU (H100 SXM: 989)"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    gpu = not args.smoke
    if gpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --smoke for the CPU check")
    configure_torch(2 if args.smoke else 8)
    if args.nondeterministic:
        torch.use_deterministic_algorithms(False)

    tmp = Path(tempfile.mkdtemp(prefix="selfverify-gpu-check-"))
    path = args.model or str(random_init(tmp / "model", SMOKE if args.smoke else QWEN_05B))
    spec = ModelSpec(path=path, dtype="bfloat16" if gpu else "float32", device="cuda" if gpu else "cpu")
    engine = args.train
    if engine == "auto":
        engine = "deepspeed" if importlib.util.find_spec("deepspeed") else "torch"
    rollout = RolloutConfig(
        engine=args.rollout, vllm_python=args.vllm_python, memory_fraction=0.3 if gpu else 0.1
    )
    train = TrainConfig(engine=engine, zero_stage=args.zero_stage)
    worker = build(spec, seed=0, train=train, rollout=rollout)
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
    worker.generate(prompts[:1], max_new_tokens=8, seed=0)  # starts vLLM; warms HF's kernels
    startup = time.perf_counter() - start
    worker.start_rl(1e-6, seed=0)
    start = time.perf_counter()
    batch = worker.generate(prompts, max_new_tokens=args.new_tokens, seed=1)
    gen_s = time.perf_counter() - start
    old, _, _ = worker.rollout_stats(batch, cfg)
    advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    update_s = []
    for _ in range(2):  # the first update warms the kernels up; the second is timed
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        worker.update(batch, old_logprobs=old, advantages=advantages, ref_logprobs=None, cfg=cfg, seed=0)
        if gpu:
            torch.cuda.synchronize()
        update_s.append(time.perf_counter() - start)
    first_s, train_s = update_s
    profile = None
    if args.profile:
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if gpu else []
        )
        with torch.profiler.profile(activities=activities) as prof:
            worker.update(batch, old_logprobs=old, advantages=advantages, ref_logprobs=None, cfg=cfg, seed=0)
            if gpu:
                torch.cuda.synchronize()
        sort = "cuda_time_total" if gpu else "cpu_time_total"
        profile = prof.key_averages().table(sort_by=sort, row_limit=15, max_name_column_width=50)
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
        "deterministic": not args.nondeterministic,
        "rollout_engine": args.rollout,
        "train_engine": engine,
        "zero_stage": args.zero_stage if engine == "deepspeed" else None,
        "rollout_startup_s": round(startup, 1),
        "rollout": {
            "responses": len(prompts),
            "tokens": int(batch.lengths.sum()),
            "seconds": round(gen_s, 2),
        },
        "rollout_tokens_per_s": round(float(batch.lengths.sum()) / gen_s, 1),
        "training": {"tokens": trained, "seconds": round(train_s, 2), "first_update_s": round(first_s, 2)},
        "training_tokens_per_s": round(trained / train_s, 1),
        "training_tflops": round(tflops, 2),
        "mfu": round(tflops / args.peak_tflops, 4) if gpu else None,
        "rl_step_seconds": step_s,
        **worker.rollout_engine_stats(),
    }
    if worker.vllm is not None:
        worker.vllm.close()
    del worker
    if torch.distributed.is_initialized():  # DeepSpeed's process group: left open, the process never exits
        torch.distributed.destroy_process_group()
    if profile is not None:
        print(profile)
    if args.loop:
        result["loop"] = run_loop(tmp / "loop", gpu)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
