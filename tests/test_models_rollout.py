"""Tokenizer, tiny model, checkpoints in HF format, and the rollout tensor layout."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from selfverify.config.schema import ModelSpec
from selfverify.runtime.checkpoint import read_state, write_state
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.rollout import encode_pairs, response_logprobs, sample
from selfverify.runtime.workers import LMWorker
from selfverify.utils.io import recover, write_atomically

SPEC = ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)


def test_char_tokenizer_round_trip():
    tok = build_char_tokenizer()
    text = "Q:12+7*3-4\n12+7=19\nA:-53 Step 2 is wrong."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id in tok("é", add_special_tokens=False)["input_ids"]


def save_checkpoint(path, model, tok, state):
    """A worker's checkpoint, written as the pipelines write one."""

    def write(tmp):
        LMWorker(model, tok).save(tmp)
        write_state(tmp, state)

    write_atomically(path, write)


def saved_state(path):
    return read_state(path)


def test_checkpoint_loads_with_auto_classes(tmp_path):
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    save_checkpoint(tmp_path / "ckpt", model, tok, {"step": 3})
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    tok2 = AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    ids = torch.tensor([tok2("Q:1+2\n", add_special_tokens=False)["input_ids"]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    assert saved_state(tmp_path / "ckpt") == {"step": 3}
    # Overwriting is atomic: a crash between the two renames leaves only ".old", which recover restores.
    save_checkpoint(tmp_path / "ckpt", model, tok, {"step": 4})
    (tmp_path / "ckpt").rename(tmp_path / "ckpt.old")
    recover(tmp_path / "ckpt")
    assert saved_state(tmp_path / "ckpt") == {"step": 4}
    # A crash while the last swap deleted ".old" leaves part of it beside a complete checkpoint: the
    # next save (and recover) clear it away.
    save_checkpoint(tmp_path / "stale", model, tok, {"step": 1})
    (tmp_path / "stale").rename(tmp_path / "ckpt.old")
    (tmp_path / "ckpt.old" / "model.safetensors").unlink()
    save_checkpoint(tmp_path / "ckpt", model, tok, {"step": 5})
    assert saved_state(tmp_path / "ckpt") == {"step": 5} and not (tmp_path / "ckpt.old").exists()


def hf_generate(model, tok, prompts, **kw):
    return model.generate(
        **tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False),
        top_k=0, top_p=1.0, max_new_tokens=12, pad_token_id=tok.pad_token_id, return_dict_in_generate=True,
        **kw,
    )  # fmt: skip


def test_sampled_logprobs_match_recomputed_logprobs_with_left_padding():
    """Sampling and the training forward pass agree on positions and masking: until a row stops (no row
    stops here), the sampler draws what generate() draws from one seed, and the update's recomputed
    log-probs are generate()'s per-step log-softmax."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    prompts = ["Q:1+2\n", "Q:12+7*3-4\n", "Q:5-9\n"]
    rollout = sample(model, tok, prompts, max_new_tokens=12, seed=0)
    assert rollout.truncated.all()  # every row ran to the limit
    lp = response_logprobs(model, rollout)
    assert lp.shape == rollout.response_mask.shape == (3, 12)
    torch.manual_seed(0)
    gen = hf_generate(model, tok, prompts, do_sample=True, output_logits=True, eos_token_id=tok.eos_token_id)
    assert torch.equal(gen.sequences, rollout.input_ids)
    gen_lp = torch.stack(gen.logits, dim=1).log_softmax(-1).gather(-1, rollout.responses[..., None])[..., 0]
    torch.testing.assert_close(lp, gen_lp, atol=1e-4, rtol=1e-4)


def test_rows_sharing_a_prompt_decode_what_generate_decodes():
    """Rows with one prompt (a group's samples) are prefilled once and copied, and greedily decoded once:
    the draws are still generate()'s, which prefills and decodes every row, draw for draw, and so are
    the greedy responses."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    prompts = ["Q:1+2\n"] * 3 + ["Q:12+7*3-4\n"] * 2 + ["Q:5-9\n"]
    rollout = sample(model, tok, prompts, max_new_tokens=12, seed=3)
    assert rollout.truncated.all()  # no row stops, so both draw for every row at every step
    assert len({tuple(r) for r in rollout.responses[:3].tolist()}) == 3  # the group's samples differ
    torch.manual_seed(3)
    gen = hf_generate(model, tok, prompts, do_sample=True)
    assert torch.equal(gen.sequences, rollout.input_ids)
    greedy = sample(model, tok, prompts, max_new_tokens=12, greedy=True)
    gen = hf_generate(model, tok, prompts, do_sample=False)
    assert torch.equal(gen.sequences, greedy.input_ids)


def test_rows_that_stop_leave_the_batch_and_the_rest_decode_as_generate_does():
    """Greedy decoding with a stop token some rows reach early: the rows that go on (their cache and
    mask cut down to them) produce generate()'s tokens, and the stopped rows are padded after the stop."""
    tok = build_char_tokenizer()
    model = build_model(SPEC, tok, seed=0)
    torch.manual_seed(0)
    with torch.no_grad():  # large random weights: greedy tokens that differ between rows and steps
        for weight in (p for p in model.parameters() if p.dim() == 2):
            weight.normal_(0, 0.5)
    prompts = ["Q:1+2\n", "Q:12+7*3-4\n", "Q:5-9\n", "Q:8+8-1\n"]
    first = sample(model, tok, prompts, max_new_tokens=12, greedy=True).responses

    # Stop at the token whose first appearance differs most between rows (early in some, late or never
    # in others).
    def spread(token: int) -> int:
        return len({row.tolist().index(token) if token in row else -1 for row in first})

    model.generation_config.eos_token_id = [tok.eos_token_id, max(set(first.flatten().tolist()), key=spread)]
    ours = sample(model, tok, prompts, max_new_tokens=12, greedy=True)
    stops = ours.response_mask.sum(-1)
    assert len(set(stops.tolist())) > 1  # rows left the batch at different steps
    gen = hf_generate(model, tok, prompts, do_sample=False, eos_token_id=model.generation_config.eos_token_id)
    width = ours.input_ids.shape[1]
    assert torch.equal(gen.sequences[:, :width], ours.input_ids)
    assert (ours.responses[ours.response_mask == 0] == tok.pad_token_id).all()


def test_response_mask_stops_after_eos_and_flags_truncation():
    tok = build_char_tokenizer()
    batch = encode_pairs(tok, ["Q:1+2\n", "Q:12+7\n"], ["1+2=3\nA:3", "12+7=19\nA:19"])
    assert batch.response_mask.sum(-1).tolist() == [len("1+2=3\nA:3") + 1, len("12+7=19\nA:19") + 1]
    assert batch.input_ids[0, batch.prompt_len + 9].item() == tok.eos_token_id
    model = build_model(SPEC, tok, seed=0)
    out = sample(model, tok, ["Q:1+2\n"] * 4, max_new_tokens=3, seed=1)
    assert out.responses.shape[1] <= 3
    for row, trunc in zip(out.responses, out.truncated, strict=True):
        assert bool(trunc) == (tok.eos_token_id not in row.tolist())
