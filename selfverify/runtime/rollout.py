"""Rollouts: batched, KV-cached sampling of responses, and the tensor layout every update reads.

Layout of a batch: ``input_ids`` = [left-padded prompt block (P tokens) | right-padded response block
(T tokens)]. ``response_mask`` [B, T] marks response tokens up to and including the end-of-sequence
token. Position ids are ``cumsum(attention_mask) - 1`` everywhere, which is what ``generate`` uses for
left-padded prompts, so logprobs recomputed for training match the sampling distribution.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, LlamaForCausalLM, PreTrainedTokenizerBase

from selfverify.algos import logprobs_from_logits
from selfverify.runtime.models import stop_token_ids

# The forward's key/value cache argument and output: ``cache`` in recent transformers, before that
# ``past_key_values``.
_FORWARD_ARGS = inspect.signature(LlamaForCausalLM.forward).parameters
CACHE_ARG = "cache" if "cache" in _FORWARD_ARGS else "past_key_values"
# A training batch runs in this many forward passes, rows grouped by length and each pass padded only to
# its own longest (an SFT step, ``encode_by_length``; a policy update, ``trainer.policy_update``, in at most
# this many, ``length_groups``): rows of 5 and of 35 tokens then do not all cost 35.
LENGTH_GROUPS = 4


@dataclass
class Rollout:
    input_ids: torch.Tensor  # [B, P+T]
    attention_mask: torch.Tensor  # [B, P+T]
    response_mask: torch.Tensor  # [B, T] float
    prompt_len: int
    texts: list[str]  # decoded responses without special tokens
    truncated: torch.Tensor  # [B] bool: stopped by the length limit, not by end-of-sequence

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)

    def trimmed(self) -> Rollout:
        """The same rows without the padding columns all of them share: left of the longest prompt and
        right of the longest response (a micro-batch of short rows then costs its own length)."""
        width = max(1, int(self.response_mask.sum(-1).max().item()))
        lead = int((self.attention_mask[:, : self.prompt_len] == 0).all(0).long().cumprod(0).sum().item())
        end = self.prompt_len + width
        return Rollout(
            self.input_ids[:, lead:end],
            self.attention_mask[:, lead:end],
            self.response_mask[:, :width],
            self.prompt_len - lead,
            self.texts,
            self.truncated,
        )

    def select(self, idx: torch.Tensor | slice) -> Rollout:
        rows = range(len(self.texts))[idx] if isinstance(idx, slice) else idx.tolist()
        return Rollout(
            self.input_ids[idx],
            self.attention_mask[idx],
            self.response_mask[idx],
            self.prompt_len,
            [self.texts[i] for i in rows],
            self.truncated[idx],
        )


def stop_mask(responses: torch.Tensor, stop_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask through the first stop token; rows with none are truncated."""
    is_eos = torch.isin(responses, torch.tensor(list(stop_ids), device=responses.device))
    after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0  # strictly after the first eos
    return (~after_eos).float(), ~is_eos.any(-1)


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str]) -> dict[str, torch.Tensor]:
    return tokenizer(
        prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
    )


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position in its left-padded row (padding at 0)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def distinct_rows(*columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that repeat (a group's prompt, as ids and mask side by side): the first row of each distinct
    one, and each row's index into those."""
    distinct, index = torch.unique(torch.cat(columns, dim=1), dim=0, return_inverse=True)
    rows = torch.arange(len(index), device=index.device)
    first = torch.full_like(distinct[:, 0], len(index)).scatter_reduce(0, index, rows, "amin")
    return first, index


def next_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    cache: DynamicCache,
) -> torch.Tensor:
    """The logits [B, V] of each row's next token, ``cache`` extended by ``input_ids``."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        logits_to_keep=1,
        use_cache=True,
        **{CACHE_ARG: cache},
    )
    return out.logits[:, -1].float()


@torch.inference_mode()  # no autograd bookkeeping at all: 7-10% of the tiny model's decode
def decode(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    stop: Sequence[int],
    pad_id: int,
    max_new_tokens: int,
    temperature: float,
    greedy: bool,
) -> torch.Tensor:
    """Responses [B, T ≤ max_new_tokens] to left-padded prompts, padded with ``pad_id`` after each row's
    stop token: KV-cached decoding in which rows with one prompt share its prefill (greedily, its whole
    decode) and a row that has stopped leaves the batch, so the batch shrinks as responses end
    (``model.generate`` carries finished rows to the longest response: 1.6× the time of 128 tiny-model
    samples of at most 48 tokens). Sampling reads the full softmax of logits / temperature, exactly the
    distribution the update's log-probs recompute; greedy takes the argmax."""
    # Rows with one prompt (a group's samples; a verifier's greedy analyses of samples that came out
    # alike) share work: each distinct prompt is prefilled once and its keys, values and logits copied to
    # its rows, and greedily, where they would write the same response, it is decoded once. On the CPU
    # the same numbers (a row's are computed apart from the others'); a GPU's kernels may round
    # differently with the batch's size, as they do when rows leave it.
    first, inverse = distinct_rows(input_ids, attention_mask)
    if greedy and len(first) < len(input_ids):
        ids, mask = input_ids[first], attention_mask[first]
        return decode(model, ids, mask, stop, pad_id, max_new_tokens, temperature, greedy)[inverse]
    device = input_ids.device
    rows = torch.arange(len(input_ids), device=device)  # the batch rows still decoding
    out = torch.full((len(input_ids), max_new_tokens), pad_id, dtype=torch.long, device=device)
    stop_ids = torch.tensor(list(stop), device=device)
    cache = DynamicCache(config=model.config)
    positions = position_ids(attention_mask)
    logits = next_logits(model, input_ids[first], attention_mask[first], positions[first], cache)[inverse]
    cache.batch_select_indices(inverse)
    width = 0
    for t in range(max_new_tokens):
        if greedy:
            token = logits.argmax(-1)
        else:
            token = torch.multinomial(torch.softmax(logits / temperature, -1), 1)[:, 0]
        out[rows, t], width = token, t + 1
        going = ~torch.isin(token, stop_ids)
        if t + 1 == max_new_tokens or not going.any():
            break
        if not going.all():
            keep = going.nonzero()[:, 0]
            rows, token, attention_mask, positions = (
                rows[keep],
                token[keep],
                attention_mask[keep],
                positions[keep],
            )
            cache.batch_select_indices(keep)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(rows), 1)], dim=1)
        positions = positions[:, -1:] + 1
        logits = next_logits(model, token[:, None], attention_mask, positions, cache)
    return out[:, :width]


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    greedy: bool = False,
    seed: int | None = None,
) -> Rollout:
    """Sample one response per prompt (repeat a prompt G times for a group) with :func:`decode`. Every
    data-parallel rank samples the whole batch from the same random state, so under ZeRO-3, whose
    forward passes gather each layer's weights from all ranks, the ranks run the same passes and stop
    together."""
    enc = encode_prompts(tokenizer, prompts)
    ids, attention = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
    stop = stop_token_ids(model, tokenizer)
    if seed is not None:
        torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    responses = decode(
        model, ids, attention, stop, tokenizer.pad_token_id, max_new_tokens, temperature, greedy
    )
    model.train(was_training)
    responses = responses.cpu()
    out = torch.cat([enc["input_ids"], responses], dim=1)
    prompt_len = enc["input_ids"].shape[1]
    response_mask, truncated = stop_mask(responses, stop)
    attention_mask = torch.cat([enc["attention_mask"], response_mask.long()], dim=1)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return Rollout(out, attention_mask, response_mask, prompt_len, texts, truncated)


