"""Shards of token ids: written per part of a source, read back as rows through memory maps.

Shard ``I`` of ``N`` (``python -m experiments.lm.prepare shard``) is part I of the
source (:meth:`Source.documents`), tokenised and split per document. Per split it
holds ``shard-IIIII-of-NNNNN.SPLIT.bin``, the token ids of the split's documents one
after another, each document followed by the separator "\\n\\n" (uint16 while the
vocabulary fits, else uint32: nanoGPT's ``train.bin``, Megatron's ``.bin``), and
``.SPLIT.idx.npy``, the int64 token offsets where its documents end. The meta file
``shard-IIIII-of-NNNNN.json`` comes last, after every other file has its final
name: it is the shard's commit marker, so a shard with a meta is whole, and a run
interrupted and started again redoes only the shards without one.

:class:`TokenCorpus` reads the metas (never the token files: opening costs the same
for any corpus size) and serves a split as rows of ``seq_len + 1`` tokens, windows
without overlap over each shard's token stream. Rows do not cross a shard's end
(its last, shorter window is dropped), but do cross documents: a document longer
than a row continues in the next one, as pretraining packs text. A row is copied
out of a memory map opened in the process that reads it (a DataLoader worker opens
its own), without read-ahead, so a rank touches only the pages of its batches' rows.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import os
import socket
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lm import sources
from experiments.lm import tokenizer as tokenizers
from experiments.lm.sources import SPLITS, DataError, Source

FORMAT = 1
SEPARATOR = "\n\n"
DTYPES = ("auto", "uint16", "uint32")
BATCH_DOCUMENTS, BATCH_CHARS = 1024, 4 << 20  # documents tokenised together: encode_batch's parallel unit
MAX_OPEN_MAPS = 64  # memory maps a reader keeps open (one file descriptor each)
PREPARE = "python -m experiments.lm.prepare"


def stem(index: int, of: int) -> str:
    return f"shard-{index:05d}-of-{of:05d}"


def dtype_for(choice: str, vocab_size: int) -> np.dtype:
    """The token file's type: ``auto`` is uint16 while every id fits in it; a type too small is refused."""
    if choice not in DTYPES:
        raise DataError(f"--dtype {choice}: valid types: {', '.join(DTYPES)}")
    dtype = np.dtype(("uint16" if vocab_size <= 1 << 16 else "uint32") if choice == "auto" else choice)
    if vocab_size > np.iinfo(dtype).max + 1:
        raise DataError(f"--dtype {choice}: a vocabulary of {vocab_size} tokens does not fit in {dtype.name}; give uint32 or auto")
    return dtype


@dataclass(frozen=True)
class SplitMeta:
    tokens: int
    documents: int
    sha256: str  # of the .bin


@dataclass(frozen=True)
class ShardMeta:
    format: int
    index: int
    of: int
    dtype: str
    tokenizer: str  # its name, e.g. bpe-512
    tokenizer_sha256: str
    vocab_size: int
    splits: dict[str, SplitMeta]
    source: dict[str, Any]  # the source's description: what the shard was cut from

    @classmethod
    def read(cls, path: Path) -> ShardMeta:
        try:
            fields = json.loads(path.read_text())
            fields["splits"] = {name: SplitMeta(**split) for name, split in fields["splits"].items()}
            meta = cls(**fields)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise DataError(f"{path}: not a shard meta file ({e!r}); remove it and prepare the shard again") from None
        if meta.format != FORMAT or set(meta.splits) != set(SPLITS) or path.name != f"{stem(meta.index, meta.of)}.json":
            raise DataError(f"{path}: a shard meta of another format or shard; remove it and prepare the shard again")
        return meta

    def bin(self, folder: Path, split: str) -> Path:
        return folder / f"{stem(self.index, self.of)}.{split}.bin"

    def idx(self, folder: Path, split: str) -> Path:
        return folder / f"{stem(self.index, self.of)}.{split}.idx.npy"

    def damage(self, folder: Path) -> str | None:
        """What is wrong with the shard's token files by their sizes, or None."""
        itemsize = np.dtype(self.dtype).itemsize
        for split, meta in self.splits.items():
            path = self.bin(folder, split)
            size = path.stat().st_size if path.is_file() else None
            if size != meta.tokens * itemsize:
                found = "missing" if size is None else f"{size} bytes"
                return f"{path}: {found}, its meta says {meta.tokens} tokens of {self.dtype} ({meta.tokens * itemsize} bytes)"
        return None


