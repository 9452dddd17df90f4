"""Public step-level PRMs (selfverify/judges/step_prm.py) on random-init stand-ins of the real architectures.

Tiny MistralForCausalLM (Math-Shepherd) and Qwen2ForTokenClassification with two labels (Qwen2.5-Math-PRM),
with word-level tokenizers built here from the fixture text, saved with ``save_pretrained`` and loaded
back through ``selfverify.score`` and ``load_verifier`` exactly as a downloaded checkpoint would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import (
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForTokenClassification,
)

from selfverify.judges.base import VerifyInput
from selfverify.judges.registry import VerifierSpecError, load_verifier
from selfverify.judges.step_prm import QWEN_SEPARATOR, QWEN_SYSTEM, STEP_TAG
from selfverify.score import main

PB_SAMPLE = Path(__file__).resolve().parent / "fixtures" / "processbench_sample.jsonl"
PB_IDS = ["pb-ok", "pb-arith", "pb-latex", "pb-first", "pb-logic", "pb-chain", "pb-percent", "pb-nolabel"]
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def fixture_items() -> list[VerifyInput]:
    """The well-formed ProcessBench fixture records."""
    items = []
    for line in PB_SAMPLE.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("id") in PB_IDS:
            items.append(VerifyInput(record["problem"], record["steps"]))
    assert len(items) == len(PB_IDS)
    return items


def word_tokenizer(specials: list[str], words: str = "") -> Tokenizer:
    """A word-level tokenizer over the fixture's words, ``words`` and the special tokens."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", *specials])
    tok.train_from_iterator([PB_SAMPLE.read_text(encoding="utf-8"), words, "Step 1 2 3 4 5 6 : + -"], trainer)
    return tok


# Both stand-ins: tiny random-init models of the real architectures.
TINY_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


