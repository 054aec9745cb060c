"""The files DVC rewrites in place, cut short by a killed process (CI: a submit SIGKILLed
mid-write left .dvc/tmp/rwlock empty; a `dvc repro` killed while DVC dumped dvc.lock left it
"validation failed"): found, named with the one command that mends them, and mended from a
copy DVC cannot cut; a cut-short file is moved aside, never deleted."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from support import dvc_init

from orchestrator.errors import PipelineError
from orchestrator.pipeline import dvcfiles
from orchestrator.util.runner import SubprocessRunner

EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"
STAGE = {"cmd": "python3 -c \"open('x', 'w')\"", "outs": [{"path": "x", "hash": "md5", "md5": EMPTY_MD5, "size": 0}]}


def lock_text(*names: str) -> str:
    """A dvc.lock as DVC dumps it (ruamel, block style), one stage per name."""
    from dvc.utils.serialize import dumps_yaml

    return dumps_yaml({"schema": "2.0", "stages": {name: STAGE for name in names}})


def cut_mid_key(text: str, stage: str) -> str:
    """``text`` cut inside the key of ``stage``, where DVC cannot read it."""
    cut = text[: text.index(f"  {stage}:") + 3]
    assert dvcfiles.lock_problem(cut) is not None
    return cut


def project(tmp_path, scm: bool = False):
    if scm:
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc_init(tmp_path, scm=scm)
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo hi\n")
    return tmp_path


@pytest.mark.parametrize("rwlock", dvcfiles.RWLOCKS)
def test_a_cut_short_rwlock_is_reset_and_dvc_reads_it_again(tmp_path, rwlock):
    project(tmp_path)
    said = []
    lock = tmp_path / rwlock
    assert dvcfiles.mend(tmp_path, say=said.append) is False and said == []  # no file: nothing to do
    lock.parent.mkdir(parents=True, exist_ok=True)
    whole = {"read": {}, "write": {"/x": {"pid": 1, "cmd": "dvc repro"}}}
    lock.write_text(json.dumps(whole))
    assert dvcfiles.mend(tmp_path, say=said.append) is False and json.loads(lock.read_text()) == whole  # a readable lock is left alone
    lock.write_text('{"read": {"/x": [{"pid"')  # cut short
    assert dvcfiles.broken(tmp_path) == [f"{lock} is cut short (a DVC process killed while it wrote it): run `orchestrator record`"]
    if rwlock == ".dvc/tmp/rwlock":
        broken = subprocess.run(["dvc", "status"], cwd=tmp_path, capture_output=True, text=True)
        assert broken.returncode != 0 and "RWLock" in broken.stderr + broken.stdout
    assert dvcfiles.mend(tmp_path, say=said.append) is True and json.loads(lock.read_text()) == {}
    assert said == [f"{lock} was cut short by a killed DVC process: reset to an empty lock"]
    assert subprocess.run(["dvc", "status"], cwd=tmp_path, capture_output=True, text=True).returncode == 0


def test_every_cut_of_dvc_lock_dvc_cannot_read_is_named_and_mended_from_the_copy_kept(tmp_path):
    """Every byte offset of a lock DVC was writing: where DVC can still read the cut file it is
    left alone (DVC sees the missing stages as changed); where it cannot, the command says so,
    naming `orchestrator record`, and the mend puts back the copy kept before, with the cut
    file moved aside."""
    project(tmp_path)
    before, after = lock_text("a", "b"), lock_text("a", "b", "c@x-1")
    lock = tmp_path / "dvc.lock"
    lock.write_text(before)
    dvcfiles.keep(tmp_path)
    assert (tmp_path / dvcfiles.KEPT_DIR / "dvc.lock").read_text() == before
    unreadable = 0
    for n in range(len(after)):
        cut = after[:n]
        lock.write_text(cut)
        problem = dvcfiles.lock_problem(cut)
        said: list[str] = []
        if problem is None:
            assert dvcfiles.broken(tmp_path) == [] and dvcfiles.mend(tmp_path, say=said.append) is False and lock.read_text() == cut
            continue
        unreadable += 1
        with pytest.raises(PipelineError) as refused:
            dvcfiles.require_readable(tmp_path)
        assert "run `orchestrator record`" in refused.value.render()
        assert dvcfiles.mend(tmp_path, say=said.append) is True
        assert lock.read_text() == before and "put back the last readable copy" in said[0], said
        (aside,) = (tmp_path / dvcfiles.CUT_DIR).iterdir()
        assert aside.read_text() == cut
        aside.unlink()
    # Both kinds exist, as measured on a real 3-item lock (433 of 1,341 offsets unreadable).
    assert 0 < unreadable < len(after), unreadable
    # Unreadable, but no cut of DVC's (a list, another program's file): DVC's own error names it.
    for foreign in ("[1, 2]\n", "stages:\n  a: [\n"):
        lock.write_text(foreign)
        assert dvcfiles.broken(tmp_path) == [] and dvcfiles.mend(tmp_path, say=said.append) is False and lock.read_text() == foreign


def test_the_copy_is_kept_only_when_whole_as_dvc_writes_it_and_changed(tmp_path):
    project(tmp_path)
    kept = tmp_path / dvcfiles.KEPT_DIR / "dvc.lock"
    dvcfiles.keep(tmp_path)
    assert not kept.exists()  # no lock yet
    (tmp_path / "dvc.lock").write_text(lock_text("a"))
    dvcfiles.keep(tmp_path)
    first = kept.stat().st_mtime_ns
    dvcfiles.keep(tmp_path)
    assert kept.stat().st_mtime_ns == first  # unchanged: not written again
    (tmp_path / "dvc.lock").write_text(cut_mid_key(lock_text("a", "b"), "b"))
    dvcfiles.keep(tmp_path)
    assert kept.read_text() == lock_text("a")  # the copy stays the last readable one
    (tmp_path / "params.yaml").write_text("lr: 3e-4\n")
    dvcfiles.keep(tmp_path)
    assert (tmp_path / dvcfiles.KEPT_DIR / "params.yaml").read_text() == "lr: 3e-4\n"


def test_without_a_kept_copy_git_head_is_put_back_and_without_either_none(tmp_path):
    project(tmp_path, scm=True)
    lock = tmp_path / "dvc.lock"
    lock.write_text(lock_text("a"))
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "lock"], cwd=tmp_path, check=True)
    lock.write_text(cut_mid_key(lock_text("a", "b"), "b"))
    said: list[str] = []
    assert dvcfiles.mend(tmp_path, SubprocessRunner(), said.append) is True
    assert lock.read_text() == lock_text("a") and said[0].endswith("put back the committed copy (git HEAD)")
    subprocess.run(["git", "rm", "-q", "--cached", "dvc.lock"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "no lock"], cwd=tmp_path, check=True)
    lock.write_text("schema: '2.0'\nstages:\n  a:\n    cmd: [")
    assert dvcfiles.mend(tmp_path, SubprocessRunner(), said.append) is True
    assert not lock.exists() and "no readable copy to put back: DVC starts a new one" in said[-1]
    done = subprocess.run(["dvc", "status"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_unreadable_params_file_is_the_users_named_never_replaced(tmp_path):
    project(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text("lr: 3e-4\nitems: [a, b]\n")
    dvcfiles.keep(tmp_path)
    params.write_text("lr: 3e-4\nitems: [a,")  # `dvc exp run -S` killed mid-write, or a typo
    (tmp_path / "dvc.lock").write_text("stages: [")
    with pytest.raises(PipelineError) as refused:
        dvcfiles.mend(tmp_path, say=print)
    text = refused.value.render()
    assert "params.yaml cannot be read as YAML" in text and "not replaced" in text
    assert f"cp {tmp_path / dvcfiles.KEPT_DIR / 'params.yaml'} {params}" in text
    assert params.read_text() == "lr: 3e-4\nitems: [a," and (tmp_path / "dvc.lock").read_text() == "stages: ["  # nothing changed
    assert yaml.safe_load((tmp_path / dvcfiles.KEPT_DIR / "params.yaml").read_text()) == {"lr": "3e-4", "items": ["a", "b"]}
