"""The critic for PPO/VAPO: a separate value model, a copy of the policy's backbone with a scalar head.

A separate model (rather than a head on the policy) keeps the policy's gradients clean and lets the
critic be pretrained alone (VAPO's value pretraining). It starts from the cold-started policy's
weights, as PPO for language models usually does, or from a model of its own (``rl.critic_model``)
that reads the policy's tokens, so it must share the policy's vocabulary. V_t is read at the position
that predicts response token t, i.e. the value of the state just before the token is emitted.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from selfverify.config.schema import ModelSpec
from selfverify.runtime.models import load_model
from selfverify.runtime.rollout import Rollout, position_ids

HEAD_FILE = "value_head.safetensors"


class ValueModel(torch.nn.Module):
    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)  # start at V = 0: no bias before the first returns arrive
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: torch.nn.Module) -> ValueModel:
        critic = cls(copy.deepcopy(policy.get_decoder()))
        return critic.to(device=policy.device, dtype=policy.dtype)

    @classmethod
    def from_spec(cls, spec: ModelSpec, policy: torch.nn.Module, seed: int) -> ValueModel:
        """The critic ``rl.critic_model`` names: a copy of ``policy`` when its path is unset, else that
        model's backbone, which must embed every token id of the policy's vocabulary."""
        if spec.path is None:
            return cls.from_policy(policy)
        model, _ = load_model(spec, seed)
        have, need = model.get_input_embeddings().num_embeddings, policy.get_input_embeddings().num_embeddings
        if have < need:
            raise ValueError(
                f"rl.critic_model {spec.path}: embeds {have} token ids, the policy's vocabulary has {need}; "
                "a critic reads the policy's tokens, so it needs the same tokenizer"
            )
        return cls(model.get_decoder()).to(device=model.device, dtype=model.dtype)

    def forward(self, batch: Rollout) -> torch.Tensor:
        """Values [B, T] for the response tokens of ``batch``."""
        device = self.head.weight.device
        attention = batch.attention_mask.to(device)
        positions = position_ids(attention)
        hidden = self.backbone(
            input_ids=batch.input_ids.to(device),
            attention_mask=attention,
            position_ids=positions,
            use_cache=False,
        ).last_hidden_state
        return self.head(hidden[:, batch.prompt_len - 1 : -1]).squeeze(-1).float().cpu()

    def save(self, path: Path) -> None:
        self.backbone.save_pretrained(path, safe_serialization=True)
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, path / HEAD_FILE)

    @classmethod
    def load(cls, path: Path) -> ValueModel:
        model = cls(AutoModel.from_pretrained(path, dtype=torch.float32))
        model.head.load_state_dict(load_file(path / HEAD_FILE))
        return model