def encode_pairs(tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str]) -> Rollout:
    """Teacher-forced batch in rollout layout: each response followed by end-of-sequence."""
    enc = encode_prompts(tokenizer, prompts)
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    width = max(len(r) for r in ids)
    resp = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), width)
    for i, r in enumerate(ids):
        resp[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1.0
    return Rollout(
        torch.cat([enc["input_ids"], resp], dim=1),
        torch.cat([enc["attention_mask"], mask.long()], dim=1),
        mask,
        enc["input_ids"].shape[1],
        list(responses),
        torch.zeros(len(ids), dtype=torch.bool),
    )


def encode_by_length(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str], parts: int = LENGTH_GROUPS
) -> list[Rollout]:
    """One teacher-forced batch as ``encode_pairs`` of up to ``parts`` groups of pairs of similar length
    (by prompt, then response, in characters), each padded only to its own longest. A batch mixing short
    and long pairs (verifier and meta-verifier examples) is then about half padding instead of twice its
    tokens; :func:`selfverify.runtime.trainer.sft_step` averages over the groups together."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), len(responses[i])))
    size = -(-len(order) // max(1, parts))
    return [
        encode_pairs(tokenizer, [prompts[i] for i in group], [responses[i] for i in group])
        for group in (order[j : j + size] for j in range(0, len(order), size))
    ]


def response_logits(model: torch.nn.Module, batch: Rollout, temperature: float = 1.0) -> torch.Tensor:
    """Logits [B, T, V] that predict each response token, scaled by the sampling temperature, on the
    model's device (on a GPU, copying the [B, T, V] tensor to the CPU cost more than the update). Only
    the response block's logits are computed: the prompt's would be [B, P, V] for nothing."""
    device = model.device
    attention = batch.attention_mask.to(device)
    t = batch.response_mask.shape[1]
    logits = model(
        input_ids=batch.input_ids.to(device),
        attention_mask=attention,
        position_ids=position_ids(attention),
        logits_to_keep=t + 1,
        use_cache=False,  # else each forward copies its keys and values into a cache nothing reads
    ).logits[:, :-1]
    return logits.float() / temperature


def length_groups(lengths: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """Row indices in at most ``parts`` groups of like length, each a forward pass padded to its own longest:
    the split of the rows sorted by length that computes the fewest tokens (each pass costs its rows × its
    longest), by dynamic programming over the distinct lengths. Equal counts of rows a pass would cost a
    bimodal batch (answers of 6 tokens, worked solutions of 30) about twice as much padding."""
    order = lengths.argsort(stable=True)
    if not len(order):
        return []
    values, counts = torch.unique_consecutive(lengths[order], return_counts=True)
    through = counts.cumsum(0)  # rows up to and including each distinct length
    # cost[i, j]: one pass over the rows of the i-th to the j-th distinct lengths
    cost = (through[None, :] - (through - counts)[:, None]).double() * values[None, :].double()
    cost = cost.masked_fill(torch.ones_like(cost, dtype=torch.bool).tril(-1), float("inf"))
    best, starts = cost[0], [torch.zeros_like(values)]
    for _ in range(1, parts):  # best[j]: the cheapest split of lengths 0..j; a pass more may start at i
        before = torch.cat([best.new_zeros(1), best[:-1]])  # i = 0: no pass before (fewer passes)
        best, start = (before[:, None] + cost).min(0)
        starts.append(start)
    cuts, j = [len(order)], len(values) - 1
    for start in reversed(starts):  # the last pass's first length, back to the first pass
        i = int(start[j])
        cuts.append(int(through[i] - counts[i]))
        if i == 0:
            break
        j = i - 1
    cuts.reverse()
    return [order[a:b] for a, b in itertools.pairwise(cuts)]


def logits_by_length(
    model: torch.nn.Module,
    batch: Rollout,
    temperature: float = 1.0,
    share_prompts: bool = False,
    parts: int = LENGTH_GROUPS,
) -> list[tuple[torch.Tensor, Rollout, torch.Tensor]]:
    """``batch`` in up to ``parts`` forward passes of rows of like response length, each cut to its own
    longest (:meth:`Rollout.trimmed`): per pass, its rows (indices into ``batch``), their trimmed rollout
    and their :func:`response_logits`. Rows of 5 and of 35 tokens then do not all cost 35.

    ``share_prompts``: each distinct prompt goes through the model once, before the passes, and its keys
    and values serve its rows in every pass (a group's G samples), as in sampling: the same logits and
    gradients up to float rounding, for P + G·T tokens a group instead of G·(P + T).
    """
    groups = length_groups(batch.response_mask.sum(-1), parts)
    if share_prompts:
        batch = batch.trimmed()
        p = batch.prompt_len
        first, index = distinct_rows(batch.input_ids[:, :p], batch.attention_mask[:, :p])
    if not share_prompts or len(first) == len(index):  # no prompt repeats: nothing to share
        out = []
        for rows in groups:
            mb = batch.select(rows).trimmed()
            out.append((rows, mb, response_logits(model, mb, temperature)))
        return out
    device = model.device
    attention = batch.attention_mask[first, :p].to(device)
    prompt = model(
        input_ids=batch.input_ids[first, :p].to(device),
        attention_mask=attention,
        position_ids=position_ids(attention),
        use_cache=True,
        logits_to_keep=1,  # the last prompt position predicts the first response token
    )
    layers = [(layer.keys, layer.values) for layer in prompt[CACHE_ARG].layers]
    out = []
    for rows in groups:
        mb = batch.select(rows).trimmed()
        lead, t = p - mb.prompt_len, mb.response_mask.shape[1]  # prompt columns the pass drops; its width
        rows_prompt = index[rows].to(device)  # each row's distinct prompt: gradients flow back to it
        cache = DynamicCache([(k[rows_prompt, :, lead:], v[rows_prompt, :, lead:]) for k, v in layers])
        attention = mb.attention_mask.to(device)
        responses = model(
            input_ids=mb.responses.to(device),
            attention_mask=attention,
            position_ids=position_ids(attention)[:, mb.prompt_len :],
            logits_to_keep=t,
            **{CACHE_ARG: cache},
        ).logits
        logits = torch.cat([prompt.logits[rows_prompt], responses[:, :-1]], dim=1)
        out.append((rows, mb, logits.float() / temperature))
    return out


def token_logprobs(logits: torch.Tensor, batch: Rollout) -> torch.Tensor:
    """Log-probs [B, T] of ``batch``'s response tokens from its logits (on their device), on the CPU."""
    return logprobs_from_logits(logits, batch.responses.to(logits.device)).cpu()


def response_logprobs(
    model: torch.nn.Module,
    batch: Rollout,
    temperature: float = 1.0,
    micro_batch_size: int | None = None,
    share_prompts: bool = False,
    parts: int = 1,
) -> torch.Tensor:
    """Log-probs [B, T] of the response tokens. Under ``torch.no_grad`` pass ``micro_batch_size``: rows
    are then run that many at a time, so a large vocabulary's [B, T, V] logits never exist at once.
    ``share_prompts``: as in :func:`logits_by_length`, each micro-batch in ``parts`` passes by length."""
    rows = len(batch.texts)
    size = micro_batch_size or rows
    out = torch.zeros(batch.response_mask.shape)
    for i in range(0, rows, size):
        part = batch.select(slice(i, i + size))
        if not share_prompts:
            out[i : i + size] = token_logprobs(response_logits(model, part, temperature), part)
            continue
        for group, mb, logits in logits_by_length(model, part, temperature, share_prompts, parts):
            out[i + group, : mb.response_mask.shape[1]] = token_logprobs(logits, mb)
    return out


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """Stack rollouts of different prompt/response widths into one batch of the same layout."""
    if len(parts) == 1:
        return parts[0]
    p_len = max(r.prompt_len for r in parts)
    t_len = max(r.response_mask.shape[1] for r in parts)
    ids, attn, mask = [], [], []
    for r in parts:
        left, right = p_len - r.prompt_len, t_len - r.response_mask.shape[1]
        ids.append(torch.nn.functional.pad(r.input_ids, (left, right), value=pad_id))
        attn.append(torch.nn.functional.pad(r.attention_mask, (left, right), value=0))
        mask.append(torch.nn.functional.pad(r.response_mask, (0, right), value=0.0))
    return Rollout(
        torch.cat(ids),
        torch.cat(attn),
        torch.cat(mask),
        p_len,
        [t for r in parts for t in r.texts],
        torch.cat([r.truncated for r in parts]),
    )


def line_end_tokens(tokenizer: PreTrainedTokenizerBase, rollout: Rollout) -> list[list[int]]:
    """Per response, the index of the token that ends each non-empty line (a step, as
    ``selfverify.tasks.split_steps`` reads them): the token holding the newline after the line, and
    for the last line the response's last token (its end-of-sequence when it has one)."""
    out, pieces = [], {}  # each distinct token decoded once: this runs on every RL batch
    for row, length in zip(rollout.responses.tolist(), rollout.lengths.long().tolist(), strict=True):
        ends, has_text = [], False
        for j, token in enumerate(row[:length]):
            if token not in pieces:
                pieces[token] = tokenizer.decode([token], skip_special_tokens=True)
            piece = pieces[token]
            for ch in piece:
                if ch == "\n":
                    if has_text:
                        ends.append(j)
                    has_text = False
                elif not ch.isspace():
                    has_text = True
        if has_text:
            ends.append(length - 1)
        out.append(ends)
    return out
