"""Tokenisers for the language model: a small byte-level BPE trained on the run's own text, or plain bytes.

The BPE comes from Hugging Face's ``tokenizers`` (the ``train`` extra installs
it); its training is deterministic, so every rank and every requeued run of a job
gets the same merges from the same text. It is cached under a name made from what
determines it (text, vocabulary size, library version): a requeued run reuses it,
and a file lock makes the ranks of a node train it once. Without the library,
bytes: a 256-token vocabulary that needs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BPE_VOCAB = 512  # enough merges for common words and indentation, small enough to train in a second
KINDS = ("auto", "bpe", "bytes")


def bpe_available() -> bool:
    return importlib.util.find_spec("tokenizers") is not None


@dataclass(frozen=True)
class Tokenizer:
    name: str  # "bytes" or "bpe-512"; recorded with the results
    vocab_size: int
    _bpe: Any = None  # a tokenizers.Tokenizer, or None for bytes

    def encode(self, texts: Sequence[str]) -> list[int]:
        """The token ids of ``texts``, one after the other."""
        if self._bpe is None:
            return [byte for text in texts for byte in text.encode()]
        return [token for encoding in self._bpe.encode_batch(list(texts)) for token in encoding.ids]

    def decode(self, ids: Sequence[int]) -> str:
        if self._bpe is None:
            return bytes(ids).decode(errors="replace")
        return self._bpe.decode(list(ids))


def get(kind: str, training_texts: Sequence[str], cache_dir: Path | None) -> Tokenizer:
    """The tokeniser ``kind`` (auto: BPE when ``tokenizers`` is installed, else bytes), trained on ``training_texts``."""
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer {kind!r}; valid tokenizers: {', '.join(KINDS)}")
    if kind == "bytes" or (kind == "auto" and not bpe_available()):
        return Tokenizer("bytes", 256)
    if not bpe_available():
        raise ValueError("--tokenizer bpe needs the tokenizers package (pip install tokenizers, or the project's train extra)")
    return _bpe(training_texts, BPE_VOCAB, cache_dir)


def _bpe(texts: Sequence[str], vocab_size: int, cache_dir: Path | None) -> Tokenizer:
    import tokenizers

    key = hashlib.sha256(f"{tokenizers.__version__}\0{vocab_size}\0".encode())
    for text in texts:
        key.update(text.encode())
        key.update(b"\0")
    name = f"bpe-{vocab_size}"
    if cache_dir is None:
        return Tokenizer(name, vocab_size, _train(texts, vocab_size))
    path = cache_dir / f"{name}-{key.hexdigest()[:16]}.json"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / ".lock"):
        if not path.is_file():
            trained = _train(texts, vocab_size)
            partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            trained.save(str(partial))
            os.replace(partial, path)  # a reader sees no file or the whole file
    bpe = tokenizers.Tokenizer.from_file(str(path))
    return Tokenizer(name, bpe.get_vocab_size(), bpe)


def _train(texts: Sequence[str], vocab_size: int):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = HFTokenizer(models.BPE())
    # Byte-level: every string encodes (no unknown token), and decoding gives the text back.
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer)
    return bpe


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
