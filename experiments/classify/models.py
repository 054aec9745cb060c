"""Networks by name: a byte-level Transformer encoder classifier in three sizes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    dropout: float = 0.1


# tiny: seconds on two CPU cores (the tests and the local pipeline); base: ~25M
# parameters, enough work per step to measure GPUs and their interconnect.
CONFIGS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=64, n_layers=2, n_heads=2, d_ff=128),
    "small": ModelConfig(d_model=256, n_layers=4, n_heads=4, d_ff=1024),
    "base": ModelConfig(d_model=512, n_layers=8, n_heads=8, d_ff=2048),
}


def names() -> list[str]:
    return list(CONFIGS)


def config(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(names())}") from None


class TransformerClassifier(nn.Module):
    """Token and position embeddings, pre-norm Transformer encoder, mean-pool, linear head."""

    def __init__(self, config: ModelConfig, vocab_size: int, seq_len: int, num_classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, config.d_model)
        self.position = nn.Parameter(torch.randn(1, seq_len, config.d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            config.d_model,
            config.n_heads,
            config.d_ff,
            config.dropout,
            activation="gelu",
            batch_first=True,  # the layout in which the layer calls fused scaled_dot_product_attention
            norm_first=True,  # pre-norm trains stably without a learning-rate warm-up
        )
        # Nested tensors only help with padding masks, which fixed-size chunks never need.
        self.encoder = nn.TransformerEncoder(layer, config.n_layers, norm=nn.LayerNorm(config.d_model), enable_nested_tensor=False)
        self.head = nn.Linear(config.d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        return self.head(self.encoder(x).mean(dim=1))


def build(name: str, vocab_size: int, seq_len: int, num_classes: int) -> TransformerClassifier:
    return TransformerClassifier(config(name), vocab_size, seq_len, num_classes)


def matmul_parameters(config: ModelConfig) -> int:
    """The weights that multiply activations in every token's path: per layer the attention's
    q, k, v and output projections (4 d^2) and the feed-forward pair (2 d d_ff)."""
    return config.n_layers * (4 * config.d_model**2 + 2 * config.d_model * config.d_ff)


def flops_per_sample(config: ModelConfig, seq_len: int, num_classes: int) -> int:
    """Training FLOPs of one sequence, the count MFU figures are quoted with (as gpt.flops_per_token):
    6 per matmul weight per token (forward 2, backward 4), 12 L d T per token for attention's
    scores and weighted sum (the encoder attends both ways: the whole T x T square is computed),
    and the head's 6 d C once per sequence, after pooling. Embeddings are look-ups: none.
    """
    per_token = 6 * matmul_parameters(config) + 12 * config.n_layers * config.d_model * seq_len
    return seq_len * per_token + 6 * config.d_model * num_classes
