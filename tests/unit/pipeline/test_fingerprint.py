"""Fingerprints: a job is "the same" exactly when its script and its inputs are.

Against a real DVC project (DVC hashes the source inputs), with the scripts
given by the test, so what changes is always one known thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fakes import FakeStages
from support import make_project

from orchestrator.errors import PipelineError
from orchestrator.pipeline import fingerprint, stages

STAGES = {
    "prep": {"cmd": "orchestrator run -- python prep.py data", "deps": ["prep.py", "raw.txt"], "outs": [{"data": {"persist": True}}]},
    "train": {
        "cmd": "orchestrator run -- python train.py data model",
        "deps": ["train.py", "data"],
        "outs": [{"model": {"persist": True}}],
    },
    "solo": {"cmd": "orchestrator run -- python solo.py", "deps": ["solo.py"], "outs": [{"solo": {"persist": True}}]},
    "plain": {"cmd": "python plain.py", "deps": ["plain.py"], "outs": ["plain-out"]},
}


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    params = {"orchestrator": {"cluster": "local"}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": STAGES}), params_yaml=yaml.safe_dump(params))
    for name in ("prep.py", "train.py", "solo.py", "plain.py", "raw.txt", "README.md"):
        (project / name).write_text(f"{name}\n")
    monkeypatch.chdir(project)  # DVC finds a stage by name from its working directory, as inside `dvc repro`
    return project


def prints(root: Path, scripts: dict[str, str] | None = None) -> dict[str, str]:
    """Every orchestrated item's fingerprint, each item's script being its name unless ``scripts`` says otherwise."""
    from dvc.repo import Repo

    scripts = scripts or {}
    with Repo(str(root)) as repo:
        stage = fingerprint.DvcStages(repo)
        fps = fingerprint.Fingerprinter(root, stage, lambda name: scripts.get(name, f"script of {name}"), fingerprint.producers(root))
        return {name: fps.of(name) for name in ("prep", "train", "solo")}


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


# --- digest ------------------------------------------------------------------------------------


def test_digest_depends_on_script_and_every_input_but_not_their_order():
    base = fingerprint.digest("#!/bin/bash\nrun\n", [("a", "1"), ("b", "2")])
    assert fingerprint.digest("#!/bin/bash\nrun\n", [("b", "2"), ("a", "1")]) == base
    assert fingerprint.digest("#!/bin/bash\nrun --more\n", [("a", "1"), ("b", "2")]) != base
    assert fingerprint.digest("#!/bin/bash\nrun\n", [("a", "1"), ("b", "3")]) != base
    assert fingerprint.digest("#!/bin/bash\nrun\n", [("a", "1"), ("c", "2")]) != base
    assert fingerprint.digest("#!/bin/bash\nrun\n", [("a", "1")]) != base
    assert len(base) == 64 and int(base, 16) >= 0


def test_digest_keeps_path_and_value_apart():
    # A separator between path and value: ("ab", "c") is not ("a", "bc").
    assert fingerprint.digest("s", [("ab", "c")]) != fingerprint.digest("s", [("a", "bc")])


# --- who produces what -------------------------------------------------------------------------


def test_producers_are_the_orchestrated_items_by_output(root):
    assert fingerprint.producers(root) == {"data": "prep", "model": "train", "solo": "solo"}  # not the plain stage's


def test_producers_are_cached_by_the_pipeline_text(root):
    first = fingerprint.producers(root)
    (cache,) = (root / stages.CACHE_DIR).glob("producers-*.json")
    assert json.loads(cache.read_text()) == first
    cache.write_text(json.dumps({"from": "the cache"}))
    assert fingerprint.producers(root) == {"from": "the cache"}  # same dvc.yaml and params.yaml: not resolved again
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestrator": {"cluster": "local"}, "x": 1}))
    assert fingerprint.producers(root) == first  # a changed params.yaml is another key


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("data", ["prep"]),  # the output itself
        ("data/train.csv", ["prep"]),  # a file inside an output folder
        ("results", ["a", "b"]),  # a folder holding outputs
        ("database", []),  # a name that only starts like an output
        ("elsewhere", []),
    ],
)
def test_producers_of(path, expected):
    outputs = {"data": "prep", "results/a": "a", "results/b/metrics.json": "b"}
    assert fingerprint.producers_of(path, outputs) == expected


# --- fingerprints through the pipeline ---------------------------------------------------------


def test_the_same_script_and_inputs_give_the_same_fingerprint(root):
    first = prints(root)
    assert prints(root) == first
    assert len(set(first.values())) == 3  # three different items


def test_a_changed_script_changes_the_item_and_what_depends_on_it(root):
    before = prints(root)
    assert changed(before, prints(root, {"prep": "script of prep, with another --time"})) == {"prep", "train"}
    assert changed(before, prints(root, {"train": "script of train, on 2 nodes"})) == {"train"}


def test_a_changed_source_input_changes_the_item_and_what_depends_on_it(root):
    before = prints(root)
    (root / "raw.txt").write_text("new data\n")
    assert changed(before, prints(root)) == {"prep", "train"}
    (root / "solo.py").write_text("print('changed')\n")
    after = prints(root)
    assert before["solo"] != after["solo"]


def test_an_unrelated_file_changes_nothing(root):
    before = prints(root)
    (root / "README.md").write_text("more words\n")
    (root / "plain.py").write_text("print('plain, changed')\n")  # a stage no item depends on
    assert prints(root) == before


def test_an_upstream_output_counts_by_its_producers_fingerprint_not_its_content(root):
    """`submit` queues train before data exists; `dvc repro` later, with data
    written by prep's job, must compute the same fingerprint to attach."""
    queued = prints(root)
    (root / "data").mkdir()
    (root / "data/rows.csv").write_text("1,2,3\n")
    assert prints(root) == queued
    (root / "data/rows.csv").write_text("4,5,6\n")
    assert prints(root) == queued