def save_math_shepherd(path: Path, *, tag: bool = True) -> Path:
    """A Mistral-style causal LM whose tokenizer adds <s> and has no pad token (as Mistral's)."""
    tok = word_tokenizer(["<s>", "</s>"], STEP_TAG if tag else "")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]"
    )
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=len(tokenizer), **TINY_SHAPE)
    MistralForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_qwen_prm(path: Path, num_labels: int = 2) -> Path:
    """A Qwen2 token classifier with a chat template and ``<extra_0>`` as a special token."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", QWEN_SEPARATOR]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=word_tokenizer(specials, "system user assistant"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=specials[1:],
    )
    tokenizer.chat_template = QWEN_TEMPLATE
    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=len(tokenizer), num_labels=num_labels, **TINY_SHAPE)
    Qwen2ForTokenClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("public_prms")
    return {
        "math-shepherd": save_math_shepherd(root / "math-shepherd"),
        "qwen-prm": save_qwen_prm(root / "qwen-prm"),
    }


def spec(dirs: dict[str, Path], kind: str) -> str:
    return f"{kind}:{dirs[kind]}"


def by_hand(kind: str, verifier, item: VerifyInput) -> list[float]:
    """Step scores as each model card computes them: one full forward pass, the tag ids searched."""
    tokenizer, model = verifier.tokenizer, verifier.model
    if kind == "math-shepherd":
        output = "\n".join(f"Step {i}: {step} {STEP_TAG}" for i, step in enumerate(item.steps, 1))
        ids = torch.tensor([tokenizer.encode(f"{item.problem} {output}")])
        pair = tokenizer.encode("+ -", add_special_tokens=False)
        with torch.no_grad():
            probs = model(ids).logits[0][:, pair].softmax(-1)[:, 0]
        tag_id = tokenizer.convert_tokens_to_ids(STEP_TAG)
    else:
        messages = [
            {"role": "system", "content": QWEN_SYSTEM},
            {"role": "user", "content": item.problem},
            {"role": "assistant", "content": QWEN_SEPARATOR.join(item.steps) + QWEN_SEPARATOR},
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        ids = torch.tensor([tokenizer.encode(text)])
        with torch.no_grad():
            probs = model(ids).logits[0].softmax(-1)[:, 1]
        tag_id = tokenizer.convert_tokens_to_ids(QWEN_SEPARATOR)
    return probs[ids[0] == tag_id].tolist()


@pytest.mark.parametrize("kind", ["math-shepherd", "qwen-prm"])
def test_score_cli(kind: str, dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, metrics = tmp_path / "scored.jsonl", tmp_path / "metrics.json"
    argv = ["--verifier", spec(dirs, kind), "--input", str(PB_SAMPLE), "--output", str(out)]
    assert main([*argv, "--metrics-json", str(metrics), "--batch-size", "3"]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == PB_IDS
    for record, item in zip(records, fixture_items(), strict=True):
        assert len(record["step_scores"]) == len(item.steps)
        assert all(0.0 <= s <= 1.0 for s in record["step_scores"])
        below = [i for i, s in enumerate(record["step_scores"]) if s < 0.5]
        assert record["earliest_error"] == (below[0] if below else -1)
        assert record["score"] == (0.0 if below else 1.0)
    summary = json.loads(metrics.read_text(encoding="utf-8"))
    assert summary["records"] == len(PB_IDS) and summary["skipped"] == 6
    assert {"acc_err", "acc_corr", "f1"} <= summary.keys()
    assert "ProcessBench: acc_err" in capsys.readouterr().out
    # --threshold re-derives earliest_error from the same scores.
    assert main([*argv, "--threshold", "1.0"]) == 0
    rederived = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(r["earliest_error"] == 0 for r in rederived)


@pytest.mark.parametrize("kind", ["math-shepherd", "qwen-prm"])
def test_scores_equal_full_forward_softmax(kind: str, dirs: dict[str, Path]) -> None:
    verifier = load_verifier(spec(dirs, kind))
    items = fixture_items()
    scores = verifier.step_scores(items)
    for item, got in zip(items, scores, strict=True):
        assert got == pytest.approx(by_hand(kind, verifier, item), abs=1e-5)
        assert len(set(got)) > 1  # the positions differ in what they see: not one value repeated


@pytest.mark.parametrize("kind", ["math-shepherd", "qwen-prm"])
def test_batching_with_padding_changes_nothing(kind: str, dirs: dict[str, Path]) -> None:
    items = fixture_items()
    one = load_verifier(spec(dirs, kind), batch_size=1)
    four = load_verifier(spec(dirs, kind), batch_size=4)
    assert len({len(one.encode(item).ids) for item in items}) > 1  # batches of four are padded
    for a, b in zip(one.step_scores(items), four.step_scores(items), strict=True):
        assert b == pytest.approx(a, abs=1e-5)


def test_tags_in_the_text_are_not_step_boundaries(dirs: dict[str, Path]) -> None:
    """Only the tags the encoder wrote are read: ``ки`` in a step, ``<extra_0>`` in a problem are text."""
    shepherd = load_verifier(spec(dirs, "math-shepherd"))
    qwen = load_verifier(spec(dirs, "qwen-prm"))
    item = VerifyInput(f"Tom has {STEP_TAG} eggs {QWEN_SEPARATOR}", [f"36 {STEP_TAG} eggs", "31", ""])
    assert [len(s) for s in shepherd.step_scores([item])] == [3]
    assert [len(s) for s in qwen.step_scores([item])] == [3]
    empty = qwen.verify_batch([VerifyInput("Tom has 3 boxes", [])])[0]
    assert (empty.step_scores, empty.earliest_error, empty.score) == ([], -1, 0.0)


def test_too_long_is_an_error_and_the_cli_skips_it(dirs: dict[str, Path], tmp_path: Path) -> None:
    verifier = load_verifier(spec(dirs, "qwen-prm"), max_length=60)
    with pytest.raises(ValueError, match="over the model's limit of 60"):
        verifier.validate(VerifyInput("eggs " * 60, ["36"]))
    long_input = tmp_path / "long.jsonl"
    records = [
        {"id": "short", "problem": "eggs", "steps": ["36"]},
        {"id": "long", "problem": "eggs " * 300, "steps": ["36"]},
    ]
    long_input.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["--verifier", spec(dirs, "qwen-prm"), "--input", str(long_input), "--output", str(out)]) == 0
    assert [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()] == ["short"]


def test_missing_directory_names_the_spec(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = f"math-shepherd:{tmp_path / 'nowhere'}"
    argv = ["--verifier", missing, "--input", str(PB_SAMPLE), "--output", str(tmp_path / "o.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert missing in err and "no such directory" in err
    with pytest.raises(VerifierSpecError, match="expected qwen-prm:<directory or hub name>"):
        load_verifier("qwen-prm:")


def test_tokenizer_without_the_step_tag(tmp_path: Path) -> None:
    path = save_math_shepherd(tmp_path / "no-tag", tag=False)
    with pytest.raises(VerifierSpecError, match=f"math-shepherd:{path}.*no token for 'ки'"):
        load_verifier(f"math-shepherd:{path}")


def test_wrong_model_shape(dirs: dict[str, Path], tmp_path: Path) -> None:
    # A causal LM is no token classifier and the reverse: their heads' weights are missing.
    with pytest.raises(VerifierSpecError, match="qwen-prm:.*no weights for score"):
        load_verifier(f"qwen-prm:{dirs['math-shepherd']}")
    with pytest.raises(VerifierSpecError, match="math-shepherd:.*no weights for lm_head"):
        load_verifier(f"math-shepherd:{dirs['qwen-prm']}")
    three = save_qwen_prm(tmp_path / "three-labels", num_labels=3)
    with pytest.raises(VerifierSpecError, match="3 labels, not 2"):
        load_verifier(f"qwen-prm:{three}")


def test_device_option_refused_by_a_verifier_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["--verifier", "rule", "--input", str(PB_SAMPLE), "--output", str(tmp_path / "o.jsonl")]
    assert main([*argv, "--device", "cpu"]) == 2
    assert "does not take device" in capsys.readouterr().err
