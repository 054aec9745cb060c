"""Item file names: one per exact item name, never shared, within the file system's limit."""

from __future__ import annotations

import yaml
from support import ACCOUNT, invoke, make_project

from orchestrator.jobs import ledger
from orchestrator.scripts.plan import safe_name


def test_a_safe_short_name_is_its_own():
    assert safe_name("train@lumi-2x8_bf16") == "train@lumi-2x8_bf16"


def test_names_that_differ_only_in_replaced_characters_get_different_file_names():
    names = ["s@a b", "s@a_b", "s@a;b", "s@a/b", "s@é", "s@ü", "s@日"]
    files = [safe_name(n) for n in names]
    assert len(set(files)) == len(names)
    assert files[1] == "s@a_b" and files[0].startswith("s@a_b+") and files[2].startswith("s@a_b+")
    assert all(set(f) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-+") for f in files)


def test_long_names_fit_a_file_name_in_bytes():
    for name in ["s@" + "x" * 300, "s@" + "é" * 100, "s@" + "日本" * 200]:
        file = safe_name(name)
        # room left for ".json.damaged-<time>-<pid>", ".<name>.<random>.tmp", "-<job id>.log"
        assert len(file.encode()) <= 160 and len(f".{file}.json.damaged-20261125T120000-4194304.abcdefgh.tmp".encode()) <= 255
    assert safe_name("s@" + "x" * 300) != safe_name("s@" + "x" * 299)


ONE_STAGE = """\
stages:
  s:
    matrix:
      v: ${values}
    cmd: orchestrator run -- python -c "print()"
    outs:
      - out/${item.v}:
          persist: true
"""


def test_render_writes_one_script_per_item_for_names_that_look_alike(tmp_path):
    params = {"orchestrator": {"cluster": "local", "account": ACCOUNT, "image": "none"}, "values": ["a b", "a_b", "a;b", "x" * 300]}
    project = make_project(tmp_path / "p", dvc_yaml=ONE_STAGE, params_yaml=yaml.safe_dump(params))
    done = invoke("render", "--project", str(project))
    assert done.exit_code == 0, done.output
    scripts = sorted((project / ".orchestrator/scripts/local").iterdir())
    assert len(scripts) == 4 and "s@a_b.sh" in [p.name for p in scripts]
    texts = [p.read_text() for p in scripts]
    assert sum("ORCH_ITEM='s@a b'" in t or "s@a b" in t for t in texts) >= 1


def test_a_ledger_file_of_an_earlier_version_is_taken_over_by_its_item(tmp_path):
    """Earlier versions named `a b`'s ledger a_b.json: its records must not be lost (a
    running job would be submitted twice), nor given to the item really called a_b."""
    book = ledger.Ledger(tmp_path)
    old = tmp_path / ledger.LEDGER_DIR / "s@a_b.json"
    old.parent.mkdir(parents=True)
    rec = ledger.Record(item="s@a b", fingerprint="f", backend="slurm", job_id="7", profile="testbed", script="x", submitted_at=1.0)
    ledger._write(old, [rec], None)
    assert [r.job_id for r in book.records("s@a b")] == ["7"]  # taken over by its item
    assert not old.exists() and (tmp_path / ledger.LEDGER_DIR / f"{safe_name('s@a b')}.json").is_file()
    # Met first by the item really called a_b, the file is not taken for its own: set aside as damaged
    ledger._write(old, [rec], None)
    lines = []
    assert ledger.Ledger(tmp_path, say=lines.append).records("s@a_b") == []
    assert "holds the records of item 's@a b'" in lines[0] and list(old.parent.glob("s@a_b.json.damaged-*"))
