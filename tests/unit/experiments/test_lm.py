"""The language-model experiment (experiments/lm/): model, data, order, measurements, the command
line, and interrupted and resumed runs in this process. Runs of `python -m experiments.lm`, one
and two DDP processes: tests/integration/local/test_lm_runs.py."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from fakes import FakeDataset, FakeDatasetDict
from support import LM_SHORT, isolated, model_weights, require_training, signal_at
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)

# --- the model ---------------------------------------------------------------------------------


def test_sizes_by_name_and_their_parameter_counts():
    require_training()
    import torch

    from experiments.lm import gpt

    assert gpt.names() == ["tiny", "small", "medium", "large", "xl"]
    assert gpt.config("medium") == gpt.GPTConfig(n_layers=24, d_model=1024, n_heads=16)
    counts = {}
    for name in gpt.names():
        with torch.device("meta"):  # shapes only: the large model without its 3 GB
            net = gpt.build(name, vocab_size=512, seq_len=1024)
        counts[name] = sum(p.numel() for p in net.parameters())
        assert counts[name] == gpt.parameters(gpt.config(name), 512, 1024), name
    assert 0.7e6 < counts["tiny"] < 1.5e6
    assert 290e6 < counts["medium"] < 360e6 and 700e6 < counts["large"] < 800e6
    assert counts["xl"] == 1_211_748_352  # as gpt.py's comment says
    with pytest.raises(ValueError, match=r"unknown model 'huge'; valid models: tiny, small, medium, large, xl"):
        gpt.build("huge", 512, 128)


def test_output_is_tied_to_the_embedding_and_causal():
    require_training()
    import torch

    from experiments.lm import gpt

    torch.manual_seed(0)
    net = gpt.build("tiny", vocab_size=64, seq_len=16)
    assert not any(p is not net.embed.weight and p.shape == net.embed.weight.shape for p in net.parameters())
    tokens = torch.randint(0, 64, (2, 16))
    logits = net(tokens)
    assert logits.shape == (2, 16, 64)
    changed = tokens.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 64
    after = net(changed)
    assert torch.equal(logits[:, :9], after[:, :9])  # no position sees the future
    assert not torch.equal(logits[:, 9:], after[:, 9:])
    with torch.no_grad():
        net.embed.weight[3] += 1.0  # the output row of token 3 is its embedding
    assert not torch.equal(net(tokens)[..., 3], logits[..., 3])


def test_flops_per_token_is_6n_plus_attention():
    require_training()
    from experiments.lm import gpt

    config = gpt.config("medium")
    n = gpt.parameters(config, 512, 2048) - 2048 * 1024  # without the position table
    assert gpt.flops_per_token(config, 512, 2048) == 6 * n + 12 * 24 * 1024 * 2048


# --- data --------------------------------------------------------------------------------------


# Documents of four lines, a blank line between them: a .txt of many documents, so both splits get some.
DOCS = [
    "".join(f"Line {i}: the quick brown fox jumps over the lazy dog, again and again.\n" for i in range(j, j + 4)) for j in range(0, 400, 4)
]
TEXT = "\n".join(DOCS)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Raw sources are prepared into $XDG_CACHE_HOME/orchestrator-lm: here, one per test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "orchestrator-lm"


def _load(source: Path | str, tokenizer: str = "bytes", **kwargs):
    from experiments.lm import data as lm_data

    return lm_data.load(str(source), seq_len=32, tokenizer=tokenizer, **kwargs)


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def _halves() -> list[list[str]]:
    return [DOCS[: len(DOCS) // 2], DOCS[len(DOCS) // 2 :]]


def _stream(texts: list[str], split: str) -> bytes:
    """The bytes tokeniser's stream of a split: its documents in order, each followed by the separator."""
    from experiments.lm.sources import split_of

    return b"".join(t.rstrip("\n").encode() + b"\n\n" for t in texts if split_of(t.rstrip("\n")) == split)


def _rows(rows) -> list[list[int]]:
    return [rows[i].tolist() for i in range(len(rows))]


