"""The documents of a text source, as one deterministic stream that can be read in parts, and their split.

A source (``--data``) is ``pydoc-topics`` (the text of ``pydoc_data.topics``, shipped
with CPython); a ``.txt`` file (documents separated by a blank line: a file without
one is a single document); a ``.jsonl`` file (a ``text`` field per line); a
``.parquet`` file (a ``text`` column; needs pyarrow); a folder written by Hugging
Face ``datasets``' ``save_to_disk`` (needs ``datasets``); or a folder of
.txt/.jsonl/.parquet files, read in path order. Nothing is ever downloaded.

The stream has a length in *units* and every document a start position in it:
files are laid end to end in path order and measured in bytes (a parquet row sits
at its share of its file's bytes), ``pydoc-topics`` and ``datasets`` folders in
rows. ``parts(n)`` cuts the units into n even ranges and a document belongs to the
part its start lies in, so part i is read by seeking to its first unit, skipping
to the next document start and stopping at the first document that starts past
its end: no part reads the others, and the parts together are the stream, in
order, each document once.

The split is per document (:func:`split_of`): a hash of the text decides, so
identical documents always land together, and no part, shard or sampling choice
can move a document to the other side.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

DEFAULT_SOURCE = "pydoc-topics"
TEXT_FIELD = "text"
SUFFIXES = (".txt", ".jsonl", ".parquet")
VALID_SOURCES = "pydoc-topics, a .txt, .jsonl or .parquet file, a folder of them, or a `datasets` save_to_disk folder"
SPLITS = ("train", "val")
VAL_FRACTION = 0.1
SPLIT_SEED = 0  # independent of the training seed: runs with different seeds see the same split
_SPLIT_PREFIX = f"orchestrator-lm-split:{SPLIT_SEED}\0".encode()
BLOCK = 1 << 22  # bytes read at a time from a .txt file
ROWS_PER_READ = 1024  # rows read at a time from parquet and `datasets` sources
# Files up to this size are identified by their content's hash, larger ones by path, size and mtime.
HASH_LIMIT = 64 << 20
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class DataError(ValueError):
    """Bad data: the command line reports it as a usage error."""


def split_of(text: str) -> str:
    """``"val"`` for about VAL_FRACTION of documents, chosen by a hash of the text, else ``"train"``."""
    digest = hashlib.sha256(_SPLIT_PREFIX + text.encode()).digest()
    return "val" if int.from_bytes(digest[:8], "big") < VAL_FRACTION * 2**64 else "train"


def check(source: str) -> None:
    """Fail fast, with the valid choices, on a source that cannot be read: before any process starts."""
    if source == DEFAULT_SOURCE:
        return
    path = Path(source)
    if not path.exists():
        raise DataError(f"--data {source}: no such file or folder; give {VALID_SOURCES}")
    if path.is_file() and path.suffix not in SUFFIXES:
        raise DataError(f"--data {source}: unsupported file type {path.suffix or '(none)'!r}; give {VALID_SOURCES}")


class Source(ABC):
    """A stream of documents measured in ``units``, readable by ranges of units (see the module)."""

    name: str  # as given

    @property
    @abstractmethod
    def units(self) -> int: ...

    @property
    @abstractmethod
    def size_bytes(self) -> int:
        """About how many bytes of text the source holds: what the tokeniser's sample is measured against."""

    @abstractmethod
    def between(self, lo: int, hi: int) -> Iterator[str]:
        """The documents that start in units [lo, hi), in order."""

    @abstractmethod
    def identity(self) -> list[Any]:
        """What determines the documents: equal identities, equal streams (the cache key of a prepared corpus)."""

    def description(self) -> dict[str, Any]:
        """A short account of the source, kept with the shards."""
        return {"source": self.name, "units": self.units, "bytes": self.size_bytes}

    def parts(self, n: int) -> list[tuple[int, int]]:
        """The unit ranges of ``n`` contiguous parts, as even as units go."""
        if n < 1:
            raise ValueError(f"parts: n must be at least 1, not {n}")
        return [(self.units * i // n, self.units * (i + 1) // n) for i in range(n)]

    def documents(self, i: int, n: int) -> Iterator[str]:
        """The documents of part ``i`` of ``n``."""
        if not 0 <= i < n:
            raise ValueError(f"part {i} of {n}: the index must be in 0..{n - 1}")
        return self.between(*self.parts(n)[i])

    def all(self) -> Iterator[str]:
        return self.between(0, self.units)


def open_source(source: str) -> Source:
    """The source named by ``--data`` (see the module)."""
    check(source)
    if source == DEFAULT_SOURCE:
        from pydoc_data.topics import topics

        return _Rows(source, [topics[name] for name in sorted(topics)])
    path = Path(source)
    if path.is_dir():
        if _is_saved_dataset(path):
            return _SavedDataset(source, path)
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES and not p.name.startswith("."))
        if not files:
            raise DataError(f"--data {source}: no {', '.join(SUFFIXES)} files in the folder; give {VALID_SOURCES}")
        return _Files(source, files)
    return _Files(source, [path])


# --- files: .txt, .jsonl and .parquet, end to end -----------------------------------------------


class _File(ABC):
    def __init__(self, path: Path):
        self.path = path
        self.size = path.stat().st_size

    @property
    def units(self) -> int:
        return self.size

    @abstractmethod
    def between(self, lo: int, hi: int) -> Iterator[str]: ...


class _Files(Source):
    """Files in path order, each measured in its bytes; no document crosses a file's end."""

    def __init__(self, name: str, paths: list[Path]):
        self.name = name
        self.files = [_READERS[p.suffix](p) for p in paths]
        self.starts = []
        total = 0
        for f in self.files:
            self.starts.append(total)
            total += f.units
        self._units = total

    @property
    def units(self) -> int:
        return self._units

    @property
    def size_bytes(self) -> int:
        return self._units

    def between(self, lo: int, hi: int) -> Iterator[str]:
        for start, f in zip(self.starts, self.files, strict=True):
            a, b = max(lo, start) - start, min(hi, start + f.units) - start
            if a < b:
                yield from f.between(a, b)

    def identity(self) -> list[Any]:
        return [[str(f.path.resolve()), *_file_identity(f.path)] for f in self.files]

    def description(self) -> dict[str, Any]:
        return {"source": str(Path(self.name).resolve()), "files": len(self.files), "bytes": self._units}


class _Jsonl(_File):
    def between(self, lo: int, hi: int) -> Iterator[str]:
        with open(self.path, "rb") as f:
            offset = _seek_line(f, lo)
            for line in f:
                if offset >= hi:
                    return
                if line.strip():
                    yield self._text(line, offset)
                offset += len(line)

    def _text(self, line: bytes, offset: int) -> str:
        try:
            record = json.loads(line.decode())  # strict: json.loads of bytes would let encoded surrogates through
        except UnicodeDecodeError as e:
            raise _utf8_error(self.path, offset + e.start) from None
        except json.JSONDecodeError as e:
            raise DataError(f"{self.path}:{_line_number(self.path, offset)}: not JSON ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get(TEXT_FIELD), str):
            raise DataError(f"{self.path}:{_line_number(self.path, offset)}: no string field {TEXT_FIELD!r}")
        text = record[TEXT_FIELD]
        if _LONE_SURROGATE.search(line):  # JSON may escape half of a UTF-16 pair, which no UTF-8 text holds
            try:
                text.encode()
            except UnicodeEncodeError:
                raise DataError(
                    f"{self.path}:{_line_number(self.path, offset)}: the text holds a lone surrogate (\\ud800-\\udfff)"
                ) from None
        return text


class _Txt(_File):
    """Documents separated by a blank line ("\\n\\n", more newlines alike); a document starts at a
    byte that is not a newline with two newlines before it, the file counting as preceded by two."""

    def between(self, lo: int, hi: int) -> Iterator[str]:
        for offset, raw in _paragraphs(self.path, lo, hi):
            if b"\0" in raw:
                at = offset + raw.index(0)
                raise DataError(f"{self.path}:{_line_number(self.path, at)}: a NUL byte at byte {at}: binary data, not text")
            try:
                yield raw.decode()
            except UnicodeDecodeError as e:
                raise _utf8_error(self.path, offset + e.start) from None


class _Parquet(_File):
    """Rows, row r at byte r * size // rows of the file; only the row groups a range needs are read."""

    def __init__(self, path: Path):
        super().__init__(path)
        pq = _pyarrow_parquet(path)
        try:
            self.file = pq.ParquetFile(path)
        except Exception as e:  # pyarrow's ArrowInvalid and kin: not a parquet file
            raise DataError(f"{path}: not a parquet file ({e})") from None
        names = self.file.schema_arrow.names
        if TEXT_FIELD not in names:
            raise DataError(f"{path}: no column {TEXT_FIELD!r}; columns: {', '.join(names)}")
        meta = self.file.metadata
        self.rows = meta.num_rows
        self.group_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def between(self, lo: int, hi: int) -> Iterator[str]:
        if not self.rows:
            return
        first, end = (-(-x * self.rows // self.size) for x in (lo, hi))  # the rows whose position is in [lo, hi)
        group_start = 0
        for group, count in enumerate(self.group_rows):
            a, b = max(first, group_start) - group_start, min(end, group_start + count) - group_start
            if a < b:
                column = self.file.read_row_group(group, columns=[TEXT_FIELD]).column(TEXT_FIELD)
                for r in range(a, b, ROWS_PER_READ):
                    yield from (text for text in column.slice(r, min(ROWS_PER_READ, b - r)).to_pylist() if text is not None)
            group_start += count


_READERS: dict[str, Callable[[Path], _File]] = {".txt": _Txt, ".jsonl": _Jsonl, ".parquet": _Parquet}


def _seek_line(f: BinaryIO, lo: int) -> int:
    """Position ``f`` at the first line that starts at or after byte ``lo``; that line's offset."""
    if lo == 0:
        f.seek(0)
        return 0
    f.seek(lo - 1)
    return lo - 1 + len(f.readline())  # the rest of the line holding byte lo - 1, its newline included


def _paragraphs(path: Path, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of each blank-line separated document of ``path`` that starts in [lo, hi).

    The first one follows the first blank line ending at or after ``lo`` (two virtual
    newlines precede the file); each next one, the blank line that ends the one before.
    """
    with open(path, "rb") as f:
        buf = _Buffer(f, lo - 2)
        blank = buf.find(b"\n\n", lo - 2)
        while blank is not None:
            start = buf.skip_newlines(blank + 2)
            if start is None or start >= hi:
                return
            blank = buf.find(b"\n\n", start, keep=start)
            yield start, buf.bytes(start, blank).rstrip(b"\n")


class _Buffer:
    """A file read forward in blocks, addressed by file offset; what lies before the last position asked for is dropped."""

    _TEXT = re.compile(rb"[^\n]")

    def __init__(self, f: BinaryIO, first: int):
        pad = max(0, -first)  # offsets before the file read as newlines
        f.seek(first + pad)
        self.f, self.base, self.data, self.eof = f, first, bytearray(b"\n" * pad + f.read(BLOCK)), False

    def find(self, sub: bytes, at: int, keep: int | None = None) -> int | None:
        """The offset of ``sub`` at or after ``at``, or None at the end of the file; bytes from ``keep`` (default ``at``) stay."""
        keep = at if keep is None else keep
        while (k := self.data.find(sub, at - self.base)) < 0:
            at = max(at, self.base + len(self.data) - len(sub) + 1)  # resume where the search stopped
            if not self._more(keep):
                return None
        return self.base + k

    def skip_newlines(self, at: int) -> int | None:
        """The offset of the first byte at or after ``at`` that is not a newline, or None at the end of the file."""
        while (m := self._TEXT.search(self.data, at - self.base)) is None:
            at = max(at, self.base + len(self.data))
            if not self._more(at):
                return None
        return self.base + m.start()

    def bytes(self, start: int, end: int | None) -> bytes:
        """Bytes ``start`` up to ``end`` (None: the end of the file), all read by now."""
        if end is None:
            while self._more(start):
                pass
        return bytes(self.data[start - self.base : None if end is None else end - self.base])

    def _more(self, keep: int) -> bool:
        if self.eof:
            return False
        chunk = self.f.read(BLOCK)
        self.eof = not chunk
        drop = keep - self.base
        del self.data[:drop]
        self.base += drop
        self.data += chunk
        return not self.eof


def _line_number(path: Path, offset: int) -> int:
    """The 1-based line that byte ``offset`` of ``path`` is on (counted only for an error message)."""
    lines, done = 1, 0
    with open(path, "rb") as f:
        while done < offset:
            chunk = f.read(min(BLOCK, offset - done))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            done += len(chunk)
    return lines


def _utf8_error(path: Path, offset: int) -> DataError:
    return DataError(f"{path}:{_line_number(path, offset)}: invalid UTF-8 at byte {offset}; the LM reads UTF-8 text")


def _file_identity(path: Path) -> list[Any]:
    stat = path.stat()
    if stat.st_size <= HASH_LIMIT:
        return [stat.st_size, sha256_file(path)]
    return [stat.st_size, stat.st_mtime_ns]  # hashing gigabytes at every start would cost minutes


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _pyarrow_parquet(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"--data {path}: reading .parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    return pq


# --- rows: pydoc-topics and `datasets` folders -------------------------------------------------


class _Rows(Source):
    """Texts in memory (pydoc-topics: half a megabyte), one unit each."""

    def __init__(self, name: str, texts: list[str]):
        self.name, self.texts = name, texts

    @property
    def units(self) -> int:
        return len(self.texts)

    @property
    def size_bytes(self) -> int:
        return sum(len(text) for text in self.texts)

    def between(self, lo: int, hi: int) -> Iterator[str]:
        yield from self.texts[lo:hi]

    def identity(self) -> list[Any]:
        digest = hashlib.sha256()
        for text in self.texts:
            digest.update(text.encode() + b"\0")
        return [self.name, digest.hexdigest()]


# What `save_to_disk` writes: a Dataset (state.json, dataset_info.json) or a DatasetDict (dataset_dict.json).
_SAVED_DATASET_MARKERS = ("dataset_dict.json", "state.json")


def _is_saved_dataset(path: Path) -> bool:
    return any((path / marker).is_file() for marker in _SAVED_DATASET_MARKERS)


class _SavedDataset(Source):
    """A `save_to_disk` folder's ``train`` split (or its only one), one unit per row, memory-mapped by ``datasets``."""

    def __init__(self, name: str, path: Path):
        try:
            import datasets
        except ImportError:
            raise DataError(
                f"--data {path}: a Hugging Face `datasets` folder, and the datasets package is not installed (pip install datasets)"
            ) from None
        self.name, self.path = name, path
        dataset = datasets.load_from_disk(str(path))  # local files only: never the hub
        if isinstance(dataset, datasets.DatasetDict):
            splits = sorted(dataset)
            if "train" not in dataset and len(splits) != 1:
                raise DataError(f"--data {path}: no 'train' split to read; splits: {', '.join(splits)}")
            dataset = dataset["train" if "train" in dataset else splits[0]]
        if TEXT_FIELD not in dataset.column_names:
            raise DataError(f"{path}: no column {TEXT_FIELD!r}; columns: {', '.join(dataset.column_names)}")
        self.dataset = dataset
        self.files = sorted(p for p in path.rglob("*") if p.is_file())

    @property
    def units(self) -> int:
        return self.dataset.num_rows

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    def between(self, lo: int, hi: int) -> Iterator[str]:
        for r in range(lo, hi, ROWS_PER_READ):
            yield from (text for text in self.dataset[r : min(hi, r + ROWS_PER_READ)][TEXT_FIELD] if text is not None)

    def identity(self) -> list[Any]:
        return [[str(p.relative_to(self.path)), *_file_identity(p)] for p in self.files]

    def description(self) -> dict[str, Any]:
        return {"source": str(self.path.resolve()), "rows": self.units, "bytes": self.size_bytes}
