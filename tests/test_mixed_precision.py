"""Mixed precision (``model.autocast``): forward passes in bfloat16, weights and gradients in float32."""

import dataclasses

import pytest
import torch

from selfverify.config.load import ConfigError, load_config
from selfverify.config.schema import ModelSpec, RLConfig, TrainConfig
from selfverify.runtime.models import build_char_tokenizer, build_model, load_pretrained, save_pretrained
from selfverify.runtime.workers import LMWorker

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PROMPTS, TARGETS = ["Q:1+2\n", "Q:3-1\n"], ["1+2=3\nA:3", "3-1=2\nA:2"]


def matmul_dtypes(model: torch.nn.Module) -> tuple[list[torch.dtype], list[torch.dtype]]:
    """Records the output dtype of every linear layer's forward (in [0]) and its weight's gradient
    dtype on the backward pass (in [1])."""
    seen: tuple[list[torch.dtype], list[torch.dtype]] = ([], [])
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(lambda _m, _i, out: seen[0].append(out.dtype))
            layer.weight.register_hook(lambda grad: seen[1].append(grad.dtype))
    return seen


@pytest.mark.parametrize(
    ("mode", "engine"), [(None, "torch"), ("bfloat16", "torch"), ("bfloat16", "deepspeed")]
)
def test_autocast_runs_every_forward_in_bfloat16_and_keeps_float32_weights(mode, engine):
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    forward, grads = matmul_dtypes(model)
    worker = LMWorker(model, tok, TrainConfig(engine=engine, zero_stage=2), autocast=mode)
    want = torch.bfloat16 if mode else torch.float32

    rollout = worker.generate(PROMPTS, max_new_tokens=6, seed=0)  # HF sampling
    assert set(forward) == {want}
    forward.clear()
    worker.start_sft(1e-2, warmup_steps=1, total_steps=2)
    loss = worker.sft_step(PROMPTS, TARGETS)["loss"]
    assert loss > 0 and set(forward) == {want} and set(grads) == {torch.float32}
    worker.end_training()  # a DeepSpeed-trained model is a fresh module again: hook it anew

    forward, grads = matmul_dtypes(worker.model)
    cfg = RLConfig(max_new_tokens=6, micro_batch_size=2, epochs=2)  # two passes: π_old is recomputed
    worker.start_rl(1e-2)
    old, _, _ = worker.rollout_stats(rollout, cfg)
    assert old is not None and set(forward) == {want}
    worker.update(
        rollout, old_logprobs=old, advantages=torch.ones_like(old), ref_logprobs=None, cfg=cfg, seed=0
    )
    assert set(forward) == {want} and set(grads) == {torch.float32}
    assert {p.dtype for p in worker.model.parameters()} == {torch.float32}


def test_autocast_is_checked_for_every_model():
    assert load_config(overrides=["model.autocast=bfloat16"]).model.autocast == "bfloat16"
    for key in ("model.autocast", "loop.judge_model.autocast", "rl.critic_model.autocast"):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(overrides=[f"{key}=float16"])


def test_autocast_changes_the_arithmetic_not_the_model():
    """The same weights give nearly the same log-probs with and without autocast (bfloat16 rounds)."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    rollout = LMWorker(model, tok).generate(PROMPTS, max_new_tokens=6, seed=0)
    cfg = dataclasses.replace(RLConfig(max_new_tokens=6), epochs=2)
    logprobs = []
    for mode in (None, "bfloat16"):
        worker = LMWorker(model, tok, autocast=mode)
        worker.start_rl(1e-2)
        logprobs.append(worker.rollout_stats(rollout, cfg)[0])
    mask = rollout.response_mask.bool()
    gap = (logprobs[0] - logprobs[1])[mask].abs().max().item()
    assert 0 < gap < 0.1


def test_the_tiny_model_takes_the_attention_kernel_and_eager_matches_sdpa(tmp_path):
    """``model.attn_implementation`` reaches the tiny model built from its shape and its checkpoints;
    eager attention (what bfloat16 autocast on the CPU wants: sdpa's bfloat16 backward is slow there)
    computes what sdpa does."""
    tok = build_char_tokenizer()
    eager_spec = dataclasses.replace(SPEC, attn_implementation="eager")
    eager = build_model(eager_spec, tok, seed=0)
    assert eager.config._attn_implementation == "eager"
    save_pretrained(eager, tok, tmp_path)
    assert load_pretrained(tmp_path, eager_spec)[0].config._attn_implementation == "eager"
    sdpa = build_model(dataclasses.replace(SPEC, attn_implementation="sdpa"), tok, seed=0)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        torch.testing.assert_close(eager(**batch).logits, sdpa(**batch).logits, atol=1e-5, rtol=1e-4)