def test_text_jsonl_and_folders_give_the_same_rows(tmp_path):
    """The same documents through each reader: .txt, .jsonl, and a folder holding both kinds."""
    require_training()
    (tmp_path / "one.txt").write_text(TEXT)
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("\n".join(_halves()[0]))
    _jsonl(folder / "sub" / "b.jsonl", [d.rstrip("\n") for d in _halves()[1]])
    (folder / "ignored.csv").write_text("not,text\n")
    text = _load(tmp_path / "one.txt")
    jsonl = _load(_jsonl(tmp_path / "two.jsonl", [d.rstrip("\n") for d in DOCS]))
    both = _load(folder)
    assert text.seq_len == 32 and text.train[0].shape == (33,) and text.vocab_size == 256 and text.tokenizer == "bytes"
    assert len(text.train) > 5 * len(text.val) > 0
    assert text.train_tokens == len(text.train) * 33
    # A .txt document loses the newlines that end it: the three readers give the same documents.
    assert _rows(jsonl.train) == _rows(both.train) == _rows(text.train) and jsonl.fingerprint == both.fingerprint == text.fingerprint
    train, val = _stream(DOCS, "train"), _stream(DOCS, "val")
    assert bytes(text.train[0].tolist()) == train[:33] and bytes(text.train[1].tolist()) == train[33:66]
    assert bytes(text.val[0].tolist()) == val[:33] and len(text.val) == len(val) // 33


def test_parquet_reads_its_text_column(tmp_path):
    require_training()
    import pyarrow as pa  # the test extra installs it
    import pyarrow.parquet as pq

    texts = [d.rstrip("\n") for d in DOCS]
    pq.write_table(pa.table({"text": texts, "n": list(range(len(texts)))}), tmp_path / "d.parquet", row_group_size=7)
    expected = _load(_jsonl(tmp_path / "d.jsonl", texts))
    assert _rows(_load(tmp_path / "d.parquet").train) == _rows(expected.train)


class SlicedDataset(FakeDataset):
    """What our reader uses of a `datasets` Dataset: also num_rows, and rows by a slice (a dict of columns)."""

    @property
    def num_rows(self):
        return len(next(iter(self.values())))

    def __getitem__(self, key):
        return {name: column[key] for name, column in self.items()} if isinstance(key, slice) else super().__getitem__(key)


def test_saved_datasets_folders_read_their_text_column(tmp_path, monkeypatch):
    """Our part of reading a `save_to_disk` folder (finding it, the split, the column),
    with the `datasets` package faked: the real one is not a dependency. (Checked
    against datasets 5.2 in a separate environment when this was written.)"""
    require_training()
    import types

    from experiments.lm.data import DataError

    saved = {}

    def load_from_disk(path):
        return saved[path]

    fake = types.SimpleNamespace(load_from_disk=load_from_disk, DatasetDict=FakeDatasetDict)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    texts = [d.rstrip("\n") for d in DOCS]
    expected = _load(_jsonl(tmp_path / "d.jsonl", texts))
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "state.json").write_text("{}")
    saved[str(tmp_path / "saved")] = SlicedDataset(text=texts, n=list(range(len(texts))))
    (tmp_path / "saved-dict").mkdir()
    (tmp_path / "saved-dict" / "dataset_dict.json").write_text("{}")
    saved[str(tmp_path / "saved-dict")] = FakeDatasetDict(test=SlicedDataset(text=["x"]), train=SlicedDataset(text=texts))
    assert _rows(_load(tmp_path / "saved").train) == _rows(expected.train)
    assert _rows(_load(tmp_path / "saved-dict").train) == _rows(expected.train)
    (tmp_path / "no-text").mkdir()
    (tmp_path / "no-text" / "state.json").write_text("{}")
    saved[str(tmp_path / "no-text")] = SlicedDataset(body=["x"])
    with pytest.raises(DataError, match=r"no column 'text'; columns: body"):
        _load(tmp_path / "no-text")


