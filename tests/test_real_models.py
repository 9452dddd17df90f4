"""Any Hugging Face causal LM through the model seam, and every recipe in configs/ started on a
random-init model of its architecture with a local tokenizer (SmolLM2's, 49k tokens, ChatML)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from selfverify.config.load import config_dir, load_config
from selfverify.config.schema import ModelSpec
from selfverify.judges.generative import GenerativeVerifier
from selfverify.judges.registry import load_verifier
from selfverify.loop import main
from selfverify.runtime.checkpoint import read_state
from selfverify.runtime.critic import ValueModel
from selfverify.runtime.models import chat_prompter, load_model, stop_token_ids
from selfverify.runtime.rollout import encode_pairs, response_logprobs, sample
from selfverify.score import main as score_main
from selfverify.tasks import TaskSpec
from selfverify.tasks.worded import WordedArithmeticTask

TOKENIZER = Path(__file__).parent / "fixtures" / "smollm2_tokenizer"
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


def save_random_init(path: Path, arch: str, *, pad: bool = True) -> Path:
    """A random-init model of SmolLM2's (Llama) or Qwen2's architecture, with the local tokenizer."""
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    if not pad:
        tok.pad_token = None
    kw = {**SHAPE, "vocab_size": len(tok), "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True}
    torch.manual_seed(0)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, **kw))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, **kw))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_init(tmp_path_factory.mktemp("llama"), "llama", pad=False)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_init(tmp_path_factory.mktemp("qwen"), "qwen2")


def test_a_tokenizer_without_a_pad_token_pads_with_its_end_token(llama_dir: Path) -> None:
    model, tok = load_model(ModelSpec(path=str(llama_dir)), seed=0)
    assert tok.pad_token == tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    assert isinstance(model, LlamaForCausalLM) and model.dtype == torch.float32


def test_bfloat16_and_the_attention_implementation_are_applied(llama_dir: Path) -> None:
    model, _ = load_model(ModelSpec(path=str(llama_dir), dtype="bfloat16", attn_implementation="eager"), 0)
    assert model.dtype == torch.bfloat16 and model.config._attn_implementation == "eager"


def test_prompts_go_through_the_chat_template_unless_turned_off(llama_dir: Path) -> None:
    _, tok = load_model(ModelSpec(path=str(llama_dir)), seed=0)
    chat = chat_prompter(tok, ModelSpec(system_prompt="Be brief."))
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    assert chat("2+2?") == expected + "<|im_start|>assistant\n"
    assert chat_prompter(tok, ModelSpec(chat_template=False))("2+2?") == "2+2?"


def test_stop_tokens_come_from_the_generation_config(llama_dir: Path) -> None:
    model, tok = load_model(ModelSpec(path=str(llama_dir)), seed=0)
    model.generation_config.eos_token_id = [2, 0]
    assert stop_token_ids(model, tok) == [0, 2]
    out = sample(model, tok, ["a", "bb"], max_new_tokens=12, seed=0)
    for row, n in zip(out.responses.tolist(), out.lengths.long().tolist(), strict=True):
        stops = [j for j, t in enumerate(row[:n]) if t in (0, 2)]
        assert stops in ([], [n - 1])  # the mask ends at the first stop token, whichever it is


def test_logprobs_are_micro_batched_and_equal_a_full_forward(llama_dir: Path) -> None:
    model, tok = load_model(ModelSpec(path=str(llama_dir)), seed=0)
    batch = encode_pairs(tok, ["Compute 1 + 2.", "Hi"], ["1 + 2 = 3\nAnswer: 3", "Hello there"])
    with torch.no_grad():
        whole = response_logprobs(model, batch)
        parts = response_logprobs(model, batch, micro_batch_size=1)
        position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        full = model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids
        )
        logits = full.logits[:, batch.prompt_len - 1 : -1].float()
        by_hand = torch.log_softmax(logits, -1).gather(-1, batch.responses[..., None])[..., 0]
    mask = batch.response_mask.bool()
    assert torch.allclose(parts[mask], whole[mask], atol=1e-5)
    assert torch.allclose(whole[mask], by_hand[mask], atol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_group_shares_its_prompts_forward_pass_with_the_same_logprobs_and_gradient(
    llama_dir: Path, qwen_dir: Path, arch: str
) -> None:
    """rl.share_prompts: two groups of 3 samples and one lone prompt, left-padded to each other, in one
    forward pass and in three passes by response length (a pass whose prompts are all shorter than the
    longest reads the shared keys and values from its own first column)."""
    model, tok = load_model(ModelSpec(path=str(llama_dir if arch == "llama" else qwen_dir)), seed=0)
    chat = chat_prompter(tok, ModelSpec(system_prompt="Be brief."))
    prompts = [chat("Compute 1 + 2 - 7.")] * 3 + [chat("Hi")] * 3 + [chat("What is 9 - 4?")]
    batch = sample(model, tok, prompts, max_new_tokens=10, seed=0)
    # A random-init model does not stop: responses of several lengths, so that the passes differ in width
    # and the shortest pass holds only the shortest prompt.
    ends = torch.tensor([9, 8, 10, 2, 3, 4, 6])  # the shortest pass: the three "Hi" rows
    batch.response_mask = (torch.arange(10) < ends[:, None]).float()
    mask = batch.response_mask.bool()
    weights = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(0))
    results = []
    for logprobs_of in (
        lambda: response_logprobs(model, batch),
        lambda: response_logprobs(model, batch, share_prompts=True),
        lambda: response_logprobs(model, batch, share_prompts=True, parts=3),
    ):
        model.zero_grad()
        logprobs = logprobs_of()
        (logprobs * weights * batch.response_mask).sum().backward()
        results.append((logprobs.detach(), torch.cat([q.grad.flatten() for q in model.parameters()])))
    plain, plain_grad = results[0]
    for shared, shared_grad in results[1:]:
        torch.testing.assert_close(shared[mask], plain[mask], atol=1e-5, rtol=1e-5)
        assert (shared_grad - plain_grad).norm() <= 1e-5 * plain_grad.norm()  # float rounding only


def test_command_line_shorthands_select_the_task_and_the_model() -> None:
    cfg = load_config(overrides=["task=arithmetic_nl", "model=some/hub-name"])
    assert cfg.task.name == "arithmetic_nl" and cfg.model.path == "some/hub-name"
    with pytest.raises(ValueError, match="task.name"):
        load_config(overrides=["task=sudoku"])


TINY_LOOP = [
    "sft.steps=2", "sft.batch_size=4", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
    "rl.max_new_tokens=12", "rl.micro_batch_size=2", "task.n_heldout=4", "loop.rounds=1",
    "loop.judge_pool=4", "loop.judge_sft_steps=2", "loop.judge_sft_batch_size=4", "loop.verifier_rl_steps=1",
    "loop.meta_rl_steps=1", "loop.judge_prompts_per_step=2", "loop.judge_group_size=2",
    "loop.judge_max_new_tokens=24", "loop.scaled_samples=2", "loop.eval_samples=2", "eval_batch_size=4",
    "threads=1",
]  # fmt: skip


def run_recipe(tmp_path: Path, recipe: str, overrides: list[str]) -> dict:
    run = tmp_path / recipe
    assert (
        main(["--config", str(config_dir() / recipe), "--run-dir", str(run), "--no-progress", *overrides])
        == 0
    )
    return json.loads((run / "summary.json").read_text())


BLIND = ["loop.meta_apart=true", "loop.meta_audit=blind"]


@pytest.mark.parametrize("audit", [[], BLIND], ids=["one-judge", "blind-meta"])
def test_the_smollm2_loop_recipe_completes_on_a_random_init_smollm2(
    tmp_path: Path, llama_dir: Path, audit: list[str]
) -> None:
    """The prose judge, and a meta-verifier apart auditing prose analyses blind."""
    summary = run_recipe(tmp_path, "smollm2_nl.yaml", [f"model.path={llama_dir}", *TINY_LOOP, *audit])
    (round0,) = summary["rounds"]
    assert {"verifier_f1", "meta_accuracy", "auto_label_agreement", "reward_hacking_gap"} <= round0.keys()
    assert 0.0 <= summary["final_accuracy"] <= 1.0 and round0["verifier_parse_rate"] >= 0.0


def test_the_smollm2_rl_recipe_completes_on_a_random_init_smollm2(tmp_path: Path, llama_dir: Path) -> None:
    summary = run_recipe(tmp_path, "smollm2_rl.yaml", [f"model.path={llama_dir}", *TINY_LOOP, "rl.steps=2"])
    assert summary["cold_start_accuracy"] is not None and summary["final_accuracy"] is not None


@pytest.mark.parametrize(
    ("recipe", "source"),
    [("gsm8k_gpu.yaml", None), ("math_gpu.yaml", "tests/fixtures/math_format_sample.jsonl")],
)
def test_the_gpu_recipes_complete_a_step_on_random_init_qwen2(
    tmp_path: Path, qwen_dir: Path, recipe: str, source: str | None
) -> None:
    data = [f"task.source={source}" if source else "task.source=null", "task.heldout_source=null"]
    here = [
        "model.device=cpu",
        "model.dtype=float32",
        "loop.judge_model.device=cpu",
        "loop.judge_model.dtype=float32",
    ]
    models = [f"model.path={qwen_dir}", f"loop.judge_model.path={qwen_dir}"]
    summary = run_recipe(tmp_path, recipe, [*models, *here, *data, *TINY_LOOP, "task.n_heldout=1"])
    assert len(summary["rounds"]) == 1


def test_any_instruct_model_is_a_prompted_judge_for_the_score_cli(
    tmp_path: Path, llama_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = load_verifier(f"judge:{llama_dir}", max_new_tokens=8)
    assert isinstance(judge, GenerativeVerifier) and judge.fmt.name == "prose"
    task = WordedArithmeticTask(TaskSpec())
    records = []
    for i, p in enumerate(task.heldout(3, seed=0)):
        steps = task.demonstration(p, direct=False).splitlines()
        records.append({"id": str(i), "problem": p.text, "steps": steps, "label": -1})
    src, out = tmp_path / "nl.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert score_main(["--verifier", f"judge:{llama_dir}", "--input", str(src), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["parsed"] is False for r in rows)  # a random model's text: R_format 0
    assert "acc_corr" in capsys.readouterr().out


def test_judge_meta_verifier_and_critic_may_each_be_a_model_of_their_own_with_seed_data(
    tmp_path: Path, qwen_dir: Path, llama_dir: Path
) -> None:
    """Generator and judge Qwen2, a Llama meta-verifier, a Qwen2 critic (PPO), and ProcessBench seed
    records in the judge's pool, labelled by their file."""
    seed = tmp_path / "seed.jsonl"
    records = [
        {"id": "s0", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 5", "The answer is 5."], "label": -1},
        {"id": "s1", "problem": "What is 4 * 2?", "steps": ["4 * 2 = 6", "The answer is 6."], "label": 0},
    ]
    seed.write_text("".join(json.dumps(r) + "\n" for r in records))
    own = [
        f"model.path={qwen_dir}", f"loop.judge_model.path={qwen_dir}", f"loop.meta_model.path={llama_dir}",
        f"rl.critic_model.path={qwen_dir}", "rl.advantage=gae", "rl.lam=1.0", f"loop.judge_seed={seed}",
        "model.device=cpu", "model.dtype=float32",
        "loop.judge_model.device=cpu", "loop.judge_model.dtype=float32",
        "task.source=null", "task.heldout_source=null", "task.n_heldout=1",
    ]  # fmt: skip
    summary = run_recipe(tmp_path, "gsm8k_gpu.yaml", [*own, *TINY_LOOP])
    assert len(summary["rounds"]) == 1
    run = tmp_path / "gsm8k_gpu.yaml"
    latest = run / "checkpoints" / "latest"
    assert {p.name for p in latest.iterdir() if p.is_dir()} == {"generator", "judge", "meta"}
    assert json.loads((latest / "meta" / "config.json").read_text())["model_type"] == "llama"
    state = read_state(latest)
    # The seed joins the generator's samples.
    assert {d["problem"]["id"] for d in state["pool"]} >= {"s0", "s1"}
    phases = {json.loads(line)["phase"] for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert {"judge_sft", "meta_sft", "verifier_rl", "meta_rl", "rl"} <= phases


def test_a_critic_must_read_the_policys_vocabulary(tmp_path: Path, llama_dir: Path) -> None:
    tiny, tiny_tok = load_model(ModelSpec(), seed=0)  # the character model: about 100 token ids
    critic = ValueModel.from_spec(ModelSpec(path=str(llama_dir)), tiny, seed=0)  # 49k ids: enough
    assert critic.head.in_features == SHAPE["hidden_size"]
    tiny.save_pretrained(tmp_path / "tiny")
    tiny_tok.save_pretrained(tmp_path / "tiny")
    policy, _ = load_model(ModelSpec(path=str(llama_dir)), seed=0)
    with pytest.raises(ValueError, match="same tokenizer"):
        ValueModel.from_spec(ModelSpec(path=str(tmp_path / "tiny")), policy, seed=0)
