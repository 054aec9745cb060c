"""The LM's prepared corpus (experiments/lm/sources.py, tokenizer.py, shards.py, prepare.py): sources read in
parts, the per-document split, shards written, kept and refused, and rows read back through memory maps.

Corpora come from benchmarks/make_corpus.py (a few hundred documents: well under a second each) or literals.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import random
import re
from pathlib import Path

import pytest
from support import ROOT, require_training, script_module
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)

DOCUMENTS = 600


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    """One stream of make_corpus documents as .jsonl, .txt, a folder of three .jsonl files, and .parquet (row groups of 50)."""
    require_training()
    base = tmp_path_factory.mktemp("corpora")
    with script_module(ROOT / "benchmarks/make_corpus.py", "make_corpus") as make_corpus:
        for out, shards in (("c.jsonl", 1), ("c.txt", 1), ("folder/c.jsonl", 3)):
            (base / out).parent.mkdir(exist_ok=True)
            make_corpus.generate(base / out, out.rsplit(".", 1)[1], seed=5, documents=DOCUMENTS, max_bytes=None, shards=shards)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts(base / "c.jsonl")}), base / "c.parquet", row_group_size=50)
    return {"jsonl": base / "c.jsonl", "txt": base / "c.txt", "folder": base / "folder", "parquet": base / "c.parquet"}


def texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def prepare(source: Path | str, out: Path, shards: int = 1, **kwargs):
    from experiments.lm.prepare import prepare_all

    return prepare_all(str(source), out, shards, **kwargs)


# --- sources: parts -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "txt", "folder", "parquet"])
def test_the_parts_of_a_source_are_its_documents_in_order_each_once(corpora, kind):
    from experiments.lm.sources import open_source

    whole = texts(corpora["jsonl"])
    if kind == "folder":  # make_corpus deals documents round-robin: the files hold every third one, read in path order
        whole = [t for k in range(3) for t in whole[k::3]]
    source = open_source(str(corpora[kind]))
    assert list(source.all()) == whole and len(whole) == DOCUMENTS
    inside, starts = 0, _starts(corpora[kind])
    for n in range(1, 8):
        parts = [list(source.documents(i, n)) for i in range(n)]
        assert [t for part in parts for t in part] == whole, n
        assert sum(1 for part in parts if part) >= min(n, 2)  # the parts share the work: not all in one
        inside += sum(1 for lo, _ in source.parts(n)[1:] if lo not in starts)
    if kind in ("jsonl", "txt"):
        assert inside > 10  # most cuts fall inside a document, which stays whole in the part it starts in


def _starts(path: Path) -> set[int]:
    """Byte offsets where a line, or a .txt document, starts."""
    if path.suffix not in (".jsonl", ".txt"):
        return set()
    data = path.read_bytes()
    sep = b"\n" if path.suffix == ".jsonl" else b"\n\n"
    starts, i = {0}, data.find(sep)
    while i != -1:  # every match, overlapping ones included (a run of blank lines)
        starts.add(i + len(sep))
        i = data.find(sep, i + 1)
    return starts


def test_txt_documents_are_split_at_blank_lines_wherever_the_reads_and_parts_cut(tmp_path, monkeypatch):
    """Runs of blank lines, newlines at either end, reads of 1 to 5 bytes: every part boundary, every read boundary."""
    require_training()
    from experiments.lm import sources

    rng = random.Random(3)
    for trial in range(150):
        docs = [re.sub("\n+", "\n", "".join(rng.choice("ab é\n") for _ in range(rng.randint(1, 9)))).strip("\n") for _ in range(6)]
        docs = [d for d in docs if d]
        text = "\n" * rng.randint(0, 3) + "".join(d + "\n" * rng.randint(2, 4) for d in docs)
        text = text.rstrip("\n") + "\n" * rng.randint(0, 1)
        (tmp_path / "t.txt").write_text(text)
        monkeypatch.setattr(sources, "BLOCK", rng.choice([1, 2, 3, 5, 1 << 20]))
        source = sources.open_source(str(tmp_path / "t.txt"))
        for n in (1, 2, 3, 5, 8):
            assert [t for i in range(n) for t in source.documents(i, n)] == docs, (trial, text, n)
    (tmp_path / "one.txt").write_text("a single document\nof two lines\n")
    assert list(sources.open_source(str(tmp_path / "one.txt")).all()) == ["a single document\nof two lines"]


# --- the split ---------------------------------------------------------------------------------


def test_the_split_is_per_document_by_its_text(corpora, tmp_path):
    from experiments.lm.sources import VAL_FRACTION, split_of

    docs = texts(corpora["jsonl"])
    val = [t for t in docs if split_of(t) == "val"]
    assert 0.5 * VAL_FRACTION * len(docs) < len(val) < 1.5 * VAL_FRACTION * len(docs)
    assert [split_of(t) for t in docs] == [split_of(t) for t in docs]  # a pure function of the text
    # Identical documents land together, wherever they are; one character more may not.
    (tmp_path / "twice.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in [val[0], *docs[:30], val[0], docs[0]]))
    corpus = prepare(tmp_path / "twice.jsonl", tmp_path / "out", 2, kind="bytes")
    assert corpus.documents("val") == 2 + sum(split_of(t) == "val" for t in docs[:30]) + (split_of(docs[0]) == "val")
    assert {split_of(t + "!") for t in val} == {"train", "val"}


def test_shards_hold_the_same_tokens_however_many(corpora, tmp_path):
    """1 and 3 shards of a source: the same documents and tokens per split, in part order; no validation text in training."""
    pytest.importorskip("tokenizers")
    import numpy as np

    from experiments.lm import tokenizer as tokenizers
    from experiments.lm.sources import split_of

    one, three = (prepare(corpora["jsonl"], tmp_path / f"n{n}", n, workers=2) for n in (1, 3))
    assert one.tokenizer.sha256 == three.tokenizer.sha256 and one.tokenizer.name == "bpe-512"
    for split in ("train", "val"):
        assert np.array_equal(one.stream(split), three.stream(split))
        assert one.documents(split) == three.documents(split) == sum(split_of(t) == split for t in texts(corpora["jsonl"]))
    # The index marks document ends: document k of the validation stream decodes to the k-th validation text.
    bpe = tokenizers.load(tmp_path / "n3")
    folder, meta = three.shards[2]
    ends = np.load(meta.idx(folder, "val"))
    tokens = np.fromfile(meta.bin(folder, "val"), dtype=meta.dtype)
    val = [t for t in texts(corpora["jsonl"]) if split_of(t) == "val"]
    mine = val[-len(ends) :]
    assert ends[-1] == len(tokens) and [bpe.decode(d.tolist()) for d in np.split(tokens, ends[:-1])] == [t + "\n\n" for t in mine]
    train_text = bpe.decode(one.stream("train").tolist())
    assert not any(t in train_text for t in val)
    # The fingerprint is of the token files' content: the same folder prepared elsewhere has the same.
    assert prepare(corpora["jsonl"], tmp_path / "again", 3).fingerprint == three.fingerprint != one.fingerprint


# --- token files -------------------------------------------------------------------------------


def test_token_types_fit_the_vocabulary_or_are_refused(corpora, tmp_path):
    pytest.importorskip("tokenizers")
    import numpy as np

    from experiments.lm import shards, sources, tokenizer
    from experiments.lm.sources import DataError

    corpus = prepare(corpora["jsonl"], tmp_path / "bpe")
    folder, meta = corpus.shards[0]
    assert meta.dtype == "uint16" and meta.bin(folder, "train").stat().st_size == 2 * meta.splits["train"].tokens
    # A vocabulary past 65,536 (faked: the bytes tokeniser, said to be larger) does not fit uint16.
    big = tmp_path / "big"
    big.mkdir()
    fields = json.loads((tmp_path / "bpe" / tokenizer.META).read_text())
    fields |= {"kind": "bytes", "name": "bytes", "vocab_size": 70_000, "sha256": tokenizer._BYTES_SHA}
    (big / tokenizer.META).write_text(json.dumps(fields))
    source = sources.open_source(str(corpora["jsonl"]))
    with pytest.raises(DataError, match=r"--dtype uint16: a vocabulary of 70000 tokens does not fit in uint16; give uint32 or auto"):
        shards.write(source, big, 0, 1, big, "uint16")
    assert not list(big.glob("*shard*"))  # refused before any work
    written, kept = shards.write(source, big, 0, 1, big)  # auto: uint32
    assert written.dtype == "uint32" and not kept
    rows = shards.TokenCorpus.open(big).rows("val", 15)
    expected = b"".join(t.encode() + b"\n\n" for t in texts(corpora["jsonl"]) if sources.split_of(t) == "val")
    assert bytes(rows[3].tolist()) == expected[48:64]
    assert np.fromfile(written.bin(big, "val"), dtype=np.uint32).tobytes() == np.frombuffer(expected, np.uint8).astype(np.uint32).tobytes()


def test_a_rerun_keeps_finished_shards_and_redoes_a_damaged_one(corpora, tmp_path):
    import numpy as np

    from experiments.lm.shards import TokenCorpus
    from experiments.lm.sources import DataError

    out = tmp_path / "out"
    first = prepare(corpora["txt"], out, 3, kind="bytes")
    stream = first.stream("train")
    files = sorted(p for p in out.iterdir() if p.name.startswith("shard-"))
    assert len(files) == 3 * 5
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    prepare(corpora["txt"], out, 3, kind="bytes")
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files} == before
    damaged = out / "shard-00001-of-00003.train.bin"
    with open(damaged, "r+b") as f:
        f.truncate(damaged.stat().st_size - 10)
    with pytest.raises(DataError, match=r"shard-00001-of-00003\.train\.bin: \d+ bytes, its meta says \d+ tokens .* cut short or damaged"):
        TokenCorpus.open(out)
    again = prepare(corpora["txt"], out, 3, kind="bytes")
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    redone = {name for name in before if after[name] != before[name]}
    assert redone == {f"shard-00001-of-00003.{end}" for end in ("json", "train.bin", "train.idx.npy", "val.bin", "val.idx.npy")}
    assert np.array_equal(again.stream("train"), stream)
    # Another shard count in the same folder replaces the set.
    prepare(corpora["txt"], out, 2, kind="bytes")
    assert sorted({p.name.split(".")[0] for p in out.glob("shard-*")}) == ["shard-00000-of-00002", "shard-00001-of-00002"]


# --- bad input ---------------------------------------------------------------------------------


def test_missing_and_foreign_shards_are_named(corpora, tmp_path):
    from experiments.lm.shards import TokenCorpus
    from experiments.lm.sources import DataError

    out = tmp_path / "out"
    prepare(corpora["jsonl"], out, 5, kind="bytes")
    for index in (1, 2, 4):
        (out / f"shard-0000{index}-of-00005.json").unlink()
    command = rf"run python -m experiments\.lm\.prepare shard --data {corpora['jsonl']} --tokenizer {out}"
    with pytest.raises(DataError, match=rf"shards 1-2, 4 of 5 are missing; {command} --index I --of 5 --out {out} for each"):
        TokenCorpus.open(out)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "tokenizer-meta.json").write_text((out / "tokenizer-meta.json").read_text())
    with pytest.raises(DataError, match=r"no shard-\*-of-\*\.json; run python -m experiments\.lm\.prepare shard"):
        TokenCorpus.open(tmp_path / "empty")
    with pytest.raises(DataError, match=r"no tokenizer-meta\.json; run python -m experiments\.lm\.prepare tokenizer"):
        TokenCorpus.open(tmp_path)
    # A shard made with another tokeniser (here, its hash edited) is not mixed in.
    meta = json.loads((out / "shard-00000-of-00005.json").read_text())
    (out / "shard-00000-of-00005.json").write_text(json.dumps({**meta, "tokenizer_sha256": "0" * 64}))
    prepare(corpora["jsonl"], out, 5, kind="bytes")  # redoes it, and the missing ones
    assert TokenCorpus.open(out).documents("train") + TokenCorpus.open(out).documents("val") == DOCUMENTS
    (out / "shard-00003-of-00005.json").write_text(json.dumps({**meta, "index": 3, "tokenizer_sha256": "0" * 64}))
    with pytest.raises(DataError, match=r"shards 3 of 5 were made with another tokeniser"):
        TokenCorpus.open(out)


def test_text_that_is_not_utf8_or_not_text_is_refused_with_where(tmp_path):
    require_training()
    from experiments.lm.sources import DataError, open_source

    lines = [json.dumps({"text": f"document {i}"}) for i in range(200)]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(("\n".join(lines[:150]) + "\n").encode() + b'{"text": "caf\xe9"}\n' + ("\n".join(lines[150:]) + "\n").encode())
    offset = bad.read_bytes().index(b"\xe9")
    source = open_source(str(bad))
    with pytest.raises(DataError, match=rf"bad\.jsonl:151: invalid UTF-8 at byte {offset}; the LM reads UTF-8 text"):
        [t for i in range(4) for t in source.documents(i, 4)]  # found by the part that holds it, with the right line
    (tmp_path / "junk.jsonl").write_text("\n".join(lines[:90]) + "\n{not json\n" + "\n".join(lines[90:]) + "\n")
    with pytest.raises(DataError, match=r"junk\.jsonl:91: not JSON \(Expecting property name"):
        list(open_source(str(tmp_path / "junk.jsonl")).documents(1, 3))
    (tmp_path / "half.jsonl").write_text('{"text": "a \\ud800 alone"}\n')
    with pytest.raises(DataError, match=r"half\.jsonl:1: the text holds a lone surrogate"):
        list(open_source(str(tmp_path / "half.jsonl")).all())
    text = b"first document\n\nsecond \xff\xfe document\n\nthird\n"
    (tmp_path / "bad.txt").write_bytes(text)
    with pytest.raises(DataError, match=rf"bad\.txt:3: invalid UTF-8 at byte {text.index(0xFF)}"):
        list(open_source(str(tmp_path / "bad.txt")).all())
    junk = random.Random(0).randbytes(5000)
    (tmp_path / "junk.txt").write_bytes(junk)
    with pytest.raises(DataError, match=r"junk\.txt:\d+: (invalid UTF-8|a NUL byte) at byte \d+"):
        list(open_source(str(tmp_path / "junk.txt")).all())
    (tmp_path / "zeros.txt").write_bytes(b"text, then\0\0\0\0")
    with pytest.raises(DataError, match=r"zeros\.txt:1: a NUL byte at byte 10: binary data, not text"):
        list(open_source(str(tmp_path / "zeros.txt")).all())
    (tmp_path / "junk.parquet").write_bytes(junk)
    with pytest.raises(DataError, match=r"junk\.parquet: not a parquet file \("):
        open_source(str(tmp_path / "junk.parquet"))


def test_an_empty_source_is_refused(tmp_path):
    require_training()
    from experiments.lm.sources import DataError

    (tmp_path / "empty.txt").write_text("\n\n\n")
    with pytest.raises(DataError, match=r"0 training and 0 validation documents; both splits need at least one"):
        prepare(tmp_path / "empty.txt", tmp_path / "bytes", kind="bytes")
    if importlib.util.find_spec("tokenizers"):
        with pytest.raises(DataError, match=r"empty\.txt: the tokeniser's sample holds no training document"):
            prepare(tmp_path / "empty.txt", tmp_path / "bpe", kind="bpe")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match=r"no \.txt, \.jsonl, \.parquet files in the folder"):
        prepare(tmp_path / "folder", tmp_path / "out")


# --- the tokeniser's sample --------------------------------------------------------------------


def test_a_large_source_trains_the_tokeniser_on_a_seeded_sample_of_training_documents(corpora, tmp_path, monkeypatch):
    pytest.importorskip("tokenizers")
    from experiments.lm import sources, tokenizer

    seen: list[list[str]] = []
    train = tokenizer._train_bpe

    def spy(texts, vocab_size):
        texts = list(texts)
        seen.append(texts)
        return train(iter(texts), vocab_size)

    monkeypatch.setattr(tokenizer, "_train_bpe", spy)
    source = sources.open_source(str(corpora["jsonl"]))
    limit = source.size_bytes // 10
    meta = tokenizer.train(source, tmp_path / "a", "bpe", sample_bytes=limit)
    again = tokenizer.train(source, tmp_path / "b", "bpe", sample_bytes=limit)
    assert meta.sha256 == again.sha256 and seen[0] == seen[1]  # seeded: the same sample, the same merges
    sample = seen[0]
    assert all(sources.split_of(t) == "train" for t in sample)
    assert meta.sample_documents == len(sample) and limit <= meta.sample_bytes < 1.5 * limit
    assert len(sample) < 0.5 * DOCUMENTS
    whole = texts(corpora["jsonl"])
    assert sample != whole[: len(sample)]  # parts drawn from over the source, not its start
    tokenizer.train(source, tmp_path / "a", "bpe", sample_bytes=limit)
    assert len(seen) == 2  # kept: the same settings
    small = tokenizer.train(source, tmp_path / "c", "bpe")  # the source is under the default sample: all its training documents
    assert seen[2] == [t for t in whole if sources.split_of(t) == "train"] and small.sample_documents == len(seen[2])


# --- rows --------------------------------------------------------------------------------------


def test_rows_are_windows_of_each_shard_read_lazily(corpora, tmp_path):
    import numpy as np
    import torch

    corpus = prepare(corpora["jsonl"], tmp_path / "out", 3, kind="bytes")
    seq_len = 63
    rows = corpus.rows("train", seq_len)
    per_shard = [np.fromfile(meta.bin(folder, "train"), dtype=meta.dtype).astype(np.int64) for folder, meta in corpus.shards]
    assert len(rows) == sum(len(s) // 64 for s in per_shard) and rows.tokens == 64 * len(rows)
    expected = [s[k * 64 : (k + 1) * 64] for s in per_shard for k in range(len(s) // 64)]  # no row across a shard's end
    assert not rows._maps  # nothing opened yet
    last = rows[len(rows) - 1]
    assert len(rows._maps) == 1 and last.dtype == torch.int64 and np.array_equal(last.numpy(), expected[-1])
    for j in random.Random(1).sample(range(len(rows)), 50):
        assert np.array_equal(rows[j].numpy(), expected[j]), j
    with pytest.raises(IndexError):
        rows[len(rows)]
    # As a DataLoader worker gets it: pickled with no open maps, and it opens its own.
    copy = pickle.loads(pickle.dumps(rows))
    assert not copy._maps and np.array_equal(copy[5].numpy(), expected[5])
    loader = torch.utils.data.DataLoader(rows, batch_size=4, num_workers=1)
    assert np.array_equal(next(iter(loader)).numpy(), np.stack(expected[:4]))


def test_training_reads_a_prepared_folder_and_its_tokeniser(corpora, tmp_path):
    pytest.importorskip("tokenizers")
    from experiments.lm import data as lm_data

    prepare(corpora["jsonl"], tmp_path / "corpus", 2)
    data = lm_data.load(str(tmp_path / "corpus"), 32, "auto", tmp_path / "run" / "tokenizer")
    assert data.tokenizer == "bpe-512" and data.vocab_size == 512 and len(data.train) > 4 * len(data.val) > 0
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_bytes() == (tmp_path / "corpus" / "tokenizer.json").read_bytes()
    assert data.fingerprint != lm_data.load(str(tmp_path / "corpus"), 16).fingerprint  # the rows differ
    with pytest.raises(lm_data.DataError, match=r"was prepared with the bpe-512 tokeniser, not bytes; give --tokenizer auto"):
        lm_data.load(str(tmp_path / "corpus"), 32, "bytes")
    lm_data.check_source(str(tmp_path / "corpus"))  # a prepared folder is a valid --data


def test_the_prepare_command_prints_a_summary_and_reports_bad_input(corpora, tmp_path, capsys):
    from experiments.lm import prepare

    out = tmp_path / "out"
    assert prepare.main(["tokenizer", "--data", str(corpora["txt"]), "--out", str(out), "--tokenizer", "bytes"]) == 0
    assert json.loads(capsys.readouterr().out)["tokenizer"] == "bytes"
    for index in (1, 0):
        argv = ["--data", str(corpora["txt"]), "--tokenizer", str(out), "--index", str(index), "--of", "2", "--out", str(out / f"s{index}")]
        assert prepare.main(["shard", *argv]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["shard"] == index and summary["kept"] is False and summary["train_tokens"] > 0 and summary["mb_per_s"] > 0
    from experiments.lm.shards import TokenCorpus

    assert TokenCorpus.open(out).documents("train") + TokenCorpus.open(out).documents("val") == DOCUMENTS  # each shard in its folder
    with pytest.raises(SystemExit) as exit:
        prepare.main(["shard", "--data", str(corpora["txt"]), "--tokenizer", str(out), "--index", "2", "--of", "2", "--out", str(out)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("error: --index 2 --of 2: the index must be in 0..1")
    with pytest.raises(SystemExit):
        prepare.main(["all", "--data", str(tmp_path / "nope.txt"), "--out", str(out)])
    assert "--data " + str(tmp_path / "nope.txt") + ": no such file or folder; give pydoc-topics" in capsys.readouterr().err


def test_the_pipeline_layout_export_then_a_tokeniser_folder_beside_shard_folders(corpora, tmp_path, capsys):
    """What dvc.yaml's lm-corpus, lm-tokenizer and lm-shard stages run: the source exported as
    .jsonl (the same documents), the tokeniser in tokens/tokenizer/, each shard in its own folder;
    training reads tokens/ and finds the tokeniser there."""
    from experiments.lm import data as lm_data
    from experiments.lm import prepare, sources

    corpus = tmp_path / "data/lm/corpus.jsonl"
    assert prepare.main(["export", "--data", str(corpora["txt"]), "--out", str(corpus)]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == DOCUMENTS
    assert list(sources.open_source(str(corpus)).all()) == list(sources.open_source(str(corpora["txt"])).all())
    tokens = tmp_path / "data/lm/tokens"
    assert prepare.main(["tokenizer", "--data", str(corpus), "--out", str(tokens / "tokenizer"), "--tokenizer", "bytes"]) == 0
    for index in (0, 1):
        argv = ["--data", str(corpus), "--tokenizer", str(tokens / "tokenizer"), "--index", str(index), "--of", "2"]
        assert prepare.main(["shard", *argv, "--out", str(tokens / f"shard-{index}")]) == 0
    capsys.readouterr()
    data = lm_data.load(str(tokens), 32)
    assert data.tokenizer == "bytes" and len(data.train) > 0 and len(data.val) > 0
    # A folder left by an earlier cut into three shards.
    argv = ["--data", str(corpus), "--tokenizer", str(tokens / "tokenizer"), "--index", "2", "--of", "3"]
    assert prepare.main(["shard", *argv, "--out", str(tokens / "shard-2")]) == 0
    with pytest.raises(lm_data.DataError, match=r"shards of 2 and 3 cuts of the source together \(2 shards in .*shard-0.*; 3 shards in"):
        lm_data.load(str(tokens), 32)
    with pytest.raises(SystemExit):
        prepare.main(["export", "--data", str(corpora["txt"]), "--out", str(tmp_path / "corpus.txt")])
    assert "export writes .jsonl; give a path ending in .jsonl" in capsys.readouterr().err