def test_missing_readers_and_bad_files_are_clear_errors(tmp_path, monkeypatch):
    require_training()
    from experiments.lm.data import DataError
    from experiments.lm.sources import split_of

    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text("{}")
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "pyarrow", None)  # import fails as if not installed
        patch.setitem(sys.modules, "pyarrow.parquet", None)
        patch.setitem(sys.modules, "datasets", None)
        with pytest.raises(DataError, match=r"reading \.parquet needs pyarrow, which is not installed"):
            _load(tmp_path / "d.parquet")
        with pytest.raises(DataError, match=r"a Hugging Face `datasets` folder, and the datasets package is not installed"):
            _load(saved)
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: no string field 'text'"):
        _load(tmp_path / "bad.jsonl")
    (tmp_path / "notes.md").write_text(TEXT)
    with pytest.raises(DataError, match=r"unsupported file type '\.md'; give pydoc-topics, a \.txt"):
        _load(tmp_path / "notes.md")
    with pytest.raises(DataError, match=r"no such file or folder; give pydoc-topics"):
        _load(tmp_path / "absent.txt")
    (tmp_path / "one.txt").write_text(TEXT.replace("\n\n", "\n"))  # no blank line: one document, one split
    one = "train" if split_of(TEXT.replace("\n\n", "\n").rstrip("\n")) == "train" else "val"
    counts = "1 training and 0 validation" if one == "train" else "0 training and 1 validation"
    with pytest.raises(DataError, match=rf"{counts} documents; both splits need at least one"):
        _load(tmp_path / "one.txt")
    # Both splits, but a validation shorter than one sequence of 33 tokens.
    short = [d for d in DOCS if split_of(d.rstrip("\n")) == "train"][:5] + ["x"]
    assert split_of("x") == "val"  # the hash's choice, checked so the case above stays what it says
    with pytest.raises(DataError, match=r"the validation split \(3 tokens in 1 shards\) holds no sequence of 33 tokens"):
        _load(_jsonl(tmp_path / "short.jsonl", short))


def test_pydoc_topics_bpe_is_deterministic_cached_and_split(tmp_path, cache, monkeypatch):
    require_training()
    pytest.importorskip("tokenizers")
    from experiments.lm import sources

    first = _load("pydoc-topics", "bpe", tokenizer_dir=tmp_path / "run" / "tokenizer")
    [prepared] = [p for p in cache.iterdir() if p.is_dir()]
    assert first.tokenizer == "bpe-512" and first.vocab_size == 512
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_bytes() == (prepared / "tokenizer.json").read_bytes()
    meta = prepared / "shard-00000-of-00001.json"
    mtime = meta.stat().st_mtime_ns
    again = _load("pydoc-topics", "bpe")
    assert again.fingerprint == first.fingerprint and meta.stat().st_mtime_ns == mtime  # reused, not prepared again
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    fresh = _load("pydoc-topics", "bpe")  # prepared anew: the same merges, the same tokens
    assert fresh.fingerprint == first.fingerprint and _rows(fresh.val) == _rows(first.val)
    assert max(max(row) for row in _rows(first.train)) < 512
    # The split is of documents: each in one split, about a tenth in validation, none of its text in training.
    texts = list(sources.open_source("pydoc-topics").all())
    val = [t for t in texts if sources.split_of(t) == "val"]
    assert 0.04 * len(texts) < len(val) < 0.2 * len(texts)
    from experiments.lm import tokenizer as tokenizers

    bpe = tokenizers.load(prepared)
    train_text = bpe.decode([token for row in _rows(first.train) for token in row])
    assert all(t[:200] not in train_text for t in val)
    train = [t for t in texts if t not in val]
    assert all(t[:200] in train_text for t in train[:-1])  # all but the last: the rows drop the stream's tail
    # BPE packs the same text into fewer tokens than bytes.
    assert first.train_tokens < 0.7 * _load("pydoc-topics", "bytes").train_tokens


# --- the training order ------------------------------------------------------------------------


def test_order_is_a_function_of_the_step_sharded_by_rank():
    require_training()
    from experiments.lm.sampler import StepBatchSampler

    def sampler(batch, rank, world, start=0, seed=7):
        return StepBatchSampler(num_items=10, batch_size=batch, rank=rank, world_size=world, seed=seed, start_step=start, steps=6)

    one = list(sampler(4, 0, 1))
    assert len(one) == 6 and len(sampler(4, 0, 1, start=4)) == 6
    # Two ranks of 2 take the halves of the single rank's batches of 4.
    assert [a + b for a, b in zip(sampler(2, 0, 2), sampler(2, 1, 2), strict=True)] == one
    # Resumed at step 4: the same batches the uninterrupted run had from step 4.
    assert list(sampler(4, 0, 1, start=4)) == one[4:]
    # Each pass visits every item once, in an order keyed by the seed.
    stream = [i for batch in one for i in batch]
    assert sorted(stream[:10]) == sorted(stream[10:20]) == list(range(10)) and stream[:10] != stream[10:20]
    assert list(sampler(4, 0, 1, seed=8)) != one


