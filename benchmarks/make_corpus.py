"""Large synthetic text corpora, deterministic from a seed, for issue 14's tests and benchmarks.

Issue 14 ("LLM-scale data") needs corpora far larger than anything shipped: 500,000+
documents and 2 GB on the testbed, to measure the LM's data path (reading, splitting,
tokenising, packing) at scale. Nothing may be downloaded, so this writes them: documents
sampled from an order-2, word-level Markov chain trained on CPython's help topics
(``pydoc_data.topics``, the same text as ``--data pydoc-topics``). Standard library and
numpy only.

Usage::

    python benchmarks/make_corpus.py --out /tmp/corpus.jsonl --bytes 2G
    python benchmarks/make_corpus.py --out /tmp/corpus.jsonl --documents 500000 --shards 8
    python benchmarks/make_corpus.py --out /tmp/corpus.txt --documents 1000 --seed 3

``--documents N`` and ``--bytes SIZE`` (``10M``, ``500M``, ``2G``: K/M/G/T are powers
of 1,024; plain integers are bytes) bound the run; it stops at whichever is reached first, and
never writes more than ``--bytes`` (the document that would cross it is left out). The documents
are one fixed stream per seed: any run is a prefix of a longer run with the same seed, whatever
the limits, format or shards.

Formats (what ``experiments/lm/data.py`` reads): ``jsonl``, one ``{"text": ...}`` per line
(the default, and for any --out not ending in .txt); ``txt``, the documents separated by a
blank line, ending with a newline. A document holds no blank line, so splitting a .txt on
``"\\n\\n"`` gives the documents back. ``--shards K`` writes K files,
``corpus-00000-of-00008.jsonl`` ... for ``--out corpus.jsonl``, the documents dealt
round-robin (document i to shard i mod K): their document counts differ by one at most,
their sizes by what the long documents they got weigh (a few percent at 50 MB in 4 shards).

Documents: word counts are log-normal (median 200 words), and 1% are long (median 4,000
words, about 25 KB): past a 1,024-token sequence, so the packing code meets them. Each
document runs from a sentence start to the end of a sentence where it can. The text is
made of the help topics' lines, word for word, so it reads like them, indentation aside.

Speed: the chain runs 1,024 walks side by side in numpy (each walk jumps to a fresh sentence
every 2,048 words), and a batch of documents is laid out as bytes with one gather from a
table of pre-encoded words, so no Python code runs per word or per document. Files are
written under a temporary name beside the target (``.NAME.partial-PID``, which the LM's
folder reader ignores) and renamed at the end: an interrupted run leaves no half file under
the final name. Prints one JSON line (documents, bytes, seconds, mb_per_s with MB = 10**6
bytes, files) at the end. Output is byte-identical for the same arguments with the same
numpy release (numpy does not promise its random streams across releases).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the project's experiments package
from experiments.common import argtypes  # noqa: E402

LANES = 1024  # Markov walks advanced together by each numpy step
STEPS = 2048  # words per walk: a chunk of the word stream is LANES * STEPS words
BATCH_DOCUMENTS = 1024  # documents laid out and written together
MEDIAN_WORDS, SIGMA = 200, 0.8
LONG_FRACTION, LONG_MEDIAN_WORDS, LONG_SIGMA = 0.01, 4000, 0.5
MIN_WORDS, MAX_WORDS = 8, 100_000
FORMATS = ("jsonl", "txt")
MAX_SHARDS = 99_999  # five digits in the shard names
# Random streams per seed: one for the word stream's chunks, one for each batch's document lengths.
_WORDS_STREAM, _LENGTHS_STREAM = 0, 1


@dataclass(frozen=True)
class Chain:
    """The help topics as a ring of word positions and, for each, where its order-2 state's successors are.

    A word is the text with the separator after it (" " or a newline), so walks keep the
    source's line breaks. Sampling a successor of position p is uniform over the positions
    that follow an occurrence of p's state (its word and the one before), which is the
    empirical transition distribution itself: ``succ[lo[p] + floor(u * count[p])]``.
    """

    words: list[str]  # word id -> text with its separator
    word: np.ndarray  # position -> word id
    lo: np.ndarray  # position -> first index in succ of its state's successors
    count: np.ndarray  # position -> their number (float64, to multiply a uniform draw)
    succ: np.ndarray  # successor positions, grouped by state
    is_start: np.ndarray  # position -> whether a sentence starts there
    starts: np.ndarray  # the positions where one does


@functools.lru_cache(maxsize=1)
def build_chain() -> Chain:
    from pydoc_data.topics import topics

    ids: dict[str, int] = {}
    word = []
    for name in sorted(topics):
        for line in topics[name].splitlines():
            parts = line.split()
            for i, part in enumerate(parts):
                word.append(ids.setdefault(part + ("\n" if i == len(parts) - 1 else " "), len(ids)))
    words = list(ids)
    word_arr = np.array(word, dtype=np.int64)
    n, v = len(word_arr), len(words)
    key = np.roll(word_arr, 1) * v + word_arr  # the state at each position: (previous word, word); a ring
    order = np.argsort(key, kind="stable")
    _, group, counts = np.unique(key, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts
    ends_sentence = np.array([w.rstrip()[-1] in ".!?" for w in words])
    capital = np.array([w[0].isupper() for w in words])
    is_start = ends_sentence[np.roll(word_arr, 1)] & capital[word_arr]
    return Chain(
        words=words,
        word=word_arr.astype(np.int32),
        lo=first[group].astype(np.int64),
        count=counts[group].astype(np.float64),
        succ=((order + 1) % n).astype(np.int32),
        is_start=is_start,
        starts=np.flatnonzero(is_start).astype(np.int32),
    )


def walk_chunk(chain: Chain, seed: int, index: int) -> np.ndarray:
    """Chunk ``index`` of the seed's stream of positions: LANES walks of STEPS words, one after another."""
    rng = np.random.default_rng([seed, _WORDS_STREAM, index])
    walks = np.empty((STEPS, LANES), dtype=np.int32)
    walks[0] = chain.starts[rng.integers(0, len(chain.starts), LANES)]
    uniform, pick = np.empty(LANES), np.empty(LANES, dtype=np.int64)
    for t in range(1, STEPS):
        current = walks[t - 1]
        np.multiply(rng.random(out=uniform), chain.count[current], out=uniform)
        pick[:] = uniform  # floor: a successor's rank within its state's group
        pick += chain.lo[current]
        np.take(chain.succ, pick, out=walks[t])
    return walks.T.ravel()


