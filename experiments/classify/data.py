"""Datasets by name: byte-tokenised text classification tasks built from local material.

Every dataset is a pure function of its name and sequence length (no downloads, a
fixed split seed), so every rank of a job and every cluster builds the same one.
The fingerprint in :class:`ClassificationData` lets results from different
machines be checked for that: ``pydoc-topics`` follows the Python version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch.utils.data import TensorDataset

VOCAB_SIZE = 256  # byte-level tokens: no tokenizer to ship or download
SEQ_LEN = 128
VAL_FRACTION = 0.1
# Independent of the training seed: runs with different seeds evaluate on the same data.
SPLIT_SEED = 0


@dataclass(frozen=True)
class ClassificationData:
    train: TensorDataset  # (tokens int64 [N, seq_len], labels int64 [N])
    val: TensorDataset
    class_names: tuple[str, ...]
    seq_len: int
    fingerprint: str  # sha256 of all tokens and labels, train then val
    vocab_size: int = VOCAB_SIZE

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


Builder = Callable[[int], ClassificationData]
_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: make ``builder(seq_len)`` available as dataset ``name``."""

    def add(builder: Builder) -> Builder:
        _BUILDERS[name] = builder
        return builder

    return add


def names() -> list[str]:
    return sorted(_BUILDERS)


def load(name: str, seq_len: int = SEQ_LEN) -> ClassificationData:
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid datasets: {', '.join(names())}") from None
    return builder(seq_len)


def chunk_classification(texts: Mapping[str, bytes], seq_len: int) -> ClassificationData:
    """Classify fixed-size byte chunks by the text they come from.

    Each class keeps the same number of chunks (the smallest class's), so chance
    accuracy is exactly 1/K; chunks do not overlap, so no validation chunk shares
    bytes with a training chunk. The validation split is stratified and seeded.
    """
    chunks = {label: _chunks(text, seq_len) for label, text in texts.items()}
    per_class = min(len(c) for c in chunks.values())
    num_val = max(1, round(per_class * VAL_FRACTION))
    if per_class <= num_val:
        raise ValueError(f"a text has {per_class} chunk(s) of {seq_len} bytes: too few to split into train and validation")
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    train: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])  # rows, labels
    val: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    for index, label in enumerate(texts):
        order = torch.randperm(len(chunks[label]), generator=generator)[:per_class]
        picked = chunks[label][order]
        for split, rows in ((val, picked[:num_val]), (train, picked[num_val:])):
            split[0].append(rows)
            split[1].append(torch.full((len(rows),), index, dtype=torch.int64))
    train_set = TensorDataset(torch.cat(train[0]), torch.cat(train[1]))
    val_set = TensorDataset(torch.cat(val[0]), torch.cat(val[1]))
    return ClassificationData(train_set, val_set, tuple(texts), seq_len, _fingerprint(train_set, val_set))


def _chunks(text: bytes, seq_len: int) -> torch.Tensor:
    usable = len(text) // seq_len * seq_len
    return torch.frombuffer(bytearray(text[:usable]), dtype=torch.uint8).long().view(-1, seq_len)


def _fingerprint(*datasets: TensorDataset) -> str:
    digest = hashlib.sha256()
    for dataset in datasets:
        for tensor in dataset.tensors:
            digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


PYDOC_TOPICS = 8  # the largest topics; smaller ones would leave few chunks per class


@register("pydoc-topics")
def pydoc_topics(seq_len: int) -> ClassificationData:
    """Which of CPython's K largest help topics (``pydoc_data.topics``) a chunk of bytes comes from."""
    from pydoc_data.topics import topics

    encoded = {name: text.encode() for name, text in topics.items()}
    largest = sorted(encoded, key=lambda name: (-len(encoded[name]), name))[:PYDOC_TOPICS]
    return chunk_classification({name: encoded[name] for name in largest}, seq_len)