def test_the_rows_told_ahead_are_the_batches_yielded_each_computed_once():
    require_training()
    from experiments.lm.sampler import LOOKAHEAD, StepBatchSampler

    plain = list(StepBatchSampler(10, 4, 0, 1, seed=7, start_step=1, steps=6))
    sampler = StepBatchSampler(10, 4, 0, 1, seed=7, start_step=1, steps=6)
    told, computed = [], []
    sampler.ahead = told.append
    batch = sampler.batch
    sampler.batch = lambda step: computed.append(step) or batch(step)
    assert list(sampler) == plain
    assert told == plain[1:]  # every later step's rows, announced before it is yielded
    assert sorted(computed) == list(range(1, 6)) and LOOKAHEAD >= 1  # no step's indices computed twice


def test_loader_refuses_a_checkpoint_of_another_order():
    require_training()
    import torch

    from experiments.lm.sampler import StepBatchSampler, StepLoader

    loader = StepLoader(torch.zeros(10, 3), StepBatchSampler(10, 2, 0, 2, seed=1, start_step=0, steps=5))
    state = loader.state_dict()
    assert state == {"seed": 1, "global_batch_size": 4, "num_items": 10}
    loader.load_state_dict(state)
    with pytest.raises(ValueError, match="the checkpoint was written with data order"):
        loader.load_state_dict({**state, "global_batch_size": 8})


# --- measurements ------------------------------------------------------------------------------


def test_data_wait_share_is_the_gap_between_steps(monkeypatch):
    require_training()
    from types import SimpleNamespace

    from experiments.common import datawait

    # Read once per hook (not at the end of the warm-up step): steps of 1 s, gaps of 0.5, 0.1 and 0.9 s.
    clock = iter([0.0, 1.0, 2.0, 2.5, 3.5, 3.6, 4.6, 5.5, 6.5]).__next__
    monkeypatch.setattr(datawait.time, "perf_counter", clock)
    ages = iter([7.5, 99.0]).__next__  # the process's age, read at the first step only
    monkeypatch.setattr(datawait, "process_age_s", ages)
    callback, trainer = datawait.DataWait(warmup_steps=1), SimpleNamespace(global_step=0, max_steps=5)
    for step in range(5):
        trainer.global_step = step
        callback.on_train_batch_start(trainer, None, None, step)
        callback.on_train_batch_end(trainer, None, None, None, step)
    assert callback.gaps == 3
    assert callback.share == callback.gap_share == pytest.approx(1.5 / (1.5 + 4.0))  # no timed loader: the whole gap
    assert callback.first_step_s == 7.5


def test_data_wait_is_the_loaders_fetch_and_the_transfer_not_lightnings_work_between_steps(monkeypatch):
    """Steps of 1 s; in each 0.5 s gap, Lightning waits 0.3 s for the other ranks, the loader
    takes 0.1 s, the batch moves to the device in 0.1 s: data wait 0.2 s, the gap 0.5 s."""
    require_training()
    from types import SimpleNamespace

    from experiments.common import datawait, timedloader

    now = [0.0]
    monkeypatch.setattr(datawait.time, "perf_counter", lambda: now[0])  # the time module: the loader's clock too

    class Slow(list):
        def __getitem__(self, i):
            now[0] += 0.1  # reading a row
            return super().__getitem__(i)

    loader = timedloader.TimedLoader(Slow(range(10)), batch_size=1)
    batches = iter(loader)
    callback, trainer = datawait.DataWait(warmup_steps=0), SimpleNamespace(global_step=0, max_steps=4, train_dataloader=loader)
    for step in range(4):
        trainer.global_step = step
        now[0] += 0.3  # the broadcast between steps
        next(batches)
        now[0] += 0.1  # to the device
        callback.on_train_batch_start(trainer, None, None, step)
        now[0] += 1.0
        callback.on_train_batch_end(trainer, None, None, None, step)
    assert callback.gaps == 3
    assert callback.gap_share == pytest.approx(1.5 / 5.5)  # 3 gaps, 4 steps
    assert callback.share == pytest.approx(0.6 / 5.5)
    assert loader.fetch_s == pytest.approx(0.4)


def test_a_timed_loader_is_what_lightning_trains_from():
    """The lm order's loader and the classifier's are timed, and a timed loader's iterator
    still gives every batch and its length."""
    require_training()
    from experiments.common.timedloader import TimedLoader
    from experiments.lm.sampler import StepLoader

    assert issubclass(StepLoader, TimedLoader)
    loader = TimedLoader(list(range(6)), batch_size=2)
    batches = iter(loader)
    assert len(batches) == 3 and [b.tolist() for b in batches] == [[0, 1], [2, 3], [4, 5]]
    assert loader.fetch_s > 0 and loader.fetched_at is not None


