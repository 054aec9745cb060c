"""Sync planning on real git repositories in a temporary folder (no ssh: the "cluster" repository
fetches from the "workstation" one, as the push would put the commits there): what the checkout
keeps (outputs, the cluster's dvc.lock entries and .gitignore lines), what it refuses (tracked
files changed there, files in the way), and uncommitted changes sent, applied and taken back out."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.remote import checkout, sync
from orchestrator.remote.checkout import CheckoutRefused, ClusterChanges
from orchestrator.util.runner import SubprocessRunner

GIT = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def lock(**stages: str) -> str:
    return yaml.safe_dump({"schema": "2.0", "stages": {n: {"cmd": c} for n, c in stages.items()}}, sort_keys=False)


def commit(repo: Path, message: str, **files: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repos(tmp_path):
    ws, cl = tmp_path / "ws", tmp_path / "cluster"
    ws.mkdir()
    cl.mkdir()
    git(ws, "init", "-q")
    git(cl, "init", "-q")
    return ws, cl


def send(ws: Path, cl: Path, changes: bool = False) -> checkout.CheckoutOutcome:
    snap = sync.snapshot(ws, SubprocessRunner(), changes)
    refs = [f"+{snap.head}:refs/orchestrator/head"] + ([f"+{snap.changes}:refs/orchestrator/changes"] if snap.changes else [])
    git(cl, "fetch", "-q", str(ws), *refs)
    return checkout.checkout(cl, snap.head, snap.changes, SubprocessRunner())


def test_merge_lock_keeps_what_the_cluster_wrote_and_takes_the_rest_from_the_commit():
    base = lock(a="old a", b="old b", c="c")
    ours = lock(a="cluster ran a", b="old b", c="c")  # a run there rewrote a
    theirs = lock(a="old a", b="workstation b", d="new d")  # the workstation changed b, dropped c, added d
    text, kept = checkout.merge_lock(base, ours, theirs)
    stages = yaml.safe_load(text)["stages"]
    assert stages == {"a": {"cmd": "cluster ran a"}, "b": {"cmd": "workstation b"}, "d": {"cmd": "new d"}}
    assert kept == ["a"]
    # Both changed one: the cluster's entry describes the files there.
    text, kept = checkout.merge_lock(base, lock(a="cluster", b="old b"), lock(a="workstation", b="old b"))
    assert yaml.safe_load(text)["stages"]["a"] == {"cmd": "cluster"} and kept == ["a"]
    assert checkout.merge_lock(base, base, theirs) == (theirs, [])  # nothing ran there
    assert checkout.merge_lock(None, None, theirs) == (theirs, [])
    assert checkout.merge_lock(None, "{not: [yaml", theirs) == (theirs, [])  # unreadable there: the commit's


def test_merge_ignore_adds_the_lines_dvc_added_there():
    text, added = checkout.merge_ignore(".orchestrator/\n", ".orchestrator/\n/summary.txt\n", ".orchestrator/\n*.pyc\n")
    assert text == ".orchestrator/\n*.pyc\n/summary.txt\n" and added == ["/summary.txt"]


def test_checkout_keeps_outputs_and_the_cluster_s_lock_entries(repos):
    ws, cl = repos
    first = commit(ws, "one", **{"train.py": "v1\n", "dvc.lock": lock(a="a1", b="b1"), ".gitignore": ".orchestrator/\n"})
    outcome = send(ws, cl)
    assert outcome.commit == first and git(cl, "rev-parse", "HEAD") == first
    (cl / "out").mkdir()
    (cl / "out" / "model.pt").write_text("weights")  # an output, untracked
    assert (cl / checkout.STATE_FILE).exists()  # what the sync checked out, in the (ignored) state folder
    (cl / ".orchestrator" / "ledger.jsonl").write_text("{}\n")  # the ledger, ignored
    (cl / "dvc.lock").write_text(lock(a="a ran on the cluster", b="b1"))  # a run recorded there
    with (cl / ".gitignore").open("a") as f:
        f.write("/summary.txt\n")  # DVC ignored an output there
    second = commit(ws, "two", **{"train.py": "v2\n", "dvc.lock": lock(a="a1", b="b from the workstation")})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == second and (cl / "train.py").read_text() == "v2\n"
    assert (cl / "out" / "model.pt").read_text() == "weights" and (cl / ".orchestrator" / "ledger.jsonl").exists()
    stages = yaml.safe_load((cl / "dvc.lock").read_text())["stages"]
    assert stages == {"a": {"cmd": "a ran on the cluster"}, "b": {"cmd": "b from the workstation"}}
    assert outcome.kept_entries == {"dvc.lock": ["a"]} and outcome.kept_ignores == {".gitignore": ["/summary.txt"]}
    assert (cl / ".gitignore").read_text() == ".orchestrator/\n/summary.txt\n"
    assert any("kept the cluster's entries of 1 stage" in line for line in checkout.describe(outcome))


def test_tracked_files_changed_on_the_cluster_stop_the_sync_and_nothing_changes(repos):
    ws, cl = repos
    first = commit(ws, "one", **{"train.py": "v1\n", "util.py": "u\n"})
    send(ws, cl)
    (cl / "train.py").write_text("fixed on the cluster\n")
    (cl / "util.py").unlink()
    commit(ws, "two", **{"train.py": "v2\n"})
    with pytest.raises(ClusterChanges) as caught:
        send(ws, cl)
    text = caught.value.render()
    assert "M train.py" in text and "D util.py" in text and "nothing was changed there" in text
    assert "orchestrator remote shell" in text and caught.value.exit_code == 2
    assert git(cl, "rev-parse", "HEAD") == first and (cl / "train.py").read_text() == "fixed on the cluster\n"


def test_an_untracked_file_in_the_way_stops_the_checkout_and_the_lock_is_put_back(repos):
    ws, cl = repos
    first = commit(ws, "one", **{"train.py": "v1\n", "dvc.lock": lock(a="a1")})
    send(ws, cl)
    (cl / "dvc.lock").write_text(lock(a="ran there"))
    (cl / "notes.txt").write_text("the cluster's own notes")
    commit(ws, "two", **{"notes.txt": "the workstation's notes", "dvc.lock": lock(a="a2")})
    with pytest.raises(CheckoutRefused, match="nothing was changed there") as caught:
        send(ws, cl)
    assert "notes.txt" in caught.value.render()
    assert git(cl, "rev-parse", "HEAD") == first and (cl / "dvc.lock").read_text() == lock(a="ran there")
    assert (cl / "notes.txt").read_text() == "the cluster's own notes"


def test_a_result_fetched_and_committed_on_the_workstation_does_not_stop_the_next_sync(repos):
    """A run wrote metrics.json on the cluster; the workstation fetched and committed those same
    bytes: the next checkout takes it (nothing differs), while other bytes there still stop it."""
    ws, cl = repos
    commit(ws, "one", **{"train.py": "v1\n"})
    send(ws, cl)
    (cl / "out").mkdir()
    (cl / "out/metrics.json").write_text('{"loss": 0.5}\n')
    (cl / "out/other.json").write_text("the cluster's\n")
    two = commit(ws, "two", **{"out/metrics.json": '{"loss": 0.5}\n'})
    send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == two and (cl / "out/metrics.json").read_text() == '{"loss": 0.5}\n'
    assert git(cl, "status", "--porcelain", "--", "out/metrics.json") == ""
    # Same bytes in one file, other bytes in another: git refuses, and both stay as they were.
    (cl / "out/b.json").write_text("same\n")
    commit(ws, "three", **{"out/b.json": "same\n", "out/other.json": "the workstation's\n"})
    with pytest.raises(CheckoutRefused, match="nothing was changed there") as caught:
        send(ws, cl)
    assert "out/other.json" in caught.value.render()
    assert git(cl, "rev-parse", "HEAD") == two
    assert (cl / "out/b.json").read_text() == "same\n" and (cl / "out/other.json").read_text() == "the cluster's\n"


def test_uncommitted_changes_are_sent_applied_and_taken_back_out_by_the_next_sync(repos):
    ws, cl = repos
    head = commit(ws, "one", **{"train.py": "v1\n", "old.py": "old\n", "dvc.lock": lock(a="a1"), "logo.bin": "x"})
    (ws / "train.py").write_text("v1 with a fix\n")
    (ws / "new.py").write_text("new\n")
    (ws / "old.py").unlink()
    (ws / "logo.bin").write_bytes(bytes(range(256)))  # binary: --binary diff
    (ws / "dvc.lock").write_text(lock(a="workstation's uncommitted lock"))  # never sent: the cluster keeps its own
    git(ws, "add", "train.py")  # one change staged, the others not
    staged = git(ws, "diff", "--cached", "--name-only")
    outcome = send(ws, cl, changes=True)
    assert git(ws, "diff", "--cached", "--name-only") == staged  # the user's index is untouched
    assert git(ws, "rev-parse", "HEAD") == head and outcome.changes
    assert git(cl, "rev-parse", "HEAD") == head  # the commit checked out; the changes on top, uncommitted
    assert (cl / "train.py").read_text() == "v1 with a fix\n" and (cl / "new.py").read_text() == "new\n"
    assert not (cl / "old.py").exists() and (cl / "logo.bin").read_bytes() == bytes(range(256))
    assert yaml.safe_load((cl / "dvc.lock").read_text())["stages"]["a"] == {"cmd": "a1"}

    # The next sync, of the committed state only: the changes come back out, and are not the cluster's.
    git(ws, "reset", "-q")
    git(ws, "checkout", "-q", "--", ".")
    (ws / "new.py").unlink()
    second = commit(ws, "two", **{"other.py": "o\n"})
    outcome = send(ws, cl)
    assert outcome.undone and git(cl, "rev-parse", "HEAD") == second
    assert git(cl, "status", "--porcelain", "--untracked-files=no") == ""
    assert (cl / "train.py").read_text() == "v1\n" and (cl / "old.py").exists() and not (cl / "new.py").exists()


def test_changes_edited_on_the_cluster_after_they_were_sent_count_as_the_cluster_s(repos):
    ws, cl = repos
    commit(ws, "one", **{"train.py": "v1\n"})
    (ws / "train.py").write_text("sent\n")
    send(ws, cl, changes=True)
    (cl / "train.py").write_text("sent, then edited there\n")
    git(ws, "checkout", "-q", "--", ".")
    with pytest.raises(ClusterChanges, match="train.py"):
        send(ws, cl)
    assert (cl / "train.py").read_text() == "sent, then edited there\n"


def test_a_snapshot_without_changes_counts_what_it_leaves_out(repos):
    ws, _ = repos
    commit(ws, "one", **{"train.py": "v1\n"})
    (ws / "train.py").write_text("v2\n")
    (ws / "scratch.py").write_text("x\n")
    snap = sync.snapshot(ws, SubprocessRunner(), with_changes=False)
    assert snap.changes is None and snap.left_out == 2
    clean = sync.snapshot(ws, SubprocessRunner(), with_changes=True)
    assert clean.changes and git(ws, "rev-parse", f"{clean.changes}^") == snap.head


def test_the_push_rides_on_the_session_s_ssh():
    snap = sync.Snapshot("a" * 40, "b" * 40, 0)
    argv = sync.push_argv(Path("/ws"), ["ssh", "-o", "ControlPath=~/.ssh/orchestrator-%C"], "lumi", "/scratch/p/u/proj", snap)
    assert argv[:3] == ["git", "-C", "/ws"] and "core.sshCommand=ssh -o 'ControlPath=~/.ssh/orchestrator-%C'" in argv
    assert argv[-3:] == ["lumi:/scratch/p/u/proj", f"+{'a' * 40}:refs/orchestrator/head", f"+{'b' * 40}:refs/orchestrator/changes"]


@pytest.mark.parametrize("changes", ["--output={evil}", "HEAD~1", "-p", "a" * 39])
def test_a_changes_value_that_is_not_a_commit_id_is_refused_and_nothing_changes(repos, tmp_path, monkeypatch, changes):
    """`remote checkout --changes X` hands X to `git diff` as a revision, where no `--` can stand before it."""
    from support import invoke

    ws, cl = repos
    first = commit(ws, "one", **{"train.py": "v1\n"})
    send(ws, cl)
    second = commit(ws, "two", **{"train.py": "v2\n"})
    git(cl, "fetch", "-q", str(ws), f"+{second}:refs/orchestrator/head")
    evil = tmp_path / "evil"
    monkeypatch.chdir(cl)
    for argv in (["remote", "checkout", second, "--changes", changes.format(evil=evil)], ["remote", "checkout", "--", "-q"]):
        result = invoke(*argv)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert (
            "remote checkout takes full commit ids (40 or 64 hexadecimal digits, as a sync sends them): nothing was changed"
            in result.output
        )
    assert not evil.exists() and git(cl, "rev-parse", "HEAD") == first and (cl / "train.py").read_text() == "v1\n"


def test_a_state_file_that_names_no_commits_is_not_taken_to_git(repos, tmp_path):
    ws, cl = repos
    commit(ws, "one", **{"train.py": "v1\n"})
    send(ws, cl)
    evil = tmp_path / "evil"
    (cl / checkout.STATE_FILE).write_text(f'{{"commit": "--output={evil}", "changes": "HEAD"}}\n')
    commit(ws, "two", **{"train.py": "v2\n"})
    send(ws, cl)
    assert not evil.exists() and (cl / "train.py").read_text() == "v2\n"


def test_the_checkout_there_parses_to_the_commits_sent(monkeypatch):
    """What a sync runs there, parsed by the hidden command: the commits are its values, never options."""
    from support import invoke

    argv = sync.checkout_argv(sync.Snapshot("a" * 40, "b" * 64, 0))
    assert argv[:3] == ["orchestrator", "remote", "checkout"]
    got: list = []
    monkeypatch.setattr(
        checkout,
        "checkout",
        lambda root, commit, changes, runner: got.append((commit, changes)) or checkout.CheckoutOutcome(commit, changes),
    )
    result = invoke(*argv[1:])
    assert result.exit_code == 0, result.output
    assert got == [("a" * 40, "b" * 64)]


PIPELINE = """\
stages:
  train:
    cmd: python train.py
    deps: [train.py]
    params: [lr]
    metrics: [{out/metrics.json: {cache: false, persist: true}}]
    outs: [{out/model: {persist: true}}]
