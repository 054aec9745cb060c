"""The ledger: atomic files, and one submission per item under concurrent writers."""

import json
import multiprocessing
import time
from pathlib import Path

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
    assert book.items() == {"stage@a": [r]}
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
    assert all(len(records) == 1 for records in items.values())
