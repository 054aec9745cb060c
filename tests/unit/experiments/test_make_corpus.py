"""benchmarks/make_corpus.py: issue 14's synthetic corpora, on samples of a few MB at most.

The generator runs in this process (its ``main``), so numpy and the chain load once; one
test runs it as a command, for the exit status and the message a user sees.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from support import ROOT, script_module

SCRIPT = ROOT / "benchmarks/make_corpus.py"


@pytest.fixture(scope="module")
def corpus():
    with script_module(SCRIPT, "make_corpus") as module:
        yield module


@pytest.fixture
def make(corpus, capsys):
    """Run the generator with these arguments; its summary."""

    def run(*args) -> dict:
        assert corpus.main([str(arg) for arg in args]) == 0
        return json.loads(capsys.readouterr().out)

    return run


def texts(path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def triples_of(words: list[str]) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + 3]) for i in range(len(words) - 2)]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_arguments_write_the_same_bytes_and_another_seed_other_bytes(make, tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        make("--out", tmp_path / f"{name}.jsonl", "--documents", 300, "--seed", seed)
    assert digest(tmp_path / "a.jsonl") == digest(tmp_path / "b.jsonl")
    assert digest(tmp_path / "a.jsonl") != digest(tmp_path / "c.jsonl")
    assert not set(texts(tmp_path / "a.jsonl")) & set(texts(tmp_path / "c.jsonl"))


def test_exactly_the_documents_asked_for_a_prefix_of_any_longer_run(make, tmp_path):
    summary = make("--out", tmp_path / "short.jsonl", "--documents", 700)
    make("--out", tmp_path / "long.jsonl", "--documents", 1500)
    short, long = texts(tmp_path / "short.jsonl"), texts(tmp_path / "long.jsonl")
    assert len(short) == 700 and len(long) == 1500
    assert short == long[:700]  # across a batch boundary (1,024 documents)
    assert summary["documents"] == 700
    assert summary["bytes"] == (tmp_path / "short.jsonl").stat().st_size
    assert summary["files"] == [str(tmp_path / "short.jsonl")] and summary["seconds"] > 0 and summary["mb_per_s"] > 0


@pytest.mark.parametrize("limit, size", [("100K", 100 * 1024), ("1234567", 1234567)])
def test_the_byte_limit_stops_before_the_document_that_would_cross_it(make, tmp_path, limit, size):
    make("--out", tmp_path / "all.jsonl", "--documents", 1000)
    summary = make("--out", tmp_path / "cut.jsonl", "--bytes", limit, "--documents", 1000)
    lines = (tmp_path / "all.jsonl").read_bytes().splitlines(keepends=True)
    cut = (tmp_path / "cut.jsonl").read_bytes()
    kept = summary["documents"]
    assert 0 < kept < 1000 and cut == b"".join(lines[:kept])
    assert len(cut) <= size < len(cut) + len(lines[kept])
    assert summary["bytes"] == len(cut)


def test_a_byte_limit_at_the_end_of_a_document_keeps_that_document(make, tmp_path):
    make("--out", tmp_path / "all.jsonl", "--documents", 20)
    size = len(b"".join((tmp_path / "all.jsonl").read_bytes().splitlines(keepends=True)[:7]))
    assert make("--out", tmp_path / "cut.jsonl", "--bytes", size)["documents"] == 7
    assert make("--out", tmp_path / "less.jsonl", "--bytes", size - 1)["documents"] == 6


def test_whichever_limit_comes_first(make, tmp_path):
    assert make("--out", tmp_path / "a.jsonl", "--documents", 5, "--bytes", "1M")["documents"] == 5
    assert make("--out", tmp_path / "b.jsonl", "--documents", 5, "--bytes", "3K")["documents"] < 5


def test_jsonl_lines_are_text_records_and_txt_holds_the_same_documents_between_blank_lines(make, tmp_path):
    make("--out", tmp_path / "c.jsonl", "--documents", 200)
    make("--out", tmp_path / "c.txt", "--documents", 200)  # the format follows the suffix
    records = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 200 and all(list(r) == ["text"] for r in records)
    docs = [r["text"] for r in records]
    assert all(doc.strip() and doc == doc.strip() and "\n\n" not in doc for doc in docs)
    assert (tmp_path / "c.txt").read_text(encoding="utf-8") == "\n\n".join(docs) + "\n"


def test_the_text_follows_the_help_topics_word_by_word(make, tmp_path):
    """An order-2 chain: every three words in a row were three in a row in the source, but at a walk's start."""
    from pydoc_data.topics import topics

    source = [word for name in sorted(topics) for word in topics[name].split()]
    seen = set(triples_of(source))
    make("--out", tmp_path / "c.jsonl", "--documents", 300)
    triples = [t for doc in texts(tmp_path / "c.jsonl") for t in triples_of(doc.split())]
    assert len(triples) > 50_000
    assert sum(t in seen for t in triples) / len(triples) > 0.99
    assert len(set(triples)) > 0.5 * len(seen)  # walks all over the source, not round one passage


