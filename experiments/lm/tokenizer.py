"""The language model's tokeniser, trained once per corpus: a small byte-level BPE, or plain bytes.

``train`` (``python -m experiments.lm.prepare tokenizer``) fits the BPE from Hugging
Face's ``tokenizers`` (the ``train`` extra installs it) on a seeded sample of the
*training* split, so no validation text shapes it: all of a small source's training
documents, else those of seeded parts of the source (:meth:`Source.parts`) until the
sample holds ``sample_bytes``, so its cost grows with the sample, not the corpus. It
writes ``tokenizer.json`` (Hugging Face's format; none for bytes) and
``tokenizer-meta.json`` (:class:`TokenizerMeta`), whose ``sha256`` ties every shard
to the tokeniser that made it. Bytes, a 256-token vocabulary, needs no package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lm import sources
from experiments.lm.sources import DataError, Source

BPE_VOCAB = 512  # enough merges for common words and indentation, small enough to train in a second
KINDS = ("auto", "bpe", "bytes")
SAMPLE_BYTES = 64 << 20
SAMPLE_PARTS = 1024  # a large source's sample is drawn from this many parts of it
SAMPLE_SEED = 0
FILE, META = "tokenizer.json", "tokenizer-meta.json"
_BYTES_SHA = hashlib.sha256(b"bytes").hexdigest()  # what ties shards to the bytes "tokeniser", which has no file


def bpe_available() -> bool:
    return importlib.util.find_spec("tokenizers") is not None


def resolve(kind: str) -> str:
    """``bpe`` or ``bytes`` for a ``--tokenizer`` choice (auto: BPE when ``tokenizers`` is installed)."""
    if kind not in KINDS:
        raise DataError(f"unknown tokenizer {kind!r}; valid tokenizers: {', '.join(KINDS)}")
    if kind == "bpe" and not bpe_available():
        raise DataError("--tokenizer bpe needs the tokenizers package (pip install tokenizers); valid without it: auto, bytes")
    return "bpe" if kind == "bpe" or (kind == "auto" and bpe_available()) else "bytes"


def folder_of(corpus: Path) -> Path:
    """Where a prepared corpus keeps its tokeniser: beside the shards (``prepare all``), or in
    its own ``tokenizer/`` folder (the pipeline's ``lm-tokenizer`` stage, whose output it is)."""
    return corpus if (corpus / META).is_file() or not (corpus / "tokenizer" / META).is_file() else corpus / "tokenizer"


@dataclass(frozen=True)
class TokenizerMeta:
    kind: str  # "bpe" or "bytes"
    name: str  # "bpe-512" or "bytes": recorded with the results
    vocab_size: int
    sha256: str  # of tokenizer.json; for bytes, of the word "bytes"
    sample_documents: int
    sample_bytes: int
    settings: dict[str, Any]  # what was asked: kind, vocab size, sample size and seed, the source
    tokenizers_version: str | None

    @classmethod
    def read(cls, folder: Path) -> TokenizerMeta:
        path = folder / META
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            raise DataError(f"{folder}: no {META}; run python -m experiments.lm.prepare tokenizer --data SOURCE --out {folder}") from None
        except (ValueError, TypeError) as e:
            raise DataError(f"{path}: not a tokenizer meta file ({e}); prepare the tokenizer again") from None


@dataclass(frozen=True)
class Tokenizer:
    meta: TokenizerMeta
    _bpe: Any = None  # a tokenizers.Tokenizer, or None for bytes

    @property
    def vocab_size(self) -> int:
        return self.meta.vocab_size

    def encode_batch(self, texts: Sequence[str], dtype: np.dtype) -> list[np.ndarray]:
        """The token ids of each text, as ``dtype`` arrays."""
        if self._bpe is None:
            return [np.frombuffer(text.encode(), dtype=np.uint8).astype(dtype) for text in texts]
        return [np.array(encoding.ids, dtype=dtype) for encoding in self._bpe.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        if self._bpe is None:
            return bytes(ids).decode(errors="replace")
        return self._bpe.decode(list(ids))


def load(folder: Path) -> Tokenizer:
    """The tokeniser ``train`` wrote into ``folder``, checked against its meta."""
    meta = TokenizerMeta.read(folder)
    if meta.kind == "bytes":
        return Tokenizer(meta)
    path = folder / FILE
    if not path.is_file() or sources.sha256_file(path) != meta.sha256:
        raise DataError(f"{path}: missing or not the tokenizer its {META} describes; prepare the tokenizer again")
    import tokenizers

    return Tokenizer(meta, tokenizers.Tokenizer.from_file(str(path)))


def train(
    source: Source, out: Path, kind: str = "auto", vocab_size: int = BPE_VOCAB, sample_bytes: int = SAMPLE_BYTES, seed: int = SAMPLE_SEED
) -> TokenizerMeta:
    """Train the tokeniser on a sample of ``source``'s training split into ``out``; kept if already there with these settings."""
    kind = resolve(kind)
    if kind == "bpe" and vocab_size <= 256:
        raise DataError(f"--vocab-size {vocab_size}: a byte-level BPE needs more than 256 tokens (the bytes themselves)")
    settings = {"kind": kind, "vocab_size": vocab_size if kind == "bpe" else 256, "sample_bytes": sample_bytes, "seed": seed}
    settings["source"] = source.description()
    try:
        existing = load(out)
        if existing.meta.settings == settings:
            return existing.meta
    except DataError:
        pass  # none yet, or damaged: train
    out.mkdir(parents=True, exist_ok=True)
    if kind == "bytes":  # nothing to fit: no sample read
        meta = TokenizerMeta("bytes", "bytes", 256, _BYTES_SHA, 0, 0, settings, None)
    else:
        meta = _fit_bpe(source, out, vocab_size, sample_bytes, seed, settings)
    partial = out / f".{META}.{os.getpid()}.tmp"
    partial.write_text(json.dumps(asdict(meta), indent=2) + "\n")
    os.replace(partial, out / META)
    return meta


def _fit_bpe(source: Source, out: Path, vocab_size: int, sample_bytes: int, seed: int, settings: dict[str, Any]) -> TokenizerMeta:
    import tokenizers

    counts = {"documents": 0, "bytes": 0}
    bpe = _train_bpe(_sample(source, sample_bytes, seed, counts), vocab_size)
    if counts["documents"] == 0:
        raise DataError(f"--data {source.name}: the tokeniser's sample holds no training document; give more documents")
    partial = out / f".{FILE}.{os.getpid()}.tmp"
    bpe.save(str(partial))
    os.replace(partial, out / FILE)  # a reader sees no file or the whole file
    size = bpe.get_vocab_size()
    return TokenizerMeta(
        "bpe", f"bpe-{size}", size, sources.sha256_file(out / FILE), counts["documents"], counts["bytes"], settings, tokenizers.__version__
    )


def _sample(source: Source, sample_bytes: int, seed: int, counts: dict[str, int]) -> Iterator[str]:
    """The training documents of all of a small source, or of seeded parts of a large one until they hold ``sample_bytes``."""
    if source.size_bytes <= sample_bytes:
        spans = [(0, source.units)]
    else:
        spans = source.parts(SAMPLE_PARTS)
        random.Random(seed).shuffle(spans)
    for lo, hi in spans:
        for text in source.between(lo, hi):
            if sources.split_of(text) == "train":
                counts["documents"] += 1
                counts["bytes"] += len(text.encode())
                yield text
        if counts["bytes"] >= sample_bytes:
            return


def _train_bpe(texts: Iterator[str], vocab_size: int):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    bpe = HFTokenizer(models.BPE())
    # Byte-level: every string encodes (no unknown token), and decoding gives the text back.
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer)  # deterministic: the same texts give the same merges
    return bpe
