"""Goldfish loss (Hans et al. 2024, arXiv 2406.10209): leave about 1 in k tokens out of the loss.

A token is left out when a hash of the ``h`` tokens before it falls below 1/k.
The choice depends on nothing but token ids: a passage met again, in another
batch, on another rank or after a resume, loses the same tokens, so the model
never sees the whole of it as a target and cannot learn to reproduce it verbatim.

The hash: the window's ids weighted by fixed random coefficients, summed modulo
the prime ``TABLE_SIZE`` (order matters, unlike the reference code's product of
ids, which is also 0 for every window containing id 0), then looked up in a
fixed table of uniform random numbers, as the reference does. Both the table and
the coefficients are drawn on the CPU from fixed seeds and then moved, so every
device sees the same values. Unlike the reference code, which hashes a window
that ends with the target itself, the window is the h tokens *before* the
target, as the paper defines it. The first h positions of a sequence, which have
fewer than h tokens before them, are always kept.
"""

from __future__ import annotations

import functools
from typing import TypeGuard

import torch
import torch.nn.functional as F

DEFAULT_H = 13  # the paper's context width
TABLE_SIZE = 1_000_003  # a prime, as in the reference code
TABLE_SEED = 2971215073  # the reference code's seed (a prime Fibonacci number)
COEFFICIENT_SEED = 0
IGNORE = -100  # F.cross_entropy's ignore_index


def enabled(k: int | None) -> TypeGuard[int]:
    return bool(k)


def check(k: int | None, h: int) -> None:
    """Raise ValueError on settings that make no goldfish loss."""
    if k is not None and (k < 0 or k == 1):
        raise ValueError(f"goldfish k must be at least 2 (1 would drop every token), or 0 to disable it; not {k}")
    if h < 1:
        raise ValueError(f"goldfish h (the hashed context) must be at least 1 token; not {h}")


@functools.cache
def _table(device: torch.device) -> torch.Tensor:
    return torch.rand(TABLE_SIZE, generator=torch.Generator().manual_seed(TABLE_SEED)).to(device)


@functools.cache
def _coefficients(h: int, device: torch.device) -> torch.Tensor:
    # Below TABLE_SIZE (~2^20), times ids below 2^31, summed h times: far from int64's limit.
    return torch.randint(1, TABLE_SIZE, (h,), generator=torch.Generator().manual_seed(COEFFICIENT_SEED)).to(device)


def mask(tokens: torch.Tensor, k: int | None, h: int = DEFAULT_H) -> torch.Tensor:
    """Which positions of ``tokens`` (..., seq) count in the loss: True = kept.

    All True when ``k`` is None or 0. Position i >= h is dropped when the hash of
    ``tokens[..., i-h:i]`` is below 1/k.
    """
    check(k, h)
    kept = torch.ones(tokens.shape, dtype=torch.bool, device=tokens.device)
    if not enabled(k) or tokens.shape[-1] <= h:
        return kept
    # unfold: every window of h consecutive tokens; the last one precedes no position.
    windows = tokens.long().unfold(-1, h, 1)[..., :-1, :]
    keys = (windows * _coefficients(h, tokens.device)).sum(dim=-1) % TABLE_SIZE
    kept[..., h:] = _table(tokens.device)[keys] >= 1 / k
    return kept


def loss(logits: torch.Tensor, targets: torch.Tensor, k: int | None, h: int = DEFAULT_H) -> torch.Tensor:
    """Mean cross-entropy over the targets the mask keeps; plain cross-entropy when ``k`` is None or 0.

    ``logits`` (batch, seq, vocab) predict ``targets`` (batch, seq); the mask is
    taken over the targets, so target i is judged by the h targets before it.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])
    if not enabled(k):
        check(k, h)
        return F.cross_entropy(flat_logits, targets.reshape(-1))
    # ignore_index rather than boolean indexing: the same shapes every step, no host sync on GPUs.
    masked = targets.masked_fill(~mask(targets, k, h), IGNORE)
    return F.cross_entropy(flat_logits, masked.reshape(-1), ignore_index=IGNORE)
