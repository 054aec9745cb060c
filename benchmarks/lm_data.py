"""Issue 14's data-path figures on CPU: tokenisation per core, the memory-mapped loader, and the old in-memory path.

For each corpus size (``--sizes 10M,200M``: a ``benchmarks/make_corpus.py`` .jsonl under
``--work``, generated once and reused), the tokeniser is trained once
(``prepare tokenizer``), and then:

1. Tokenisation per core: shard 0 of the corpus (one shard per 256 MB of text, as a raw
   source's cache is cut) is written by ``shards.write`` in a child process pinned to one
   core (sched_setaffinity, RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), against
   ``tokenizers``' own ``encode_batch`` of the same documents (read into memory first, with
   the separator ``write`` appends, in ``write``'s batches) in a child under the same
   pinning: both MB/s of the documents' UTF-8 text (MB = 10**6 bytes), best of ``--repeats``
   interleaved pairs, and their ratio. Bound: ratio >= 0.8. ``write``'s time is all of it:
   reading and parsing the source, the split hash, the uint16 conversion, the files and
   their sha256; the reference's is the encoding alone. The remaining shards are then
   written by ``prepare all`` (kept if already there).
2. Loader: batches per second through the training's own path (TokenCorpus.rows ->
   StepBatchSampler -> StepLoader, no workers), batch 8 x seq_len 128, ``--steps`` steps,
   cold (the token files dropped from the page cache with POSIX_FADV_DONTNEED first) and
   warm (the files read through first, then the next ``--steps`` steps, on fresh maps);
   against seconds per training step of the tiny GPT on random batches of the same shape
   (AdamW as the module's, 3 warm-up steps, median of 10), on 1 thread and on all.
3. Start-up and peak RSS, each in a fresh process: the old in-memory path (commit
   87acfcf's experiments/lm/data.py and tokenizer.py, copied into a package of their own
   under ``--work``) doing ``load(corpus, 128)`` with an empty tokeniser cache, as a
   first run did; and the new path, ``data.load(prepared, 128)``. Both then read the
   first batch, and both import torch and their modules before the clock starts. The old
   path keeps the corpus as Python ints: it runs under an address-space limit
   (``--old-memory``, 16G) and a timeout (``--old-timeout``, 600 s), past which it is
   reported as "did not finish (memory/time)".

Usage: python benchmarks/lm_data.py [--sizes 10M,200M] [--work /tmp/lm_data_bench] [--repeats 2] [--steps 200]
writes benchmarks/out/lm_data.json (``--out``). Exits 1 when the tokenisation bound fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from experiments.common.argtypes import parse_size  # noqa: E402  (no torch in this process)

MIN_RATIO = 0.8
BATCH, SEQ_LEN = 8, 128
MODEL = "tiny"
STEP_WARMUP, STEP_TIMED = 3, 10
OLD_COMMIT = "87acfcf"
OLD_FILES = ("data.py", "tokenizer.py")
OLD_PACKAGE = "experiments_old"
DID_NOT_FINISH = "did not finish (memory/time)"
PINNED_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
UNITS = {
    "bytes": "the corpus file's size",
    "tokenise_mb_s": "shards.write on one core, MB (10**6 bytes) of document text per second",
    "tokenizers_mb_s": "tokenizers' encode_batch of the same documents on one core, MB/s",
    "ratio": "tokenise_mb_s / tokenizers_mb_s",
    "loader_batches_s": "batches per second out of the StepLoader",
    "step_s": "seconds per training step of the tiny GPT (median)",
    "loader_to_step": "how many batches the loader serves (cold pages) in one all-threads step",
    "startup_s": "seconds of load(...) and the first batch, imports excluded",
    "rss_mb": "peak RSS of the process (ru_maxrss, MiB), torch imported",
}


class BenchError(RuntimeError):
    """A step of the benchmark failed: the message names the command and its error output."""


# --- the parent: sizes, corpora, children -------------------------------------------------------


@dataclass(frozen=True)
class Size:
    label: str  # as given, upper case: names the corpus files
    bytes: int


def parse_sizes(text: str) -> list[Size]:
    sizes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            sizes.append(Size(part.upper(), parse_size(part)))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"--sizes {text}: {e}") from None
    if not sizes:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: give sizes separated by commas, e.g. 10M,200M")
    return sizes


def child(name: str, spec: dict, *, core: int | None = None, memory: int | None = None, timeout: float | None = None) -> dict:
    """Run ``name`` (one of CHILDREN) in a fresh interpreter; its JSON result.

    ``core``: pinned to it, with the tokeniser's and torch's thread pools at one thread,
    set before the child's first import. ``memory``: its address-space limit in bytes.
    Raises subprocess.TimeoutExpired past ``timeout``, BenchError when it fails.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if core is not None:
        env |= PINNED_ENV

    def limit() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    argv = [sys.executable, str(Path(__file__).resolve()), "--child", name, json.dumps(spec)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=limit)
    if done.returncode != 0:
        raise BenchError(f"{name} child failed (exit {done.returncode}): {' '.join(argv)}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def limited(name: str, spec: dict, memory: int, timeout: float) -> tuple[dict | None, str]:
    """``child`` under a memory limit and a timeout: (result, "ok") or (None, DID_NOT_FINISH + why)."""
    try:
        return child(name, spec, memory=memory, timeout=timeout), "ok"
    except subprocess.TimeoutExpired:
        return None, f"{DID_NOT_FINISH}: over {timeout:g} s"
    except BenchError as e:
        last = [line for line in str(e).splitlines() if line.strip()][-1]
        return None, f"{DID_NOT_FINISH}: {last[:200]}"


def run(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise BenchError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n{done.stderr[-3000:]}")
    return done.stdout


def corpus(work: Path, size: Size) -> Path:
    """The synthetic corpus of this size, generated once (make_corpus renames a finished file into place)."""
    path = work / f"corpus-{size.label}.jsonl"
    if not path.is_file():
        run([sys.executable, str(HERE / "make_corpus.py"), "--out", str(path), "--bytes", str(size.bytes)], "make_corpus.py")
    return path


def old_package(work: Path) -> Path:
    """The old data path (commit OLD_COMMIT) as the package OLD_PACKAGE.lm under the folder returned."""
    root = work / "old"
    lm = root / OLD_PACKAGE / "lm"
    lm.mkdir(parents=True, exist_ok=True)
    for init in (root / OLD_PACKAGE / "__init__.py", lm / "__init__.py"):
        init.write_text("")
    for name in OLD_FILES:
        text = run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:experiments/lm/{name}"], f"reading the old {name}")
        rewritten = text.replace("from experiments.lm import", f"from {OLD_PACKAGE}.lm import")
        if "experiments.lm" in rewritten:
            raise BenchError(f"{OLD_COMMIT}:experiments/lm/{name} imports experiments.lm in a way this benchmark does not rewrite")
        (lm / name).write_text(rewritten)
    return root


def pinned_core() -> int:
    return max(os.sched_getaffinity(0))  # the last: core 0 takes most of the interrupts


def tokenisation(path: Path, prepared: Path, of: int, repeats: int) -> dict:
    """Shard 0 of ``of`` written pinned, against encode_batch of its documents pinned; best MB/s of each."""
    core = pinned_core()
    spec = {"corpus": str(path), "prepared": str(prepared), "index": 0, "of": of}
    write_s, reference_s, reference, affinities = [], [], {}, set()
    for r in range(repeats):
        for side in ("write", "reference") if r % 2 == 0 else ("reference", "write"):  # alternate: drifts hit both
            if side == "write":
                (prepared / f"shard-00000-of-{of:05d}.json").unlink(missing_ok=True)  # or write keeps the finished shard
                written = child("write", spec, core=core)
                write_s.append(written["seconds"])
                affinities.add(tuple(written["affinity"]))
            else:
                reference = child("reference", spec, core=core)
                reference_s.append(reference["seconds"])
                affinities.add(tuple(reference["affinity"]))
    mb = reference["text_bytes"] / 1e6
    tokenise, own = mb / min(write_s), mb / min(reference_s)
    return {
        "core": core,
        "children_cores": sorted(set().union(*affinities)),  # what the timed children ran on: [core]
        "shard_text_bytes": reference["text_bytes"],
        "shard_documents": reference["documents"],
        "write_s": write_s,
        "encode_batch_s": reference_s,
        "tokenise_mb_s": tokenise,
        "tokenizers_mb_s": own,
        "ratio": tokenise / own,
        "tokenizers_version": reference["tokenizers"],
    }


def measure(size: Size, work: Path, args: argparse.Namespace) -> dict:
    from experiments.lm import data, shards

    path = corpus(work, size)
    prepared = work / f"prepared-{size.label}"
    of = max(1, math.ceil(path.stat().st_size / data.SHARD_BYTES))
    tok = json.loads(
        run([sys.executable, "-m", "experiments.lm.prepare", "tokenizer", "--data", str(path), "--out", str(prepared)], "prepare")
    )
    print(f"[{size.label}] tokeniser {tok['tokenizer']} ({tok['seconds']:.1f} s); tokenising shard 0 of {of} on one core", flush=True)
    speed = tokenisation(path, prepared, of, args.repeats)
    cores = str(len(os.sched_getaffinity(0)))
    run(
        [
            sys.executable,
            "-m",
            "experiments.lm.prepare",
            "all",
            "--data",
            str(path),
            "--out",
            str(prepared),
            "--shards",
            str(of),
            "--workers",
            cores,
        ],
        "prepare all",
    )
    opened = shards.TokenCorpus.open(prepared)
    print(f"[{size.label}] loader and model steps", flush=True)
    loader = child("loader", {"prepared": str(prepared), "steps": args.steps})
    step = child("step", {"vocab": opened.tokenizer.vocab_size})
    print(f"[{size.label}] old and new start-up", flush=True)
    cache = work / f"old-cache-{os.getpid()}"
    shutil.rmtree(cache, ignore_errors=True)
    old, old_status = limited(
        "old", {"root": str(old_package(work)), "corpus": str(path), "cache": str(cache)}, args.old_memory, args.old_timeout
    )
    shutil.rmtree(cache, ignore_errors=True)
    new = child("new", {"prepared": str(prepared)})
    return {
        "documents": sum(opened.documents(split) for split in ("train", "val")),
        "bytes": path.stat().st_size,
        "tokens": sum(opened.tokens(split) for split in ("train", "val")),
        "shards": of,
        "tokenizer": opened.tokenizer.name,
        "tokenise_mb_s": speed["tokenise_mb_s"],
        "tokenizers_mb_s": speed["tokenizers_mb_s"],
        "ratio": speed["ratio"],
        "tokenisation": speed,
        "loader_batches_s": {"cold": loader["cold_batches_s"], "warm": loader["warm_batches_s"]},
        "loader_rows": loader["rows"],
        "step_s": {"1_thread": step["1_thread"], "all_threads": step["all_threads"]},
        "loader_to_step": loader["cold_batches_s"] * step["all_threads"],
        "startup_s": {"old": old and old["seconds"], "new": new["seconds"]},
        "rss_mb": {"old": old and old["rss_mb"], "new": new["rss_mb"]},
        "rss_before_load_mb": {"old": old and old["rss_before_mb"], "new": new["rss_before_mb"]},
        "old_status": old_status,
        "torch": step["torch"],
    }


def machine() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), ""
    )
    meminfo = Path("/proc/meminfo").read_text().split()
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20, 1),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
    }