class Stream:
    """The seed's endless stream of word positions, generated chunk by chunk and dropped once used."""

    def __init__(self, chain: Chain, seed: int) -> None:
        self.chain, self.seed = chain, seed
        self.base = 0  # stream index of buf[0]
        self.buf = np.empty(0, dtype=np.int32)
        self.chunks = 0

    def window(self, start: int, end: int) -> np.ndarray:
        """Positions ``start`` to ``end`` of the stream (``start`` not before the last call's)."""
        have = self.base + len(self.buf)
        if have < end:
            parts = [self.buf[start - self.base :]]
            while have < end:
                parts.append(walk_chunk(self.chain, self.seed, self.chunks))
                self.chunks += 1
                have += len(parts[-1])
            self.buf, self.base = np.concatenate(parts), start
        return self.buf[start - self.base : end - self.base]


@dataclass(frozen=True)
class Encoding:
    """Every word, twice (with its separator, then without, for a document's last word), then the prefix and suffix."""

    blob: np.ndarray  # uint8: all pieces, one after another
    start: np.ndarray  # piece -> offset in blob
    length: np.ndarray  # piece -> bytes
    vocabulary: int  # words: piece w + vocabulary is word w without its separator
    prefix: int  # piece ids
    suffix: int
    file_end_trim: int  # bytes cut from a non-empty file's end (txt: its last separator's second newline)


def encoding(chain: Chain, fmt: str) -> Encoding:
    if fmt == "jsonl":
        quote = functools.partial(json.dumps, ensure_ascii=False)
        with_sep = [quote(w)[1:-1] for w in chain.words]
        without = [quote(w[:-1])[1:-1] for w in chain.words]
        prefix, suffix, trim = '{"text": "', '"}\n', 0
    else:
        with_sep, without = chain.words, [w[:-1] for w in chain.words]
        prefix, suffix, trim = "", "\n\n", 1
    pieces = [p.encode() for p in [*with_sep, *without, prefix, suffix]]
    length = np.array([len(p) for p in pieces], dtype=np.int64)
    v = len(chain.words)
    blob = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    return Encoding(blob, np.cumsum(length) - length, length, v, 2 * v, 2 * v + 1, trim)


