"""Language-model data: a prepared, memory-mapped corpus of token ids, served as rows of ``seq_len + 1`` tokens.

``--data`` is a folder ``python -m experiments.lm.prepare`` wrote (it holds
``tokenizer-meta.json``), or a raw source (:mod:`experiments.lm.sources`: pydoc-topics,
.txt, .jsonl, .parquet, a folder of them, a ``datasets`` folder). A raw source is
prepared once, here, into a cache folder named by what determines its tokens (the
source's content, or path, size and mtime for large files; the tokeniser; the
format), under ``$XDG_CACHE_HOME/orchestrator-lm`` (default ``~/.cache``), with a
file lock so the ranks of a node build it once; then it is read like a prepared
folder. For corpora of more than a few hundred megabytes, prepare them in a
pipeline stage instead, in parallel (:mod:`experiments.lm.prepare`).

The split is per document (:func:`experiments.lm.sources.split_of`), before the
tokeniser, which is trained on training documents only: no validation text is in a
training row or shaped the vocabulary. Rows are windows without overlap over each
shard's token stream (:class:`experiments.lm.shards.TokenRows`); every rank opens
the same corpus and reads only its own rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from experiments.lm import prepare, shards, sources
from experiments.lm import tokenizer as tokenizers
from experiments.lm.shards import TokenRows
from experiments.lm.sources import DEFAULT_SOURCE, VALID_SOURCES, DataError

__all__ = ["DEFAULT_SOURCE", "VALID_SOURCES", "DataError", "LMData", "check_source", "load"]

SHARD_BYTES = 256 << 20  # a raw source is prepared in shards of about this much text, one process per CPU
CACHE_NAME = "orchestrator-lm"


@dataclass(frozen=True)
class LMData:
    train: TokenRows  # rows of seq_len + 1 int64 tokens
    val: TokenRows
    vocab_size: int
    tokenizer: str  # "bytes" or "bpe-512"
    fingerprint: str  # sha256 of the corpus's shard metas and the sequence length
    seq_len: int

    @property
    def train_tokens(self) -> int:
        """Tokens in the training rows."""
        return self.train.tokens


def is_prepared(source: str) -> bool:
    return (tokenizers.folder_of(Path(source)) / tokenizers.META).is_file()


def check_source(source: str) -> None:
    """Fail fast, with the valid choices, on a source that cannot be read: before any process starts."""
    if not is_prepared(source):
        sources.check(source)


def load(source: str, seq_len: int, tokenizer: str = "auto", tokenizer_dir: Path | None = None) -> LMData:
    """Rows of ``seq_len + 1`` tokens from ``source``; with the BPE, its tokenizer.json copied into ``tokenizer_dir``."""
    check_source(source)
    if is_prepared(source):
        corpus = shards.TokenCorpus.open(Path(source))
        if tokenizer not in ("auto", corpus.tokenizer.kind):
            raise DataError(
                f"--data {source} was prepared with the {corpus.tokenizer.name} tokeniser, not {tokenizer}; "
                "give --tokenizer auto, or prepare it again with the tokeniser you want"
            )
    else:
        corpus = cached(source, tokenizers.resolve(tokenizer))
    train, val = corpus.rows("train", seq_len), corpus.rows("val", seq_len)
    for name, split, rows in (("training", "train", train), ("validation", "val", val)):
        if len(rows) == 0:
            raise DataError(
                f"--data {source}: the {name} split ({corpus.tokens(split)} tokens in {len(corpus.shards)} shards) holds no sequence "
                f"of {seq_len + 1} tokens within a shard; give more text, fewer shards or a shorter --seq-len"
            )
    if tokenizer_dir is not None and corpus.tokenizer.kind == "bpe":
        tokenizer_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tokenizers.folder_of(corpus.root) / tokenizers.FILE, tokenizer_dir / tokenizers.FILE)  # to read the model's tokens
    fingerprint = hashlib.sha256(f"{corpus.fingerprint}:{seq_len}".encode()).hexdigest()
    return LMData(train, val, corpus.tokenizer.vocab_size, corpus.tokenizer.name, fingerprint, seq_len)


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / CACHE_NAME


def cached(source: str, kind: str) -> shards.TokenCorpus:
    """The raw ``source`` prepared with the tokeniser ``kind`` (bpe or bytes) in the cache: built by the first process to ask."""
    src = sources.open_source(source)
    key = json.dumps([shards.FORMAT, kind, tokenizers.BPE_VOCAB, _tokenizers_version(kind), src.identity()])
    name = Path(source).stem if source != DEFAULT_SOURCE else source
    folder = cache_root() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        problem = f"--data {source}: cannot make the cache folder {folder} ({e.strerror})"
        raise DataError(f"{problem}; set XDG_CACHE_HOME, or prepare the corpus with experiments.lm.prepare") from None
    with _locked(folder.with_name(folder.name + ".lock")):
        with contextlib.suppress(DataError):
            return shards.TokenCorpus.open(folder)  # built by an earlier run or another rank
        num_shards = max(1, math.ceil(src.size_bytes / SHARD_BYTES))
        workers = min(num_shards, len(os.sched_getaffinity(0)))
        plan = f"{num_shards} shards, {workers} processes"
        print(f"preparing --data {source} into {folder} ({plan}): once, later runs reuse it", file=sys.stderr)
        return prepare.prepare_all(source, folder, num_shards, workers, kind)


def _tokenizers_version(kind: str) -> str | None:
    if kind != "bpe":
        return None
    import tokenizers

    return tokenizers.__version__  # another release may merge differently


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
