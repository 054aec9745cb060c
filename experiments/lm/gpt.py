"""A GPT-style decoder-only language model in five sizes, and its FLOPs per token for MFU."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class GPTConfig:
    n_layers: int
    d_model: int
    n_heads: int

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model


# tiny: about 1M parameters, seconds on two CPU cores (the tests and the local
# pipeline). The others are GPT-2's shapes: medium (24 x 1024, 16 heads) and large
# (36 x 1280, 20 heads) are the ~350M and ~760M models of the GPU benchmarks. The
# counts quoted for GPT-2 include its 50k-token embedding; with this project's
# small vocabularies medium has ~303M parameters and large ~708M.
CONFIGS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(n_layers=4, d_model=128, n_heads=4),
    "small": GPTConfig(n_layers=12, d_model=768, n_heads=12),
    "medium": GPTConfig(n_layers=24, d_model=1024, n_heads=16),
    "large": GPTConfig(n_layers=36, d_model=1280, n_heads=20),
    # GPT-3 XL's depth and width (24 x 2048) with heads of 128, FlashAttention's best
    # size: 1,211,748,352 parameters with a 512-token vocabulary and 1024 positions
    # (GPT-3's "1.3B" counts its 50k-token embedding). Bigger matmuls fill an H100
    # better than large's 1280-wide ones.
    "xl": GPTConfig(n_layers=24, d_model=2048, n_heads=16),
}


def names() -> list[str]:
    return list(CONFIGS)


def config(name: str) -> GPTConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(names())}") from None


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        # (batch, seq, 3, heads, head_dim) -> three of (batch, heads, seq, head_dim): the fused kernels' layout.
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, d_model // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, d_model))


class Block(nn.Module):
    """Pre-LN: x + attn(ln(x)), then x + mlp(ln(x)). Also FSDP's unit of sharding (see experiments.lm.cli)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = Attention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, config.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and learned position embeddings, pre-LN blocks, final LayerNorm, output tied to the token embedding.

    No dropout: pretraining on more data than it sees twice needs none, and a
    run's result then depends only on its seed and the data order.

    ``activation_checkpointing``: in training, each block keeps only its input and
    computes its activations again in the backward pass, for a larger batch in the same
    memory at about a third more compute (not counted in :func:`flops_per_token`: MFU
    counts the model's FLOPs, not the recomputed ones). The results are the same.

    ``residual_dtype``: the dtype the residual stream (the embeddings, then each block's
    sum) is kept in; None keeps the embeddings' (float32: under autocast every block
    adds its bf16 output into a float32 sum). bfloat16 halves the bytes that the fused
    LayerNorm, residual and gradient kernels move, which are most of a step's time
    outside the matmuls on an H100; it is Megatron-LM's default (its
    ``--fp32-residual-connection`` is off unless asked for). Set it only under autocast:
    the LayerNorms then still compute in float32 and the Linears take bf16 inputs.
    """

    def __init__(self, config: GPTConfig, vocab_size: int, seq_len: int):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(vocab_size, config.d_model)
        self.position = nn.Embedding(seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.activation_checkpointing = False
        self.residual_dtype: torch.dtype | None = None
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2's: N(0, 0.02), and the projections that write into the residual
        # stream scaled by 1/sqrt(2 * layers) so its variance does not grow with depth.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            assert isinstance(block, Block)  # a ModuleList's items are typed Module
            for residual in (block.attn.out, block.mlp[2]):
                assert isinstance(residual, nn.Linear)
                nn.init.normal_(residual.weight, std=0.02 / math.sqrt(2 * self.config.n_layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab) for the next token at every position of ``tokens`` (batch, seq)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        if self.residual_dtype is not None:
            x = x.to(self.residual_dtype)
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return F.linear(self.ln_f(x), self.embed.weight)  # tied: the output projection is the embedding


def build(name: str, vocab_size: int, seq_len: int) -> GPT:
    return GPT(config(name), vocab_size, seq_len)


def parameters(config: GPTConfig, vocab_size: int, seq_len: int) -> int:
    """The number of parameters of ``GPT(config, vocab_size, seq_len)``, without building it."""
    d, d_ff = config.d_model, config.d_ff
    attention = (3 * d * d + 3 * d) + (d * d + d)
    mlp = (d * d_ff + d_ff) + (d_ff * d + d)
    block = attention + mlp + 2 * (2 * d)  # two LayerNorms: weight and bias
    return vocab_size * d + seq_len * d + config.n_layers * block + 2 * d


def flops_per_token(config: GPTConfig, vocab_size: int, seq_len: int) -> int:
    """Training FLOPs per token, 6N + 12 L d T: the formula of PaLM (Chowdhery et al. 2022, appendix B)
    and Megatron-LM (Narayanan et al. 2021), with which MFU figures are quoted.

    6N: forward (2 FLOPs per multiply-add) and backward (twice the forward) through
    N parameters. N leaves out the position embedding, a table look-up, but keeps the
    token embedding, whose tied matrix is also the output projection, a real matmul.
    12 L d T: attention's scores and weighted sum, two T x T x d matmuls per layer,
    x2 FLOPs per multiply-add, x3 for forward plus backward. The full T x T square is
    counted, as the formula does, though causal kernels skip half of it, so that MFU
    stays comparable with published figures.
    """
    n = parameters(config, vocab_size, seq_len) - seq_len * config.d_model
    return 6 * n + 12 * config.n_layers * config.d_model * seq_len