def document_lengths(seed: int, batch: int) -> np.ndarray:
    """Word counts of batch ``batch``'s documents: log-normal, with LONG_FRACTION of them long."""
    rng = np.random.default_rng([seed, _LENGTHS_STREAM, batch])
    short = rng.lognormal(math.log(MEDIAN_WORDS), SIGMA, BATCH_DOCUMENTS)
    long = rng.lognormal(math.log(LONG_MEDIAN_WORDS), LONG_SIGMA, BATCH_DOCUMENTS)
    words = np.where(rng.random(BATCH_DOCUMENTS) < LONG_FRACTION, long, short)
    return np.clip(words, MIN_WORDS, MAX_WORDS).astype(np.int64)


def boundaries(chain: Chain, stream: Stream, first: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the documents of one batch start in the stream (and where the last ends), and the stream from ``first``.

    Each boundary moves forward from where the lengths put it to the next sentence start
    not taken by an earlier one, so every document holds at least one sentence. ``first``
    is a sentence start (a walk begins with one, every STEPS words).
    """
    nominal = first + np.cumsum(lengths)
    ramp = np.arange(len(lengths) + 1)
    ahead = STEPS
    while True:
        positions = stream.window(first, int(nominal[-1]) + ahead)
        starts = np.flatnonzero(chain.is_start[positions]) + first
        index = np.concatenate([[0], np.searchsorted(starts, nominal)])
        index = np.maximum.accumulate(index - ramp) + ramp
        if index[-1] < len(starts):
            return starts[index], positions
        ahead *= 2  # sentences far longer than the lengths asked for: look further


class Layout:
    """The bytes of documents, as one gather from the encoding's blob (a buffer kept between batches)."""

    def __init__(self, enc: Encoding) -> None:
        self.enc = enc
        self.step = np.empty(0, dtype=np.int32)

    def __call__(self, words: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
        """The documents ``words[begin[i] : begin[i] + size[i]]``, in that order."""
        enc = self.enc
        slots = size + 2  # prefix, words, suffix
        slot_start = np.cumsum(slots) - slots
        total = int(slots.sum())
        source = np.arange(total, dtype=np.int64) + np.repeat(begin - 1 - slot_start, slots)
        pieces = np.take(words, source, mode="clip")
        pieces[slot_start + size] += enc.vocabulary  # the last word, without its separator
        pieces[slot_start] = enc.prefix
        pieces[slot_start + slots - 1] = enc.suffix
        pieces = pieces[enc.length[pieces] > 0]  # txt's empty prefix
        # The blob offset of every output byte, as a running sum: +1 within a piece, a jump between pieces.
        start, length = enc.start[pieces], enc.length[pieces]
        out_start = np.cumsum(length) - length
        total = int(out_start[-1] + length[-1])
        if len(self.step) < total:
            self.step = np.empty(total + total // 4, dtype=np.int32)
        step = self.step[:total]
        step.fill(1)
        step[0] = start[0]
        step[out_start[1:]] = start[1:] - (start[:-1] + length[:-1] - 1)
        return enc.blob[np.cumsum(step, out=step)]


def shard_paths(out: Path, fmt: str, shards: int) -> list[Path]:
    if shards == 1:
        return [out]
    stem = out.name[: -len(fmt) - 1] if out.name.endswith("." + fmt) else out.name
    return [out.with_name(f"{stem}-{i:05d}-of-{shards:05d}.{fmt}") for i in range(shards)]


def generate(out: Path, fmt: str, seed: int, documents: int | None, max_bytes: int | None, shards: int = 1) -> dict:
    """Write the corpus; the summary printed at the end."""
    began = time.perf_counter()
    chain = build_chain()
    enc = encoding(chain, fmt)
    paths = shard_paths(out, fmt, shards)
    partial = [p.with_name(f".{p.name}.partial-{os.getpid()}") for p in paths]
    files = [open(p, "wb") for p in partial]
    try:
        written, written_bytes = _write(chain, enc, files, seed, documents, max_bytes)
        for f in files:
            if f.tell() and enc.file_end_trim:
                f.truncate(f.tell() - enc.file_end_trim)
            f.close()
        for tmp, final in zip(partial, paths, strict=True):
            os.replace(tmp, final)
    finally:
        for f, tmp in zip(files, partial, strict=True):
            f.close()
            tmp.unlink(missing_ok=True)
    seconds = time.perf_counter() - began
    size = sum(p.stat().st_size for p in paths)
    return {
        "documents": written,
        "bytes": size,
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "files": [str(p) for p in paths],
    }


def _write(chain: Chain, enc: Encoding, files: list, seed: int, documents: int | None, max_bytes: int | None) -> tuple[int, int]:
    stream, layout = Stream(chain, seed), Layout(enc)
    first = written = written_bytes = batch = 0
    # A document's bytes beyond its words': prefix and suffix, less its last word's separator.
    v = enc.vocabulary
    doc_cost = enc.length[enc.prefix] + enc.length[enc.suffix] - (enc.length[:v] - enc.length[v : 2 * v])
    while documents is None or written < documents:
        cuts, positions = boundaries(chain, stream, first, document_lengths(seed, batch))
        words = chain.word[positions[: cuts[-1] - first]]
        begin, size = cuts[:-1] - first, np.diff(cuts)
        cum = np.concatenate([[0], np.cumsum(enc.length[words])])
        doc_bytes = cum[begin + size] - cum[begin] + doc_cost[words[begin + size - 1]]
        keep = len(size) if documents is None else min(len(size), documents - written)
        if max_bytes is not None:
            keep = min(keep, int(np.searchsorted(np.cumsum(doc_bytes), max_bytes - written_bytes, side="right")))
        if keep:
            # Round-robin: the batch's documents grouped by shard, each shard's in order.
            shard = (written + np.arange(keep)) % len(files)
            order = np.argsort(shard, kind="stable")
            data = layout(words, begin[order], size[order])
            ends = np.cumsum(np.bincount(shard, weights=doc_bytes[:keep], minlength=len(files))).astype(np.int64)
            for f, lo, hi in zip(files, [0, *ends[:-1]], ends, strict=True):
                f.write(data[lo:hi].data)
            written += keep
            written_bytes += len(data)
        if keep < len(size):
            break
        first, batch = int(cuts[-1]), batch + 1
    return written, written_bytes


parse_size = argtypes.parse_size
_positive = argtypes.positive
_seed = argtypes.whole(0, "seeds are 0 or more")


FORMAT_HELP = "jsonl ({'text': ...} per line) or txt (a blank line between documents); default: txt for an --out ending in .txt, else jsonl"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make_corpus.py",
        description="Write a deterministic synthetic text corpus (Markov chain over CPython's help topics).",
    )
    p.add_argument("--out", required=True, type=Path, help="file to write (with --shards, the name the shard names derive from)")
    p.add_argument("--documents", type=_positive, help="stop after this many documents")
    p.add_argument("--bytes", type=parse_size, help="write at most this much: bytes, or 10M, 500M, 2G (powers of 1,024)")
    p.add_argument("--format", choices=FORMATS, help=FORMAT_HELP)
    p.add_argument("--shards", type=_positive, default=1, help="write this many files, documents dealt round-robin (default 1)")
    p.add_argument("--seed", type=_seed, default=0, help="the corpus for this seed (default 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.documents is None and args.bytes is None:
        p.error("give --documents N, --bytes SIZE or both: the run stops at whichever is reached first")
    suffix_format = {".txt": "txt", ".jsonl": "jsonl"}.get(args.out.suffix)
    fmt = args.format or suffix_format or "jsonl"
    if suffix_format and suffix_format != fmt:
        p.error(f"--out {args.out} ends in {args.out.suffix} but --format is {fmt}: the LM's reader goes by the suffix")
    if args.shards > MAX_SHARDS:
        p.error(f"--shards {args.shards}: at most {MAX_SHARDS}")
    paths = shard_paths(args.out, fmt, args.shards)
    if any(path.is_dir() for path in paths):
        p.error(f"--out {args.out}: is a folder; give a file name")
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        summary = generate(args.out, fmt, args.seed, args.documents, args.bytes, args.shards)
    except OSError as e:
        print(f"make_corpus.py: error: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