def test_a_process_knows_its_age_from_proc():
    """What time_to_first_step_s counts from: the process's start, Python's start-up included.
    The function alone in a fresh process (its module would bring Lightning's ~8 s of imports)."""
    import ast
    import subprocess
    import sys

    from support import ROOT

    source = (ROOT / "experiments/common/datawait.py").read_text()
    (function,) = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "process_age_s"]
    code = f"import os, time\n{ast.get_source_segment(source, function)}\ntime.sleep(0.5)\nprint(process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= age < 60, age


def test_peak_comes_from_the_environment_or_a_stated_estimate(monkeypatch):
    require_training()
    from experiments.common import peak

    monkeypatch.setenv("ORCH_PEAK_TFLOPS", "989")
    assert peak.job_peak("gpu", 4, cpus=64) == (989e12 * 4, "ORCH_PEAK_TFLOPS=989 per device x 4 devices")
    monkeypatch.setenv("ORCH_PEAK_TFLOPS", "fast")
    with pytest.raises(ValueError, match="ORCH_PEAK_TFLOPS='fast': must be a positive number"):
        peak.job_peak("gpu", 4, cpus=64)
    monkeypatch.delenv("ORCH_PEAK_TFLOPS")
    value, source = peak.job_peak("gpu", 4, cpus=64)
    assert value is None and source.startswith("none: set ORCH_PEAK_TFLOPS")
    value, source = peak.job_peak("cpu", 1, cpus=2)
    per_core, how = peak.cpu_core_peak()
    assert (value, source) == ((per_core * 2, f"estimate: 2 CPUs x {how}") if per_core else (None, f"none: {how}; set ORCH_PEAK_TFLOPS"))
    assert peak.job_cpus(1) == len(os.sched_getaffinity(0))


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """Runs of lm.main in this process, in tmp_path with corpus.txt, leaving the process as they found it."""
    (tmp_path / "corpus.txt").write_text(TEXT)  # small: a short validation (the cache fixture keeps its preparation here)
    yield from isolated(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--data", "no/such.txt"], ["--data no/such.txt: no such file or folder; give pydoc-topics, a .txt, .jsonl or .parquet file"]),
        (["--model", "huge"], ["argument --model: invalid choice: 'huge'", "tiny", "small", "medium", "large"]),
        (
            ["--devices", "3", "--global-batch-size", "8"],
            ["--global-batch-size 8 does not divide across 3 devices", "give a multiple of 3"],
        ),
        (["--goldfish-k", "1"], ["goldfish k must be at least 2"]),
        (["--strategy", "fsdp", "--accelerator", "cpu"], ["--strategy fsdp needs GPUs", "valid on CPU: auto, ddp"]),
    ],
)
def test_bad_input_is_a_usage_error_before_anything_starts(in_process, capsys, argv, fragments):
    import torch

    from experiments.lm import cli as lm

    with pytest.raises(SystemExit) as exit:
        lm.main(["--output", "out", *argv])
    assert exit.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("python -m experiments.lm: error: ") and all(fragment in last for fragment in fragments), last
    # Nothing made: no output, no process group.
    assert not (in_process / "out").exists() and not torch.distributed.is_initialized()


