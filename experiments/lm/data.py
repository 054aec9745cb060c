"""Language-model data: text from local files or CPython's help topics, split, tokenised and packed.

Sources (``--data``): ``pydoc-topics`` (the text of ``pydoc_data.topics``, shipped
with CPython, as in :mod:`experiments.classify.data`); a ``.txt`` file; a ``.jsonl`` file
(a ``text`` field per line); a ``.parquet`` file (a ``text`` column; needs
pyarrow); a folder written by Hugging Face ``datasets``' ``save_to_disk`` (needs
``datasets``); or a folder of .txt/.jsonl/.parquet files, read in path order.
Nothing is ever downloaded. Everything is read into memory: meant for corpora up
to some hundreds of megabytes.

The split comes before the tokeniser, which is trained on the training text only:
the text (documents joined by a blank line) is cut into blocks of
``SPLIT_BLOCK_CHARS`` characters and a seeded 10% of them are the validation
split. Each split is then tokenised and packed into rows of ``seq_len + 1``
tokens (inputs and their next-token targets), without overlap, so no validation
row shares text with a training row. A pure function of the source, the sequence
length and the tokeniser: every rank builds the same rows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from experiments.lm import tokenizer as tokenizers

DEFAULT_SOURCE = "pydoc-topics"
TEXT_FIELD = "text"
SUFFIXES = (".txt", ".jsonl", ".parquet")
SEPARATOR = "\n\n"
SPLIT_BLOCK_CHARS = 1024
VAL_FRACTION = 0.1
SPLIT_SEED = 0  # independent of the training seed: runs with different seeds see the same split
VALID_SOURCES = "pydoc-topics, a .txt, .jsonl or .parquet file, a folder of them, or a `datasets` save_to_disk folder"


class DataError(ValueError):
    """Bad data: the command line reports it as a usage error."""


@dataclass(frozen=True)
class LMData:
    train: torch.Tensor  # int64 (rows, seq_len + 1)
    val: torch.Tensor
    vocab_size: int
    tokenizer: str  # "bytes" or "bpe-512"
    fingerprint: str  # sha256 of the tokeniser's name and every row, train then val

    @property
    def seq_len(self) -> int:
        return self.train.shape[1] - 1


def check_source(source: str) -> None:
    """Fail fast, with the valid choices, on a source that cannot be read: before any process starts."""
    if source == DEFAULT_SOURCE:
        return
    path = Path(source)
    if not path.exists():
        raise DataError(f"--data {source}: no such file or folder; give {VALID_SOURCES}")
    if path.is_file() and path.suffix not in SUFFIXES:
        raise DataError(f"--data {source}: unsupported file type {path.suffix or '(none)'!r}; give {VALID_SOURCES}")


def load(source: str, seq_len: int, tokenizer: str = "auto", cache_dir: Path | None = None) -> LMData:
    """Rows of ``seq_len + 1`` tokens from ``source``; the BPE, if any, is cached in ``cache_dir``."""
    check_source(source)
    train_text, val_text = split(read_texts(source))
    tok = tokenizers.get(tokenizer, train_text, cache_dir)
    train, val = _pack(tok.encode(train_text), seq_len), _pack(tok.encode(val_text), seq_len)
    for name, rows, text in (("training", train, train_text), ("validation", val, val_text)):
        if len(rows) == 0:
            chars = sum(map(len, text))
            raise DataError(
                f"--data {source}: the {name} split ({chars} characters) holds no sequence of {seq_len + 1} tokens; "
                "give more text or a shorter --seq-len"
            )
    return LMData(train, val, tok.vocab_size, tok.name, _fingerprint(tok.name, train, val))


def read_texts(source: str) -> list[str]:
    """The documents of ``source``, in a fixed order."""
    if source == DEFAULT_SOURCE:
        from pydoc_data.topics import topics

        return [topics[name] for name in sorted(topics)]
    path = Path(source)
    if path.is_dir():
        if _is_saved_dataset(path):
            return _read_saved_dataset(path)
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        if not files:
            raise DataError(f"--data {source}: no {', '.join(SUFFIXES)} files in the folder; give {VALID_SOURCES}")
        return [text for file in files for text in _read_file(file)]
    return _read_file(path)


def split(texts: list[str]) -> tuple[list[str], list[str]]:
    """Training and validation blocks of the joined ``texts`` (see the module's docstring)."""
    joined = SEPARATOR.join(texts)
    blocks = [joined[i : i + SPLIT_BLOCK_CHARS] for i in range(0, len(joined), SPLIT_BLOCK_CHARS)]
    if len(blocks) < 2:
        raise DataError(f"the data has {len(joined)} characters: too few to split into training and validation")
    num_val = max(1, round(len(blocks) * VAL_FRACTION))
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(SPLIT_SEED))
    val_blocks = set(order[:num_val].tolist())
    # In text order within each split: consecutive blocks stay consecutive.
    train = [block for i, block in enumerate(blocks) if i not in val_blocks]
    val = [block for i, block in enumerate(blocks) if i in val_blocks]
    return train, val


def _pack(ids: list[int], seq_len: int) -> torch.Tensor:
    rows = len(ids) // (seq_len + 1)
    return torch.tensor(ids[: rows * (seq_len + 1)], dtype=torch.int64).view(rows, seq_len + 1)


def _fingerprint(tokenizer: str, *tensors: torch.Tensor) -> str:
    digest = hashlib.sha256(tokenizer.encode())
    for tensor in tensors:
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def _read_file(path: Path) -> list[str]:
    if path.suffix == ".txt":
        return [path.read_text(encoding="utf-8")]
    if path.suffix == ".jsonl":
        return _read_jsonl(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    raise DataError(f"--data {path}: unsupported file type {path.suffix!r}; give {VALID_SOURCES}")


def _read_jsonl(path: Path) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: not JSON ({e.msg})") from e
            if not isinstance(record, dict) or not isinstance(record.get(TEXT_FIELD), str):
                raise DataError(f"{path}:{number}: no string field {TEXT_FIELD!r}")
            texts.append(record[TEXT_FIELD])
    return texts


def _read_parquet(path: Path) -> list[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"--data {path}: reading .parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    schema = pq.read_schema(path)
    if TEXT_FIELD not in schema.names:
        raise DataError(f"{path}: no column {TEXT_FIELD!r}; columns: {', '.join(schema.names)}")
    return [text for text in pq.read_table(path, columns=[TEXT_FIELD]).column(TEXT_FIELD).to_pylist() if text is not None]


# What `save_to_disk` writes: a Dataset (state.json, dataset_info.json) or a DatasetDict (dataset_dict.json).
_SAVED_DATASET_MARKERS = ("dataset_dict.json", "state.json")


def _is_saved_dataset(path: Path) -> bool:
    return any((path / marker).is_file() for marker in _SAVED_DATASET_MARKERS)


def _read_saved_dataset(path: Path) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"--data {path}: a Hugging Face `datasets` folder, and the datasets package is not installed (pip install datasets)"
        ) from None
    dataset = datasets.load_from_disk(str(path))  # local files only: never the hub
    if isinstance(dataset, datasets.DatasetDict):
        splits = sorted(dataset)
        if "train" not in dataset and len(splits) != 1:
            raise DataError(f"--data {path}: no 'train' split to read; splits: {', '.join(splits)}")
        dataset = dataset["train" if "train" in dataset else splits[0]]
    if TEXT_FIELD not in dataset.column_names:
        raise DataError(f"{path}: no column {TEXT_FIELD!r}; columns: {', '.join(dataset.column_names)}")
    return [text for text in dataset[TEXT_FIELD] if text is not None]
