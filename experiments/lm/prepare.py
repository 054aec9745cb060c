"""``python -m experiments.lm.prepare``: tokenise a text source once, into shards the training memory-maps.

Three commands, the steps of a pipeline stage and the whole of it::

    prepare tokenizer --data SRC --out DIR [--tokenizer auto|bpe|bytes] [--vocab-size 512] [--sample-bytes 64M]
    prepare shard --data SRC --tokenizer DIR --index I --of N --out DIR [--dtype auto|uint16|uint32]
    prepare all --data SRC --out DIR --shards N --workers W [tokenizer options] [--dtype ...]
    prepare export --data SRC --out FILE.jsonl

``tokenizer`` trains the tokeniser on a sample of the training split
(:mod:`experiments.lm.tokenizer`); each ``shard`` task tokenises one part of the
source (:mod:`experiments.lm.shards`): a Slurm array runs one per task. ``all`` does
both here, the shards in W processes; run again, it keeps what is finished. Training
reads the folder with ``--data DIR``. ``export`` writes any source's documents as
.jsonl (the shipped pipeline's corpus: CPython's help topics as a file DVC tracks,
so a change to it makes what depends on it stale). Each command prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from experiments.common import argtypes
from experiments.lm import shards, sources
from experiments.lm import tokenizer as tokenizers
from experiments.lm.sources import DataError


def prepare_all(
    data: str,
    out: Path,
    num_shards: int = 1,
    workers: int = 1,
    kind: str = "auto",
    vocab_size: int = tokenizers.BPE_VOCAB,
    sample_bytes: int = tokenizers.SAMPLE_BYTES,
    dtype: str = "auto",
) -> shards.TokenCorpus:
    """The tokeniser, then ``num_shards`` shards of ``data`` in ``workers`` processes, into ``out``: the corpus, opened."""
    if num_shards < 1 or workers < 1:
        raise DataError(f"--shards {num_shards} --workers {workers}: both must be at least 1")
    source = sources.open_source(data)
    tokenizers.train(source, out, kind, vocab_size, sample_bytes)
    _remove_other_sets(out, num_shards)
    if workers == 1 or num_shards == 1:
        for index in range(num_shards):
            shards.write(source, out, index, num_shards, out, dtype)
    else:
        # spawn: a clean interpreter per worker, whatever threads (torch, tokenizers) this process runs.
        with ProcessPoolExecutor(min(workers, num_shards), mp_context=get_context("spawn"), initializer=_worker_setup) as pool:
            for _ in pool.map(_write_one, [(data, out, index, num_shards, dtype) for index in range(num_shards)]):
                pass
    return shards.TokenCorpus.open(out)


def export(source: sources.Source, out: Path) -> int:
    """Write ``source``'s documents to ``out`` as .jsonl (under a temporary name, then renamed); how many."""
    if out.suffix != ".jsonl":
        raise DataError(f"--out {out}: export writes .jsonl; give a path ending in .jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    count = 0
    with open(partial, "w", encoding="utf-8") as f:
        for text in source.all():
            f.write(json.dumps({sources.TEXT_FIELD: text}, ensure_ascii=False) + "\n")
            count += 1
    os.replace(partial, out)
    return count


def _own_cores() -> None:
    """Keep the tokeniser's thread pool to the job's cores. Rayon sizes its pool by the machine,
    not the job: on a shared CPU node, every one-CPU shard task would start a thread per core of
    the node, all fighting over the cores Slurm gave them. The orchestrator sets
    OMP_NUM_THREADS to a CPU job's --cpus; elsewhere, the cores this process may run on."""
    cores = os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    os.environ.setdefault("RAYON_NUM_THREADS", cores)  # read when tokenizers first starts its pool


def _worker_setup() -> None:
    # One process per core: the tokeniser's own threads would only contend; and the
    # requeue signal is the training's to act on, not a reason to lose a finished shard.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _write_one(job: tuple[str, Path, int, int, str]) -> None:
    data, out, index, of, dtype = job
    shards.write(sources.open_source(data), out, index, of, out, dtype)


def _remove_other_sets(out: Path, num_shards: int) -> None:
    """A folder holds one set of shards: those cut into another number are removed."""
    for path in out.glob("shard-*-of-*"):
        match = re.fullmatch(r"shard-\d{5}-of-(\d{5})\..*", path.name)
        if match and int(match.group(1)) != num_shards:
            path.unlink()


_positive = argtypes.positive
_index = argtypes.whole(0, "indices start at 0")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.lm.prepare", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data_help = f"the text: {sources.VALID_SOURCES}"

    def tokenizer_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tokenizer", choices=tokenizers.KINDS, default="auto", help="auto: BPE when `tokenizers` is installed")
        p.add_argument("--vocab-size", type=_positive, default=tokenizers.BPE_VOCAB, help="the BPE's vocabulary (default 512)")
        p.add_argument(
            "--sample-bytes",
            type=argtypes.parse_size,
            default=tokenizers.SAMPLE_BYTES,
            help="the BPE's training sample, e.g. 64M",
        )

    dtype_help = "token file type; auto: uint16 while the vocabulary fits, else uint32"
    tok = commands.add_parser("tokenizer", help="train the tokeniser on a sample of the training split")
    tok.add_argument("--data", required=True, help=data_help)
    tok.add_argument("--out", type=Path, required=True, help="folder for tokenizer.json and tokenizer-meta.json")
    tokenizer_options(tok)
    shard = commands.add_parser("shard", help="tokenise part I of N of the source")
    shard.add_argument("--data", required=True, help=data_help)
    shard.add_argument("--tokenizer", type=Path, required=True, help="the folder `prepare tokenizer` wrote")
    shard.add_argument("--index", type=_index, required=True)
    shard.add_argument("--of", type=_positive, required=True)
    shard.add_argument("--out", type=Path, required=True, help="folder for the shard's files")
    shard.add_argument("--dtype", choices=shards.DTYPES, default="auto", help=dtype_help)
    everything = commands.add_parser("all", help="the tokeniser, then every shard, here")
    everything.add_argument("--data", required=True, help=data_help)
    everything.add_argument("--out", type=Path, required=True)
    everything.add_argument("--shards", type=_positive, default=1)
    everything.add_argument("--workers", type=_positive, default=1, help="processes tokenising shards at once")
    tokenizer_options(everything)
    everything.add_argument("--dtype", choices=shards.DTYPES, default="auto", help=dtype_help)
    export = commands.add_parser("export", help='write the source\'s documents as .jsonl, one {"text": ...} per line')
    export.add_argument("--data", required=True, help=data_help)
    export.add_argument("--out", type=Path, required=True, help="the .jsonl file to write")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    began = time.perf_counter()
    try:
        summary, work_bytes = _run(args)
    except DataError as e:
        parser.error(str(e))
    seconds = time.perf_counter() - began
    summary |= {"seconds": round(seconds, 3), "mb_per_s": round(work_bytes / 1e6 / seconds, 2)}  # MB: 10**6 bytes of source
    print(json.dumps(summary))
    return 0


def _run(args: argparse.Namespace) -> tuple[dict, float]:
    """The command's summary, and the bytes of source it covered."""
    source = sources.open_source(args.data)
    if args.command == "export":
        documents = export(source, args.out)
        return {"documents": documents, "out": str(args.out)}, source.size_bytes
    if args.command == "tokenizer":
        meta = tokenizers.train(source, args.out, args.tokenizer, args.vocab_size, args.sample_bytes)
        return {"tokenizer": meta.name, "vocab_size": meta.vocab_size, "sample_documents": meta.sample_documents}, meta.sample_bytes
    if args.command == "shard":
        _own_cores()
        shard, kept = shards.write(source, args.tokenizer, args.index, args.of, args.out, args.dtype)
        summary = {"shard": shard.index, "of": shard.of, "kept": kept, "dtype": shard.dtype}
        summary |= {f"{split}_tokens": shard.splits[split].tokens for split in sources.SPLITS}
        lo, hi = source.parts(args.of)[args.index]
        return summary, 0 if kept else (hi - lo) * source.size_bytes / max(1, source.units)
    corpus = prepare_all(args.data, args.out, args.shards, args.workers, args.tokenizer, args.vocab_size, args.sample_bytes, args.dtype)
    summary = {"shards": len(corpus.shards), "tokenizer": corpus.tokenizer.name}
    summary |= {f"{split}_{what}": getattr(corpus, what)(split) for split in sources.SPLITS for what in ("documents", "tokens")}
    return summary, source.size_bytes


if __name__ == "__main__":
    sys.exit(main())
