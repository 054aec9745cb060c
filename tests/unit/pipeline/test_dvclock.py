"""DVC's rwlock file cut short by a killed process (CI: a submit SIGKILLed mid-write left it
empty, and the next submit stopped with "JSON structure is corrupted"): mended, never lost."""

from __future__ import annotations

import json
import subprocess

from support import dvc_init

from orchestrator.pipeline import dvclock


def test_a_cut_short_lock_file_is_reset_and_dvc_reads_it_again(tmp_path):
    dvc_init(tmp_path, scm=False)
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo hi\n")
    lock = tmp_path / ".dvc/tmp/rwlock"
    assert dvclock.mend(tmp_path) is False  # no file: nothing to do
    lock.parent.mkdir(parents=True, exist_ok=True)
    whole = {"read": {}, "write": {"/x": {"pid": 1, "cmd": "dvc repro"}}}
    lock.write_text(json.dumps(whole))
    assert dvclock.mend(tmp_path) is False and json.loads(lock.read_text()) == whole  # a readable lock is left alone
    lock.write_text('{"read": {"/x": [{"pid"')  # cut short
    broken = subprocess.run(["dvc", "status"], cwd=tmp_path, capture_output=True, text=True)
    assert broken.returncode != 0 and "RWLock" in broken.stderr + broken.stdout
    assert dvclock.mend(tmp_path) is True and json.loads(lock.read_text()) == {}
    assert subprocess.run(["dvc", "status"], cwd=tmp_path, capture_output=True, text=True).returncode == 0