# --- writing -----------------------------------------------------------------------------------


def write(source: Source, tokenizer_dir: Path, index: int, of: int, out: Path, dtype: str = "auto") -> tuple[ShardMeta, bool]:
    """Shard ``index`` of ``of`` of ``source`` into ``out``; with True when a finished one was kept instead."""
    if not 0 <= index < of:
        raise DataError(f"--index {index} --of {of}: the index must be in 0..{of - 1}")
    tokenizer = tokenizers.load(tokenizer_dir)
    token_type = dtype_for(dtype, tokenizer.vocab_size)  # before any work
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / f"{stem(index, of)}.json"
    description = source.description()
    if meta_path.is_file():
        try:
            old = ShardMeta.read(meta_path)
        except DataError:
            old = None
        if old and (old.tokenizer_sha256, old.dtype, old.source) == (tokenizer.meta.sha256, token_type.name, description):
            if old.damage(out) is None and all(_idx_length(old.idx(out, s)) == old.splits[s].documents for s in SPLITS):
                return old, True
        meta_path.unlink()  # before any file it describes changes: no meta ever points at half-written tokens
    writers = {split: _SplitWriter(out / f"{stem(index, of)}.{split}", token_type) for split in SPLITS}
    try:
        for batch in _batches(source.documents(index, of)):
            by_split: dict[str, list[str]] = {split: [] for split in SPLITS}
            for text in batch:
                by_split[sources.split_of(text)].append(text + SEPARATOR)
            for split, texts in by_split.items():
                if texts:
                    writers[split].add(tokenizer.encode_batch(texts, token_type))
        splits = {split: writer.finish() for split, writer in writers.items()}
    finally:
        for writer in writers.values():
            writer.discard()
    meta = ShardMeta(
        FORMAT, index, of, token_type.name, tokenizer.meta.name, tokenizer.meta.sha256, tokenizer.vocab_size, splits, description
    )
    _write_atomic(meta_path, json.dumps(asdict(meta), indent=2) + "\n")
    return meta, False


def _batches(texts: Iterator[str]) -> Iterator[list[str]]:
    batch, chars = [], 0
    for text in texts:
        batch.append(text)
        chars += len(text)
        if len(batch) >= BATCH_DOCUMENTS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


class _SplitWriter:
    """One split's .bin and .idx.npy, written under temporary names and renamed by ``finish``."""

    def __init__(self, base: Path, dtype: np.dtype):
        self.bin, self.idx = base.with_name(base.name + ".bin"), base.with_name(base.name + ".idx.npy")
        self.tmp_bin, self.tmp_idx = (_partial(p) for p in (self.bin, self.idx))
        self.dtype, self.file = dtype, open(self.tmp_bin, "wb")
        self.sha, self.tokens = hashlib.sha256(), 0
        self.ends: list[np.ndarray] = []

    def add(self, documents: list[np.ndarray]) -> None:
        data = np.concatenate(documents)
        self.file.write(data.data)  # its bytes, uncopied
        self.sha.update(data.data)
        self.ends.append(self.tokens + np.cumsum([len(d) for d in documents], dtype=np.int64))
        self.tokens += len(data)

    def finish(self) -> SplitMeta:
        self.file.close()
        ends = np.concatenate(self.ends) if self.ends else np.zeros(0, dtype=np.int64)
        with open(self.tmp_idx, "wb") as f:
            np.save(f, ends)
        os.replace(self.tmp_bin, self.bin)
        os.replace(self.tmp_idx, self.idx)
        return SplitMeta(self.tokens, len(ends), self.sha.hexdigest())

    def discard(self) -> None:
        self.file.close()
        self.tmp_bin.unlink(missing_ok=True)
        self.tmp_idx.unlink(missing_ok=True)


