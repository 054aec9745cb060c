"""The ledger: atomic files, and one submission per item under concurrent writers."""

import json
import multiprocessing
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from orchestrator.jobs import ledger
from orchestrator.slurm.states import State


def record(item, job_id, fingerprint="f", state=State.PENDING):
    return ledger.Record(
        item=item,
        fingerprint=fingerprint,
        backend="slurm",
        job_id=job_id,
        profile="testbed",
        script="s.sbatch",
        submitted_at=1.0,
        state=state,
    )


def test_append_update_and_read_back(tmp_path):
    book = ledger.Ledger(tmp_path)
    with book.locked("stage@a") as rec:
        rec.append(record("stage@a", "1"))
        rec.update("1", state=State.COMPLETED, exit_code=0)
    (r,) = book.records("stage@a")
    assert r.state == State.COMPLETED and r.exit_code == 0
    assert {item: h.records for item, h in book.items().items()} == {"stage@a": [r]}
    assert not list((tmp_path / ledger.LEDGER_DIR).glob("*.tmp"))


def test_unknown_state_and_fields_are_tolerated(tmp_path):
    book = ledger.Ledger(tmp_path)
    path = tmp_path / ledger.LEDGER_DIR / "x.json"
    path.parent.mkdir(parents=True)
    data = record("x", "9").to_json() | {"state": "martian", "from_the_future": 1}
    path.write_text(json.dumps({"records": [data]}))
    (r,) = book.records("x")
    assert r.state == State.UNKNOWN


def _submit_once(root: str, item: str, worker: int) -> None:
    """What `run` does: under the lock, submit only if nobody has."""
    book = ledger.Ledger(Path(root))
    with book.locked(item) as rec:
        if rec.latest("f") is None:
            time.sleep(0.05)  # widen the race window
            rec.append(record(item, f"job-{worker}"))


def test_concurrent_writers_submit_each_item_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_submit_once, args=(str(tmp_path), f"stage@{i % 3}", i)) for i in range(12)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    items = ledger.Ledger(tmp_path).items()
    assert sorted(items) == ["stage@0", "stage@1", "stage@2"]
    assert all(len(h.records) == 1 for h in items.values())


DAMAGE = {
    "truncated": lambda path: path.write_text(json.dumps({"records": [record("x", "9").to_json()]})[:40]),
    "empty": lambda path: path.write_text(""),
    "binary": lambda path: path.write_bytes(bytes(range(256))),
    "a list": lambda path: path.write_text("[1, 2]"),
    "records not a list": lambda path: path.write_text('{"records": 5}'),
    "a record of the wrong shape": lambda path: path.write_text('{"records": [{"item": 5}]}'),
    "an intent of the wrong shape": lambda path: path.write_text('{"records": [], "submitting": {"x": 1}}'),
    "a folder": lambda path: path.mkdir(),
    # Never opened: /dev/zero would fill memory, and a link the ledger never writes.
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a link to a good file": lambda path: (
        path.with_name("elsewhere").write_text(json.dumps({"records": [record("x", "9").to_json()]})),
        path.symlink_to(path.with_name("elsewhere")),
    ),
    "larger than the cap": lambda path: (path.write_text(""), os.truncate(path, ledger.MAX_ENTRY_BYTES + 1)),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_file_is_named_moved_aside_and_replaced_by_a_recovery_note(tmp_path, damage):
    lines = []
    book = ledger.Ledger(tmp_path, say=lines.append)
    path = tmp_path / ledger.LEDGER_DIR / "x.json"
    path.parent.mkdir(parents=True)
    DAMAGE[damage](path)
    with book.locked("x") as rec:
        assert rec.records == [] and rec.recovery is not None and not rec.recovery.checked
        rec.recovered(None)
    (aside,) = path.parent.glob("x.json.damaged-*")  # kept, never deleted
    assert aside.is_dir() == (damage == "a folder")
    (line,) = lines
    assert str(path) in line and aside.name in line and "Slurm is asked" in line
    # the new file says what happened, and reading it again is quiet
    again = book.history("x")
    assert again.recovery.item == "x" and again.recovery.checked and again.recovery.damaged == aside.name
    assert len(lines) == 1


def test_a_fifo_entry_is_damaged_and_never_blocks_status(tmp_path):
    """status reads every item's file: a FIFO among them would wait for a writer forever."""
    lines = []
    book = ledger.Ledger(tmp_path, say=lines.append)
    with book.locked("good") as rec:
        rec.append(record("good", "1"))
    fifo = tmp_path / ledger.LEDGER_DIR / "x.json"
    os.mkfifo(fifo)
    found = {}
    reader = threading.Thread(target=lambda: found.update(book.items()), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # let the blocked reader go before failing
        with open(fifo, "w"):
            pass
        pytest.fail("reading the ledger blocked on a FIFO")
    assert found["good"].records and found["x"].recovery.problem == "it is not a regular file (a FIFO)"
    (aside,) = fifo.parent.glob("x.json.damaged-*")
    assert stat.S_ISFIFO(aside.lstat().st_mode) and len(lines) == 1 and "x.json" in lines[0]


def test_status_readers_recover_a_damaged_file_too(tmp_path):
    lines = []
    book = ledger.Ledger(tmp_path, say=lines.append)
    with book.locked("good") as rec:
        rec.append(record("good", "1"))
    (tmp_path / ledger.LEDGER_DIR / "bad@1.json").write_text("{")
    items = book.items()
    assert (
        items["good"].records and items["bad@1"].recovery is not None and items["bad@1"].recovery.problem.startswith("it is not valid JSON")
    )
    assert len(lines) == 1 and "bad@1.json" in lines[0]