"""


@pytest.fixture
def dvc_repos(repos):
    """The workstation a DVC project whose metrics file git tracks once it came home (cache: false)."""
    ws, cl = repos
    subprocess.run(["dvc", "init", "-q"], cwd=ws, check=True, capture_output=True)
    commit(ws, "the project", **{"dvc.yaml": PIPELINE, "params.yaml": "lr: 0.1\n", "train.py": "v1\n", ".gitignore": "/out/model\n"})
    return ws, cl


def ran_there(cl: Path, metrics: str | None) -> None:
    """What a run of `train` on the cluster leaves: its model (DVC's cache, git-ignored) and its metrics, or none yet."""
    (cl / "out/model").mkdir(parents=True, exist_ok=True)
    (cl / "out/model/weights").write_text(metrics or "")
    if metrics is None:
        (cl / "out/metrics.json").unlink(missing_ok=True)  # DVC removes outputs before it runs the stage again
    else:
        (cl / "out/metrics.json").write_text(metrics)


def test_round_after_round_results_the_cluster_wrote_never_stop_the_sync(dvc_repos):
    """The workstation loop: submit, the run writes, fetch and commit, change a param, submit again.
    From the second round the workstation tracks the result; every later run there rewrites or
    removes it, and a sync keeps what the run left, names it, and checks the new commit out."""
    ws, cl = dvc_repos
    send(ws, cl)
    ran_there(cl, '{"loss": 0.5}\n')
    # Fetched and committed with the params of the next round: the same bytes, taken as committed.
    two = commit(ws, "round 2", **{"out/metrics.json": '{"loss": 0.5}\n', "params.yaml": "lr: 0.2\n"})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == two and outcome.kept_results == []
    assert git(cl, "status", "--porcelain", "--untracked-files=no") == ""

    # Round 3: the run there rewrote the tracked result; the workstation changed a param (not fetched).
    ran_there(cl, '{"loss": 0.4}\n')
    three = commit(ws, "round 3", **{"params.yaml": "lr: 0.3\n"})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == three and outcome.kept_results == ["out/metrics.json"]
    assert (cl / "out/metrics.json").read_text() == '{"loss": 0.4}\n' and (cl / "params.yaml").read_text() == "lr: 0.3\n"
    assert any("orchestrator fetch" in line and "out/metrics.json" in line for line in checkout.describe(outcome))

    # Round 4: a rerun there has removed it (running now); the sync keeps that too.
    ran_there(cl, None)
    four = commit(ws, "round 4", **{"params.yaml": "lr: 0.4\n"})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == four and outcome.kept_results == ["out/metrics.json"]
    assert not (cl / "out/metrics.json").exists()

    # Round 5: fetched and committed what the last run wrote: nothing differs, nothing named.
    ran_there(cl, '{"loss": 0.3}\n')
    five = commit(ws, "round 5", **{"out/metrics.json": '{"loss": 0.3}\n'})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == five and outcome.kept_results == []
    assert git(cl, "status", "--porcelain", "--untracked-files=no") == ""

    # Code changed there by hand still stops the sync, results or not; nothing changes.
    ran_there(cl, '{"loss": 0.2}\n')
    (cl / "train.py").write_text("edited on the login node\n")
    commit(ws, "round 6", **{"params.yaml": "lr: 0.6\n"})
    with pytest.raises(ClusterChanges) as caught:
        send(ws, cl)
    text = caught.value.render()
    assert "M train.py" in text and "out/metrics.json" not in text.split("hint")[0]
    assert git(cl, "rev-parse", "HEAD") == five and (cl / "out/metrics.json").read_text() == '{"loss": 0.2}\n'


def test_an_untracked_result_newer_than_the_committed_one_is_kept(dvc_repos):
    """The workstation fetched a result and committed it, while a later run there rewrote it
    (untracked there until this sync): the run's bytes stay, the commit is checked out."""
    ws, cl = dvc_repos
    send(ws, cl)
    ran_there(cl, '{"loss": 0.4}\n')
    two = commit(ws, "fetched an earlier run", **{"out/metrics.json": '{"loss": 0.5}\n'})
    outcome = send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == two and outcome.kept_results == ["out/metrics.json"]
    assert (cl / "out/metrics.json").read_text() == '{"loss": 0.4}\n'
    # A file that is no output, untracked there with other bytes, is still git's to refuse.
    (cl / "notes.txt").write_text("the cluster's\n")
    commit(ws, "notes", **{"notes.txt": "the workstation's\n"})
    with pytest.raises(CheckoutRefused, match="nothing was changed there"):
        send(ws, cl)
    assert git(cl, "rev-parse", "HEAD") == two and (cl / "out/metrics.json").read_text() == '{"loss": 0.4}\n'