def _idx_length(path: Path) -> int | None:
    try:
        return len(np.load(path, mmap_mode="r"))
    except (OSError, ValueError):
        return None


def _partial(path: Path) -> Path:
    """Where ``path`` is written before its rename: unique to this process, on a file system nodes share too."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def _write_atomic(path: Path, text: str) -> None:
    partial = _partial(path)
    partial.write_text(text)
    os.replace(partial, path)


# --- reading -----------------------------------------------------------------------------------


class TokenCorpus:
    """A prepared corpus: the tokeniser's meta and every shard's, checked to belong together (see the module)."""

    def __init__(self, root: Path, tokenizer: tokenizers.TokenizerMeta, shards: list[tuple[Path, ShardMeta]]):
        self.root, self.tokenizer, self.shards = root, tokenizer, shards

    @classmethod
    def open(cls, root: Path) -> TokenCorpus:
        """Read and check the metas under ``root`` (recursively: a pipeline may put each shard in its own folder)."""
        tokenizer = tokenizers.TokenizerMeta.read(tokenizers.folder_of(root))
        found = [(path.parent, ShardMeta.read(path)) for path in sorted(root.rglob("shard-*-of-*.json"))]
        if not found:
            raise DataError(f"{root}: no shard-*-of-*.json; run {PREPARE} shard ... --out {root} for each shard, or {PREPARE} all")
        ofs = sorted({meta.of for _, meta in found})
        if len(ofs) > 1:
            where = "; ".join(f"{n} shards in {', '.join(sorted({str(f) for f, m in found if m.of == n})[:3])}" for n in ofs)
            raise DataError(
                f"{root}: shards of {' and '.join(map(str, ofs))} cuts of the source together ({where}); keep one set: remove the "
                "others (prepare all does; a pipeline whose shard count changed leaves the old folders behind)"
            )
        of = ofs[0]
        by_index: dict[int, list[Path]] = {}
        for folder, meta in found:
            by_index.setdefault(meta.index, []).append(folder)
        twice = {i: folders for i, folders in by_index.items() if len(folders) > 1}
        if twice:
            i, folders = min(twice.items())
            raise DataError(f"{root}: shard {i} of {of} is there {len(folders)} times, in {', '.join(map(str, folders))}; keep one")
        missing = [i for i in range(of) if i not in by_index]
        if missing:
            source = found[0][1].source.get("source", "SOURCE")
            raise DataError(
                f"{root}: shards {_ranges(missing)} of {of} are missing; run {PREPARE} shard --data {source} --tokenizer {root} "
                f"--index I --of {of} --out {root} for each"
            )
        other = [meta.index for _, meta in found if meta.tokenizer_sha256 != tokenizer.sha256]
        if other:
            raise DataError(
                f"{root}: shards {_ranges(sorted(other))} of {of} were made with another tokeniser than the one in "
                f"{tokenizers.folder_of(root)}; prepare them again"
            )
        for folder, meta in found:
            if (damage := meta.damage(folder)) is not None:
                raise DataError(f"{damage}: cut short or damaged; prepare shard {meta.index} of {of} again")
        corpus = cls(root, tokenizer, sorted(found, key=lambda shard: shard[1].index))
        counts = {split: corpus.documents(split) for split in SPLITS}
        if not all(counts.values()):
            raise DataError(
                f"{root}: {counts['train']} training and {counts['val']} validation documents; both splits need at least one "
                f"(a hash of its text puts about {sources.VAL_FRACTION:.0%} of documents in validation): give more documents"
            )
        return corpus

    def tokens(self, split: str) -> int:
        return sum(meta.splits[split].tokens for _, meta in self.shards)

    def documents(self, split: str) -> int:
        return sum(meta.splits[split].documents for _, meta in self.shards)

    @property
    def fingerprint(self) -> str:
        """sha256 of the tokeniser and every shard's counts and token hashes: equal for equal token files, wherever they lie."""
        digest = hashlib.sha256(self.tokenizer.sha256.encode())
        for _, meta in self.shards:
            splits = {split: asdict(m) for split, m in sorted(meta.splits.items())}
            digest.update(json.dumps([meta.index, meta.of, meta.dtype, splits], sort_keys=True).encode())
        return digest.hexdigest()

    def rows(self, split: str, seq_len: int) -> TokenRows:
        files = [(meta.bin(folder, split), meta.dtype, meta.splits[split].tokens) for folder, meta in self.shards]
        return TokenRows(files, seq_len)

    def stream(self, split: str) -> np.ndarray:
        """A split's whole token stream, in shard order (for checks on small corpora: it reads everything)."""
        files = [np.fromfile(meta.bin(folder, split), dtype=meta.dtype) for folder, meta in self.shards]
        return np.concatenate(files).astype(np.int64)