def test_a_dependency_cycle_is_an_error_naming_it(tmp_path):
    fps = fingerprint.Fingerprinter(
        tmp_path, FakeStages(tmp_path, {"a": ["b-out"], "b": ["a-out"]}), lambda name: name, {"a-out": "a", "b-out": "b"}
    )
    with pytest.raises(PipelineError, match="dependency cycle through a -> b -> a"):
        fps.of("a")


def test_each_item_is_fingerprinted_once(tmp_path):
    stages = FakeStages(tmp_path, {"a": ["src"], "b": ["a-out"], "c": ["a-out", "b-out"]})
    fps = fingerprint.Fingerprinter(tmp_path, stages, lambda name: name, {"a-out": "a", "b-out": "b", "c-out": "c"})
    c = fps.of("c")
    assert sorted(stages.collected) == ["a", "b", "c"]
    assert fps.of("c") == c and fps.of("a") == fingerprint.digest("a", [("src", "md5:src")])
    assert sorted(stages.collected) == ["a", "b", "c"]
    assert fps.of("b") == fingerprint.digest("b", [("a-out", "item:" + fps.of("a"))])


# --- DVC's stages ------------------------------------------------------------------------------


def test_dvc_stages_are_collect_s_from_one_reading_of_dvc_yaml(root, monkeypatch):
    """An item and its ancestors from one reading of dvc.yaml (each `collect` reads it, its lock and
    params.yaml again), the same stages `collect` finds; a name DVC does not know is DVC's error."""
    import dvc.dvcfile
    from dvc.repo import Repo
    from dvc.stage.exceptions import StageNotFound

    with Repo(str(root)) as repo:
        expected = {name: repo.stage.collect(name)[0] for name in ("prep", "train", "dvc.yaml:solo")}
        reads = []
        load_file = dvc.dvcfile.load_file
        monkeypatch.setattr(dvc.dvcfile, "load_file", lambda *a, **k: reads.append(a[1]) or load_file(*a, **k))
        stage = fingerprint.DvcStages(repo)
        for name, collected in expected.items():
            assert shape(stage(name)) == shape(collected)
        assert stage("train") is stage("train")
        with pytest.raises(StageNotFound):
            stage("nothing")
    # The bare names are the project's dvc.yaml; a path names its file, read once more.
    assert reads == ["dvc.yaml", str(root / "dvc.yaml")]


def shape(stage) -> tuple:
    return stage.addressing, stage.cmd, [d.def_path for d in stage.deps], [o.def_path for o in stage.outs]