def test_lengths_vary_and_a_few_documents_are_longer_than_a_1024_token_sequence(make, tmp_path):
    make("--out", tmp_path / "c.jsonl", "--documents", 2000)
    sizes = sorted(len(doc.encode()) for doc in texts(tmp_path / "c.jsonl"))
    long = [size for size in sizes if size > 8 * 1024]  # > 1,024 tokens at up to 8 bytes a token
    assert 5 <= len(long) <= 100
    assert sizes[0] < 200 and 500 < sizes[1000] < 3000


@pytest.mark.parametrize("fmt", ["jsonl", "txt"])
def test_shards_deal_the_documents_round_robin(make, tmp_path, fmt):
    whole = make("--out", tmp_path / "one" / f"c.{fmt}", "--bytes", "300K", "--documents", 1500)
    summary = make("--out", tmp_path / "three" / f"c.{fmt}", "--bytes", "300K", "--documents", 1500, "--shards", 3)
    names = [f"c-0000{i}-of-00003.{fmt}" for i in range(3)]
    assert sorted(p.name for p in (tmp_path / "three").iterdir()) == names  # nothing else: no partial files
    assert summary["files"] == [str(tmp_path / "three" / name) for name in names]
    assert summary["documents"] == whole["documents"] and summary["bytes"] <= whole["bytes"]

    def read(path):
        return texts(path) if fmt == "jsonl" else path.read_text(encoding="utf-8").rstrip("\n").split("\n\n")

    shards = [read(tmp_path / "three" / name) for name in names]
    dealt = [shards[i % 3][i // 3] for i in range(sum(map(len, shards)))]
    assert dealt == read(tmp_path / "one" / f"c.{fmt}")


def test_an_interrupted_run_leaves_the_previous_file_and_no_partial_one(corpus, tmp_path, monkeypatch):
    out = tmp_path / "c.jsonl"
    out.write_text("before\n")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus.Layout, "__call__", interrupted)
    with pytest.raises(KeyboardInterrupt):
        corpus.main(["--out", str(out), "--documents", "2000"])
    assert out.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["c.jsonl"]


@pytest.mark.parametrize(
    "text, size",
    [("123", 123), ("10M", 10 << 20), ("500M", 500 << 20), ("2G", 2 << 30), ("2g", 2 << 30), ("1.5K", 1536)],
)
def test_sizes(corpus, text, size):
    assert corpus.parse_size(text) == size


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give --documents N, --bytes SIZE or both"),
        (["--documents", "0"], "argument --documents: '0': must be at least 1"),
        (["--documents", "many"], "argument --documents: 'many' is not a whole number"),
        (["--bytes", "2X"], "argument --bytes: '2X' is not a size"),
        (["--bytes", "0"], "argument --bytes: '0': the size must be at least 1 byte"),
        (["--documents", "3", "--shards", "0"], "argument --shards: '0': must be at least 1"),
        (["--documents", "3", "--seed", "-1"], "seeds are 0 or more"),
        (["--documents", "3", "--format", "txt"], "ends in .jsonl but --format is txt"),
        (["--documents", "3", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
    ],
)
def test_bad_arguments_exit_2_with_one_message(corpus, capsys, tmp_path, args, message):
    with pytest.raises(SystemExit) as exit:
        corpus.main(["--out", str(tmp_path / "c.jsonl"), *args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("error:") == 1
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_is_a_folder_or_unwritable_exits_2(corpus, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit:
        corpus.main(["--out", str(tmp_path), "--documents", "3"])
    assert exit.value.code == 2 and "is a folder; give a file name" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert corpus.main(["--out", str(tmp_path / "file" / "c.jsonl"), "--documents", "3"]) == 2
    assert f"cannot write {tmp_path / 'file' / 'c.jsonl'}" in capsys.readouterr().err


def test_the_command_prints_one_summary_line_or_one_error_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "c.txt"), "--documents", "20"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["documents"] == 20 and len(done.stdout.splitlines()) == 1
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "d.txt")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert "error: give --documents N, --bytes SIZE or both" in done.stderr and "Traceback" not in done.stderr