class TokenRows:
    """A map-style torch Dataset: row j is an int64 tensor of ``seq_len + 1`` tokens (see the module).

    Pickled for a DataLoader worker without its open maps; each process maps the
    files it reads, as it first reads them, and keeps MAX_OPEN_MAPS of them open.
    """

    def __init__(self, files: list[tuple[Path, str, int]], seq_len: int):
        self.width = seq_len + 1
        self.files = [(path, dtype) for path, dtype, tokens in files if tokens >= self.width]
        counts = [tokens // self.width for _, _, tokens in files if tokens >= self.width]
        self.starts = [0, *np.cumsum(counts).tolist()]  # row number of each file's first row, then the total
        self._maps: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return self.starts[-1]

    @property
    def tokens(self) -> int:
        """Tokens in the rows (each shard's tail, shorter than a row, is not)."""
        return len(self) * self.width

    def __getitem__(self, row: int):
        import torch

        file, offset = self._where(row)
        return torch.from_numpy(self._map(file)[offset : offset + self.width].astype(np.int64))

    def will_need(self, rows: Iterable[int]) -> None:
        """Ask the kernel to read these rows' pages now, in the background (MADV_WILLNEED).

        The training asks for the next step's rows while this step computes: a row read
        from a shard not in the page cache costs a disk read (0.6 ms each here, 2.7 ms for
        a batch of 4), which would otherwise be waited for at the next step's start.
        """
        for row in rows:
            file, offset = self._where(row)
            tokens = self._map(file)
            mapped = getattr(tokens.base, "obj", None)  # the array's memoryview's mmap
            if not isinstance(mapped, mmap.mmap) or not hasattr(mapped, "madvise"):
                return
            itemsize = tokens.itemsize
            start = offset * itemsize // mmap.PAGESIZE * mmap.PAGESIZE
            mapped.madvise(mmap.MADV_WILLNEED, start, (offset + self.width) * itemsize - start)

    def _where(self, row: int) -> tuple[int, int]:
        """The file holding ``row`` and the row's first token in it."""
        row = int(row)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} of {len(self)}")
        file = bisect.bisect_right(self.starts, row) - 1
        return file, (row - self.starts[file]) * self.width

    def _map(self, file: int) -> np.ndarray:
        if file in self._maps:
            self._maps.move_to_end(file)
        else:
            path, dtype = self.files[file]
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            # A row is a few hundred bytes: the kernel's read-ahead would bring megabytes around each into this
            # process (2,000 random rows of a 45 MB shard not in the page cache: 39 MB more RSS, against 8 MB).
            if hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_RANDOM)
            self._maps[file] = np.frombuffer(mapped, dtype=dtype)
            if len(self._maps) > MAX_OPEN_MAPS:
                self._maps.popitem(last=False)
        return self._maps[file]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": OrderedDict()}  # maps belong to the process that opened them


def _ranges(indices: list[int]) -> str:
    """0, 2-4, 7: the indices as ranges."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