def test_all_problems_are_named_at_once(in_process, capsys):
    from experiments.lm import cli as lm

    with pytest.raises(SystemExit):
        lm.main(["--output", "out", "--data", "nope", "--goldfish-k", "1", "--devices", "2", "--global-batch-size", "3"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--data nope" in last and "goldfish k" in last and "--global-batch-size 3" in last


@pytest.mark.slow
def test_interrupted_and_resumed_run_ends_with_the_same_weights(in_process):
    """With the goldfish loss on: its mask, too, must be the same after the resume."""
    import torch

    from experiments.lm import cli as lm

    argv = [*LM_SHORT, "--data", "corpus.txt", "--max-steps", "8", "--batch-size", "4", "--seed", "3", "--goldfish-k", "4"]
    lm.main([*argv, "--output", "whole"])
    with pytest.raises(SystemExit) as exit:
        lm.main([*argv, "--output", "cut"], callbacks=[signal_at(3)])
    assert exit.value.code == 75
    checkpoint = torch.load(in_process / "cut" / "model" / "requeue.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 3 and not (in_process / "cut" / "metrics.json").exists()
    lm.main([*argv, "--output", "cut"])  # the requeued run: resumes from model/requeue.ckpt
    whole, resumed = model_weights(in_process / "whole"), model_weights(in_process / "cut")
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    assert not (in_process / "cut" / "model" / "requeue.ckpt").exists()
    metrics = [json.loads((in_process / run / "metrics.json").read_text()) for run in ("whole", "cut")]
    assert metrics[0]["val_loss"] == metrics[1]["val_loss"]
    # The curves too: the resumed run kept the first run's points and added its own, each step once.
    whole_curve, cut_curve = ((in_process / run / "dvclive/plots/metrics/train/loss.tsv").read_text() for run in ("whole", "cut"))
    assert cut_curve == whole_curve and len(cut_curve.splitlines()) == 1 + 8


@pytest.mark.slow
def test_a_signal_in_the_last_step_finishes_the_run(in_process, monkeypatch):
    """Nothing is left to resume: the run ends normally and tells the job script not to requeue."""
    import pytorch_lightning as pl

    from experiments.lm import cli as lm

    marker = in_process / "requeue-marker"
    monkeypatch.setenv("ORCH_REQUEUE_MARKER", str(marker))
    checkpointed = []

    class Spy(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            checkpointed.append(marker.exists())  # the signal was acted on

    argv = [*LM_SHORT, "--data", "corpus.txt", "--max-steps", "3", "--batch-size", "4", "--output", "out"]
    lm.main(argv, callbacks=[signal_at(3), Spy()])
    assert checkpointed == [True]
    assert json.loads((in_process / "out" / "metrics.json").read_text())["val_loss"] > 0
    assert not (in_process / "out" / "model" / "requeue.ckpt").exists() and not marker.exists()


@pytest.mark.slow
def test_a_signal_while_the_data_loads_stops_the_run_after_its_first_step(in_process, monkeypatch):
    """Before the trainer exists the signal is noted too (it used to be lost until set-up, and the job ran into its limit)."""
    import torch

    from experiments.lm import cli as lm
    from experiments.lm import data as lm_data

    load = lm_data.load

    def load_after_the_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGUSR1)  # as Slurm's --signal, while the data loads
        return load(*args, **kwargs)

    monkeypatch.setattr(lm_data, "load", load_after_the_signal)
    with pytest.raises(SystemExit) as exit:
        lm.main([*LM_SHORT, "--data", "corpus.txt", "--max-steps", "8", "--batch-size", "4", "--output", "cut"])
    assert exit.value.code == 75
    checkpoint = torch.load(in_process / "cut" / "model" / "requeue.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 1


@pytest.mark.slow
def test_resuming_from_the_first_batch_would_be_caught(in_process, monkeypatch):
    """The control for the test above: restart the order at step 0 on resume, and the weights differ."""
    import torch

    from experiments.lm import cli as lm
    from experiments.lm import sampler

    argv = [*LM_SHORT, "--data", "corpus.txt", "--max-steps", "4", "--batch-size", "4", "--seed", "3"]
    lm.main([*argv, "--output", "whole"])
    with pytest.raises(SystemExit):
        lm.main([*argv, "--output", "cut"], callbacks=[signal_at(2)])
    original = sampler.StepBatchSampler.batch
    monkeypatch.setattr(sampler.StepBatchSampler, "batch", lambda self, step: original(self, step - self.start_step))
    lm.main([*argv, "--output", "cut"])
    whole, resumed = model_weights(in_process / "whole"), model_weights(in_process / "cut")
    assert not all(torch.equal(whole[name], resumed[name]) for name in whole)


def test_validation_reads_a_fixed_sample_spread_over_the_split():
    """A pass over the whole held-out split of a 2 GB corpus outlasted the training it checks (found
    at 2 GB on the testbed); --val-rows rows spread over every shard's part are read instead."""
    require_training()
    from experiments.lm import cli
    from experiments.lm.datamodule import evenly_spaced

    rows = list(range(10))
    assert list(evenly_spaced(rows, 4)) == [0, 2, 5, 7]
    assert evenly_spaced(rows, 0) is rows and evenly_spaced(rows, 10) is rows and evenly_spaced(rows, 99) is rows
    assert cli.build_parser().parse_args(["--output", "o"]).val_rows == cli.VAL_ROWS
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--output", "o", "--val-rows", "-1"])
