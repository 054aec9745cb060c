"""status, logs, show and cancel from the ledger, with the scheduler faked."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeRunner, ok
from support import invoke

from orchestrator.jobs import ledger, status
from orchestrator.slurm.states import State


def record(item, job_id, state=State.RUNNING, backend="slurm", log=None):
    return ledger.Record(
        item=item,
        fingerprint="f" + job_id,
        backend=backend,
        job_id=job_id,
        profile="testbed",
        script="s",
        submitted_at=1.0,
        state=state,
        log=log,
    )


def seed(root):
    book = ledger.Ledger(root)
    for rec in [
        record("bench@a", "11"),
        record("bench@b", "12"),
        record("bench@c", "13", State.COMPLETED),
        record("other", "local-5", State.COMPLETED, backend="local"),
    ]:
        with book.locked(rec.item) as entries:
            entries.append(rec)
    return book


def test_refresh_asks_the_scheduler_once_for_all_live_jobs(tmp_path):
    seed(tmp_path)
    runner = FakeRunner({"sacct": ok("11|COMPLETED|0:0|30|2|node[1-2]|None\n12|FAILED|1:0|3|1|node1|None\n"), "squeue": ok("")})
    rows = {r.item: r for r in status.refresh(tmp_path, runner)}
    # one sacct for all; one squeue for the jobs it says ended (a requeue may not be in the database yet)
    assert [c[0] for c in runner.calls] == ["sacct", "squeue"] and "11,12" in runner.calls[0] and "11,12" in runner.calls[1]
    assert rows["bench@a"].state == State.COMPLETED and rows["bench@a"].nodes == "node[1-2]" and rows["bench@a"].elapsed_s == 30
    assert rows["bench@b"].state == State.FAILED and rows["bench@b"].exit_code == 1
    assert ledger.Ledger(tmp_path).records("bench@b")[-1].state == State.FAILED  # written back
    assert status.refresh(tmp_path, runner, ["bench@c"])[0].state == State.COMPLETED
    assert len(runner.calls) == 2  # nothing live left to ask about


def test_scheduler_down_shows_what_the_ledger_knows(tmp_path):
    seed(tmp_path)
    rows = status.refresh(tmp_path, FakeRunner({"sacct": ok("", "error", rc=1), "squeue": ok("", "error", rc=1)}))
    assert {r.item: r.state for r in rows}["bench@a"] == State.RUNNING


def test_cancel_one_scancel_for_all(tmp_path):
    seed(tmp_path)
    runner = FakeRunner({"scancel": ok()})
    assert sorted(status.cancel(tmp_path, runner, ["bench"])) == ["11", "12"]
    assert runner.calls == [["scancel", "11", "12"]]
    assert ledger.Ledger(tmp_path).records("bench@a")[-1].state == State.CANCELLED


def logged_item(root: Path, text: str, state: State) -> tuple[ledger.Ledger, Path]:
    """Item x, run as local job local-7 in ``state``, whose log holds ``text``: the ledger and the log."""
    book = ledger.Ledger(root)
    log = root / ".orchestrator/logs/x-7.log"
    log.parent.mkdir(parents=True)
    log.write_text(text)
    with book.locked("x") as entries:
        entries.append(record("x", "local-7", state, backend="local", log=".orchestrator/logs/x-7.log"))
    return book, log


def test_logs_show_and_unknown_items(tmp_path):
    logged_item(tmp_path, "hello from the job\n", State.COMPLETED)
    done = invoke("logs", "x", "--project", str(tmp_path))
    assert done.exit_code == 0 and done.output == "hello from the job\n"
    done = invoke("logs", "x", "--follow", "--project", str(tmp_path))  # the job has ended: returns
    assert done.exit_code == 0 and done.output == "hello from the job\n"
    done = invoke("show", "x", "--project", str(tmp_path))
    assert done.exit_code == 0 and "job_id: local-7" in done.output and "rerun: git checkout" in done.output
    done = invoke("logs", "nope", "--project", str(tmp_path))
    assert done.exit_code == 2 and "no submitted item matches nope" in done.output and "items in the ledger: x" in done.output


def test_status_shows_mfu_and_node_fault_retries(tmp_path):
    """MFU from the finished run's metrics against the profile's peak (lumi: 191.5 TFLOP/s
    per GCD); the node-fault column appears only when an item was retried."""
    import dataclasses
    import json

    (tmp_path / "out").mkdir()
    (tmp_path / "out/metrics.json").write_text(json.dumps({"tokens_per_second": 1000.0, "flops_per_token": 6e10, "world_size": 2}))
    book = ledger.Ledger(tmp_path)
    done = dataclasses.replace(record("lm@big", "21", State.COMPLETED), profile="lumi", metrics=("out/metrics.json",))
    faulted = dataclasses.replace(
        record("lm@small", "30", State.FAILED), fingerprint="g", fault="NODE_FAIL on nid001", fault_nodes=("nid001",)
    )
    retried = dataclasses.replace(record("lm@small", "31", State.COMPLETED), fingerprint="g", excluded=("nid001",))
    for rec in (done, faulted, retried):
        with book.locked(rec.item) as entries:
            entries.append(rec)
    rows = {r.item: r for r in status.refresh(tmp_path, FakeRunner())}
    assert abs(rows["lm@big"].mfu - 1000 * 6e10 / 2 / 191.5e12) < 1e-12
    assert rows["lm@small"].mfu is None and rows["lm@small"].node_faults == 1 and rows["lm@small"].avoiding == ("nid001",)
    out = invoke("status", "--project", str(tmp_path)).output
    assert "MFU" in out and "15.7%" in out and "node faults" in out and "1 retried, avoiding nid001" in out


def test_status_shows_pending_reasons_and_what_to_do_about_a_held_job(tmp_path, monkeypatch):
    seed(tmp_path)
    sacct = ok("11|PENDING|0:0|0|2||None\n12|PENDING|0:0|0|1||None\n")
    squeue = ok("11|PENDING|0:00|2||Priority\n12|PENDING|0:00|1||launch failed requeued held\n")
    runner = FakeRunner({"sacct": sacct, "squeue": squeue})
    rows = {r.item: r for r in status.refresh(tmp_path, runner, ["bench"])}
    assert rows["bench@a"].reason == "Priority" and rows["bench@a"].stuck is None
    assert rows["bench@b"].reason == "launch failed requeued held" and "scontrol release 12" in rows["bench@b"].stuck
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)
    done = invoke("status", "bench", "--project", str(tmp_path))
    assert done.exit_code == 0 and "note" in done.output and "Priority" in done.output
    assert "bench@b: job 12 will not start by itself (launch failed requeued held): the job is held: `scontrol release 12`" in done.output


def test_status_shows_an_item_whose_ledger_was_recovered(tmp_path, monkeypatch):
    seed(tmp_path)
    path = tmp_path / ledger.LEDGER_DIR / "bench@b.json"
    path.write_bytes(b"\x00\xff\x00")
    runner = FakeRunner({"sacct": ok(""), "squeue": ok("")})
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)
    done = invoke("status", "--project", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert f"ledger file {path} is damaged (it is not text (binary data))" in done.output
    (row,) = [line for line in done.output.splitlines() if line.startswith("bench@b")]
    assert "recovered (it is not text (binary data); damaged file kept as bench@b.json.damaged-" in row
    assert list(path.parent.glob("bench@b.json.damaged-*")) and "Traceback" not in done.output


def test_status_says_how_many_items_wait_for_a_later_wave(tmp_path, monkeypatch):
    import dataclasses

    seed(tmp_path)
    recorder = dataclasses.replace(record("orchestrator:record", "40", State.PENDING), provenance={"after": ["11"], "waiting": 751})
    with ledger.Ledger(tmp_path).locked(recorder.item) as entries:
        entries.append(recorder)
    runner = FakeRunner({"sacct": ok("11|RUNNING|0:0|5|1|node1|None\n40|PENDING|0:0|0|1||None\n")})
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)
    done = invoke("status", "--project", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert "751 item(s) wait for a later wave (MaxSubmitJobs): recording job 40 submits it when these end" in done.output


def test_status_of_a_project_with_nothing_submitted_says_what_fills_it(tmp_path):
    # A bare header read as if something were wrong (issue 36).
    result = invoke("status", "--project", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "nothing submitted from this project yet" in result.output and "orchestrator submit" in result.output
    assert "`orchestrator status --remote`" in result.output  # a workstation's items are the login node's
    assert "state" not in result.output


def test_following_a_log_reads_what_the_job_appends_until_it_ends_waiting_longer_each_time(tmp_path):
    from orchestrator.jobs import follow
    from orchestrator.util.poll import Clock

    book, log = logged_item(tmp_path, "step 1\n", State.RUNNING)
    slept = []

    def sleep(seconds: float) -> None:  # the job writes on, and ends at the third wait
        slept.append(seconds)
        with log.open("a") as f:
            f.write(f"step {len(slept) + 1}\n")
        if len(slept) == 3:
            with book.locked("x") as entries:
                entries.update("local-7", state=State.COMPLETED)

    written = []
    assert follow.log(tmp_path, "x", FakeRunner({}), True, written.append, Clock(sleep=sleep))
    assert "".join(written) == "step 1\nstep 2\nstep 3\nstep 4\n"
    assert slept == [0.5, 0.75, 1.125]


def test_items_that_left_dvc_yaml_and_ended_are_left_out_and_counted(tmp_path, monkeypatch):
    """An item removed from the matrix keeps its ledger; its old job is no longer listed round after
    round, unless it still runs, it is named, or --all is asked for."""
    seed(tmp_path)
    runner = FakeRunner({"sacct": ok("11|RUNNING|0:0|5|1|node1|None\n12|COMPLETED|0:0|3|1|node1|None\n"), "squeue": ok("")})
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)
    monkeypatch.setattr("orchestrator.pipeline.stages.item_names", lambda root: ["bench@c", "other"])  # bench@a and bench@b left
    out = invoke("status", "--project", str(tmp_path)).output
    listed = [line.split()[0] for line in out.splitlines()[1:] if line.startswith(("bench", "other"))]
    assert listed == ["bench@a", "bench@c", "other"], out  # bench@a still runs: it stays
    assert "1 ended item(s) no longer in dvc.yaml left out (bench@b): `status --all` lists them" in out
    for asked in (["--all"], ["bench@b"]):
        out = invoke("status", *asked, "--project", str(tmp_path)).output
        assert "bench@b" in out and "left out" not in out, out
    rows = status.refresh(tmp_path, runner)
    assert status.departed(rows, None) == (rows, [])  # the pipeline unknown: nothing left out