def table(results: dict[str, dict]) -> str:
    """One line per size; a column per figure, under a header naming its group and unit."""

    def f(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    columns = [
        ("size", lambda label, r: label),
        ("docs", lambda label, r: str(r["documents"])),
        ("MB", lambda label, r: f(r["bytes"] / 1e6, ".1f")),
        ("tokens", lambda label, r: str(r["tokens"])),
        ("write MB/s", lambda label, r: f(r["tokenise_mb_s"], ".2f")),
        ("hf MB/s", lambda label, r: f(r["tokenizers_mb_s"], ".2f")),
        ("ratio", lambda label, r: f(r["ratio"], ".2f")),
        ("cold b/s", lambda label, r: f(r["loader_batches_s"]["cold"], ".0f")),
        ("warm b/s", lambda label, r: f(r["loader_batches_s"]["warm"], ".0f")),
        ("s/step 1t", lambda label, r: f(r["step_s"]["1_thread"], ".3f")),
        ("s/step all", lambda label, r: f(r["step_s"]["all_threads"], ".3f")),
        ("start old", lambda label, r: f(r["startup_s"]["old"], ".2f")),
        ("start new", lambda label, r: f(r["startup_s"]["new"], ".2f")),
        ("RSS old", lambda label, r: f(r["rss_mb"]["old"], ".0f")),
        ("RSS new", lambda label, r: f(r["rss_mb"]["new"], ".0f")),
    ]
    cells = [[name for name, _ in columns]] + [[cell(label, r) for _, cell in columns] for label, r in results.items()]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [" ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in cells]
    lines += [f"{label}: old path {r['old_status']}" for label, r in results.items() if r["old_status"] != "ok"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("10M,200M"), help="corpus sizes, e.g. 10M,200M,2G (default 10M,200M)")
    ap.add_argument(
        "--work", type=Path, default=Path("/tmp/lm_data_bench"), help="corpora and prepared shards, reused (default /tmp/lm_data_bench)"
    )
    ap.add_argument(
        "--out", type=Path, default=HERE / "out" / "lm_data.json", help="the JSON written (default benchmarks/out/lm_data.json)"
    )
    ap.add_argument(
        "--repeats", type=int, choices=range(1, 11), default=2, metavar="1..10", help="tokenisation pairs; best of each (default 2)"
    )
    ap.add_argument("--steps", type=int, default=200, help="loader steps, cold and warm each (default 200)")
    ap.add_argument("--old-memory", type=parse_size, default=parse_size("16G"), help="the old path's address-space limit (default 16G)")
    ap.add_argument("--old-timeout", type=float, default=600.0, help="the old path's time limit in seconds (default 600)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: must be at least 1")
    args.work.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        for size in args.sizes:
            results[size.label] = measure(size, args.work, args)
    except BenchError as e:
        print(f"lm_data.py: error: {e}", file=sys.stderr)
        return 2
    failures = [
        f"{label}: shards.write tokenises at {r['ratio']:.2f}x encode_batch (bound >= {MIN_RATIO})"
        for label, r in results.items()
        if r["ratio"] < MIN_RATIO
    ]
    print("\n" + table(results))
    result = {
        "machine": machine(),
        "settings": {
            "batch_size": BATCH,
            "seq_len": SEQ_LEN,
            "model": MODEL,
            "loader_steps": args.steps,
            "repeats": args.repeats,
            "old_commit": OLD_COMMIT,
            "old_memory_bytes": args.old_memory,
            "old_timeout_s": args.old_timeout,
            "work": str(args.work),
        },
        "units": UNITS,
        "sizes": results,
        "bound": {"min_ratio": MIN_RATIO},
        "failures": failures,
        "ok": not failures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if not failures else "\nFAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


# --- the children: each runs in its own interpreter and prints one JSON line ---------------------


def _write(spec: dict) -> dict:
    from experiments.lm import shards, sources

    source = sources.open_source(spec["corpus"])
    prepared = Path(spec["prepared"])
    began = time.perf_counter()
    meta, kept = shards.write(source, prepared, spec["index"], spec["of"], prepared)
    seconds = time.perf_counter() - began
    if kept:
        raise BenchError("shards.write kept a finished shard: nothing was timed")
    return {"seconds": seconds, "tokens": sum(split.tokens for split in meta.splits.values()), "affinity": sorted(os.sched_getaffinity(0))}


def _reference(spec: dict) -> dict:
    import tokenizers

    from experiments.lm import shards, sources
    from experiments.lm import tokenizer as lm_tokenizer

    texts = list(sources.open_source(spec["corpus"]).documents(spec["index"], spec["of"]))
    text_bytes = sum(len(text.encode()) for text in texts)
    # write's batches (its private batching, so the sizes match exactly), each text with the separator write appends.
    batches = list(shards._batches(text + shards.SEPARATOR for text in texts))
    bpe = tokenizers.Tokenizer.from_file(str(lm_tokenizer.folder_of(Path(spec["prepared"])) / lm_tokenizer.FILE))
    began = time.perf_counter()
    for batch in batches:
        bpe.encode_batch(batch, add_special_tokens=False)
    seconds = time.perf_counter() - began
    affinity = sorted(os.sched_getaffinity(0))
    return {
        "seconds": seconds,
        "text_bytes": text_bytes,
        "documents": len(texts),
        "tokenizers": tokenizers.__version__,
        "affinity": affinity,
    }


def _drop_from_page_cache(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _read_through(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def _loader(spec: dict) -> dict:
    from experiments.lm import shards
    from experiments.lm.sampler import StepBatchSampler, StepLoader

    corpus = shards.TokenCorpus.open(Path(spec["prepared"]))
    bins = [meta.bin(folder, "train") for folder, meta in corpus.shards]
    steps = spec["steps"]

    def batches_per_s(first: int) -> float:
        rows = corpus.rows("train", SEQ_LEN)  # fresh maps: no page of them in this process yet
        loader = StepLoader(rows, StepBatchSampler(len(rows), BATCH, 0, 1, 0, first, first + steps))
        began = time.perf_counter()
        count = sum(1 for _ in loader)
        return count / (time.perf_counter() - began)

    _drop_from_page_cache(bins)
    cold = batches_per_s(0)
    _read_through(bins)
    warm = batches_per_s(steps)  # other rows than the cold pass's: page-cache hits, not pages this process mapped
    return {"cold_batches_s": cold, "warm_batches_s": warm, "rows": len(corpus.rows("train", SEQ_LEN))}


def _step(spec: dict) -> dict:
    import torch
    import torch.nn.functional as F

    from experiments.common import speed
    from experiments.lm import gpt

    torch.manual_seed(0)
    net = gpt.build(MODEL, spec["vocab"], SEQ_LEN)
    optimizer = speed.adamw(net.parameters(), lr=1e-3, betas=(0.9, 0.95))  # as CausalLM.configure_optimizers
    batch = torch.randint(spec["vocab"], (BATCH, SEQ_LEN + 1))

    def seconds_per_step(threads: int) -> float:
        torch.set_num_threads(threads)
        times = []
        for i in range(STEP_WARMUP + STEP_TIMED):
            began = time.perf_counter()
            logits = net(batch[:, :-1])
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if i >= STEP_WARMUP:
                times.append(time.perf_counter() - began)
        return statistics.median(times)

    return {"1_thread": seconds_per_step(1), "all_threads": seconds_per_step(len(os.sched_getaffinity(0))), "torch": torch.__version__}


def _first_batch(dataset) -> None:
    from experiments.lm.sampler import StepBatchSampler, StepLoader

    next(iter(StepLoader(dataset, StepBatchSampler(len(dataset), BATCH, 0, 1, 0, 0, 1))))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _old(spec: dict) -> dict:
    sys.path.insert(0, spec["root"])
    import importlib

    import torch  # noqa: F401  (imported before the clock, as the new side does)

    old = importlib.import_module(f"{OLD_PACKAGE}.lm.data")
    before = _peak_rss_mb()
    began = time.perf_counter()
    data = old.load(spec["corpus"], SEQ_LEN, "auto", Path(spec["cache"]))
    _first_batch(data.train)
    return {"seconds": time.perf_counter() - began, "rss_mb": _peak_rss_mb(), "rss_before_mb": before, "rows": len(data.train)}


def _new(spec: dict) -> dict:
    import torch  # noqa: F401  (the first batch would import it: outside the clock, as on the old side)

    from experiments.lm import data

    before = _peak_rss_mb()
    began = time.perf_counter()
    loaded = data.load(spec["prepared"], SEQ_LEN)
    _first_batch(loaded.train)
    return {"seconds": time.perf_counter() - began, "rss_mb": _peak_rss_mb(), "rss_before_mb": before, "rows": len(loaded.train)}


CHILDREN: dict[str, Callable[[dict], dict]] = {
    "write": _write,
    "reference": _reference,
    "loader": _loader,
    "step": _step,
    "old": _old,
    "new": _new,
}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(CHILDREN[sys.argv[2]](json.loads(sys.argv[3]))))
        sys.exit(0)
    sys.exit(main())
