"""orchestrator fetch's logic: which stages, the lock merge, and the hash check against the cluster's dvc.lock,
with a copier that copies from a local "cluster" folder instead of rsync over ssh."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support import dvc_init, examples

from orchestrator.errors import OrchestratorError
from orchestrator.remote import fetch as fetching
from orchestrator.remote import trust
from orchestrator.util.runner import Completed
from orchestrator.util.ssh import RemoteError

DVC_YAML = {
    "stages": {
        "train": {
            "matrix": {"n": [1, 2]},
            "cmd": "mkdir -p out/${item.n} && echo model${item.n} > out/${item.n}/w.txt && echo '{\"loss\": ${item.n}}' > m${item.n}.json",
            "outs": ["out/${item.n}"],
            "metrics": [{"m${item.n}.json": {"cache": False}}],
        },
        "other": {"cmd": "echo x > other.txt", "outs": ["other.txt"]},
    }
}


def dvc(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], cwd=where, capture_output=True, text=True, check=False)


def project(where: Path, git: bool = False) -> Path:
    where.mkdir(parents=True)
    if git:
        subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    dvc_init(where, scm=git)
    (where / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    return where


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """A project where the two train items ran (other did not)."""
    where = project(tmp_path_factory.mktemp("c") / "cluster")
    done = dvc(where, "repro", "train")
    assert done.returncode == 0, done.stdout + done.stderr
    return where


def copier(source: Path, calls: list | None = None, code: int | None = None):
    def copy(paths, into: Path) -> Completed:
        if calls is not None:
            calls.append(list(paths))
        missing = False
        for path in paths:
            src, dst = source / path, into / path
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst)
            elif src.exists():
                shutil.copy2(src, dst)
            else:
                missing = True
        rc = code if code is not None else (23 if missing else 0)
        return Completed(("rsync",), rc, "", "rsync: link_stat failed: No such file or directory" if missing else "")

    return copy


def run_fetch(here: Path, source: Path, targets=(), copy=None, push=None) -> tuple[list[fetching.FetchResult], list[str]]:
    said: list[str] = []
    lock = (source / "dvc.lock").read_text()
    results = fetching.fetch(here, lock, "login:/c", targets, ["train", "other"], copy or copier(source), said.append, push)
    return results, said


def test_all_finished_stages_come_back_and_dvc_calls_them_up_to_date(cluster, tmp_path):
    here = project(tmp_path / "ws")
    calls: list = []
    results, said = run_fetch(here, cluster, copy=copier(cluster, calls))
    assert [(r.stage, r.fetched) for r in results] == [("train@1", True), ("train@2", True)]
    assert said[:2] == ["copying 4 output(s) of 2 stage(s) from the cluster", "fetched train@1: 2 file(s), 19 B (by rsync)"]
    assert len(calls) == 1  # one copy for every stage: one rsync however many items
    assert (here / "out/2/w.txt").read_text() == "model2\n"
    assert yaml.safe_load((here / "dvc.lock").read_text()) == yaml.safe_load((cluster / "dvc.lock").read_text())
    status = dvc(here, "status", "train", "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr
    shown = dvc(here, "metrics", "show", "--json")
    assert '"loss": 2' in shown.stdout, shown.stdout + shown.stderr
    assert not (here / fetching.STAGING).exists()


def test_a_file_a_later_run_changed_there_is_skipped_and_its_entry_not_written(cluster, tmp_path):
    """A run cancelled, failed or still going rewrote an out its lock entry records: nothing of the
    stage placed, and said as the loop's ordinary state (skipped, exit 0), with what to run."""
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    (there / "out/2/w.txt").write_text("tampered\n")
    here = project(tmp_path / "ws")
    results, said = run_fetch(here, there)
    by = {r.stage: r for r in results}
    assert by["train@1"].fetched and not by["train@2"].fetched
    assert "hash mismatch" in by["train@2"].problems[0] and by["train@2"].problems[0].startswith("out/2:")
    assert not by["train@2"].refused
    (line,) = [line for line in said if line.startswith("skipped train@2: ")]
    assert "a later run of it removed or rewrote them" in line and "orchestrator status --remote" in line, line
    assert list(yaml.safe_load((here / "dvc.lock").read_text())["stages"]) == ["train@1"]
    assert not (here / "out/2").exists() and not (here / "m2.json").exists()


def test_a_metrics_file_changed_there_is_skipped_too(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    (there / "m1.json").write_text('{"loss": 9}\n')
    results, _ = run_fetch(project(tmp_path / "ws"), there, ["train@1"])
    assert [(r.stage, r.fetched) for r in results] == [("train@1", False)]
    assert "m1.json: hash mismatch" in results[0].problems[0]


def test_an_out_missing_there_skips_its_stage(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    shutil.rmtree(there / "out/1")
    here = project(tmp_path / "ws")
    results, _ = run_fetch(here, there, ["train@1"])
    assert results[0].problems == ["out/1: missing there"]
    assert not (here / "dvc.lock").exists()


def test_a_failed_copy_is_an_error_not_a_skip(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    shutil.rmtree(there / "out/1")
    with pytest.raises(RemoteError, match="rsync from the cluster failed .exit 12."):
        run_fetch(project(tmp_path / "ws"), there, ["train@1"], copy=copier(there, code=12))


def test_an_existing_local_out_is_replaced_and_other_entries_kept(cluster, tmp_path):
    here = project(tmp_path / "ws")
    (here / "out/1").mkdir(parents=True)
    (here / "out/1/stale.txt").write_text("old")
    (here / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"other": {"cmd": "echo x > other.txt"}}}))
    calls: list = []
    results, _ = run_fetch(here, cluster, ["train@1"], copy=copier(cluster, calls))
    assert calls == [["m1.json", "out/1"]] and results[0].fetched
    assert sorted(p.name for p in (here / "out/1").iterdir()) == ["w.txt"]
    assert list(yaml.safe_load((here / "dvc.lock").read_text())["stages"]) == ["other", "train@1"]


def test_an_entry_naming_a_path_outside_the_project_is_refused(tmp_path):
    lock = yaml.safe_dump(
        {"stages": {"other": {"cmd": "x", "outs": [{"path": "../x", "hash": "md5", "md5": "d41d8cd98f00b204e9800998ecf8427e"}]}}}
    )
    here = project(tmp_path / "ws")
    calls: list = []
    results = fetching.fetch(here, lock, "login:/c", [], [], copier(tmp_path, calls), print)
    assert not results[0].fetched and results[0].refused and "'../x': not inside the project" in results[0].why and calls == []


def test_a_folder_out_replaces_a_file_of_that_name_here(cluster, tmp_path):
    here = project(tmp_path / "ws")
    (here / "out").mkdir()
    (here / "out/1").write_text("a file")
    results, _ = run_fetch(here, cluster, ["train@1"])
    assert results[0].fetched and (here / "out/1/w.txt").read_text() == "model1\n"


def test_select_names_items_matrices_and_unfinished_stages():
    stages = {"train@0": {}, "train@1": {}, "eval": {}}
    assert fetching.select(stages, [], []) == (["train@0", "train@1", "eval"], [])
    assert fetching.select(stages, ["train", "train@1"], ["train"])[0] == ["train@0", "train@1"]
    chosen, skipped = fetching.select(stages, ["other"], ["train", "other"])
    assert chosen == [] and skipped[0].stage == "other" and "not finished there" in skipped[0].why
    with pytest.raises(fetching.FetchError, match="unknown target.s.: nope") as caught:
        fetching.select(stages, ["nope"], ["train", "other"])
    assert caught.value.exit_code == 2 and "stages: eval, other, train" in caught.value.hints[0]


def test_nothing_finished_there_is_an_error(tmp_path):
    with pytest.raises(fetching.FetchError, match="has no stages"):
        fetching.fetch(tmp_path, "schema: '2.0'\nstages: {}\n", "login:/c", [], [], copier(tmp_path), print)
    with pytest.raises(fetching.FetchRefused, match="not one DVC wrote") as caught:
        fetching.fetch(tmp_path, "- a list\n", "login:/c", [], [], copier(tmp_path), print)
    assert caught.value.exit_code == 1


def test_merge_replaces_only_the_fetched_stages():
    local = yaml.safe_dump({"schema": "2.0", "stages": {"a": {"cmd": "old"}, "b": {"cmd": "b"}}})
    merged = yaml.safe_load(fetching.merge(local, {"a": {"cmd": "new"}, "c": {"cmd": "c"}}))
    assert merged == {"schema": "2.0", "stages": {"a": {"cmd": "new"}, "b": {"cmd": "b"}, "c": {"cmd": "c"}}}
    assert yaml.safe_load(fetching.merge(None, {"a": {}})) == {"schema": "2.0", "stages": {"a": {}}}


def test_an_entry_naming_an_out_twice_is_refused():
    out = {"path": "a", "hash": "md5", "md5": "0" * 32}
    with pytest.raises(fetching.FetchRefused, match="s: its entry there names a more than once"):
        trust.verify_outs("s", {"outs": [out, {**out, "path": "./a"}]}, {"a": fetching.Declared("a", True)})


def test_verify_outs_tells_dvc2_from_dvc3_entries():
    declared = {"a": fetching.Declared("a", True), "d": fetching.Declared("d/", False)}
    entry = {"outs": [{"path": "a", "hash": "md5", "md5": "0" * 32, "size": 1}, {"path": "d", "md5": "f" * 32 + ".dir"}]}
    outs = trust.verify_outs("s", entry, declared)
    assert [(o.path, o.hash_name, o.isdir, o.declared, o.cached) for o in outs] == [
        ("a", "md5", False, "a", True),
        ("d", "md5-dos2unix", True, "d/", False),
    ]


def test_rsync_copier_rides_the_session_master_with_one_rsync_for_every_path(tmp_path):
    seen, listed = [], []

    class Runner:
        def run(self, argv, **kw):
            seen.append(argv)
            listing = next(a for a in argv if a.startswith("--files-from=")).split("=", 1)[1]
            listed.append(Path(listing).read_bytes())
            return Completed(tuple(argv), 0, "", "")

    into = tmp_path / "staged"
    into.mkdir()
    copy = fetching.rsync_copier(["ssh", "-o", "ControlPath=~/.ssh/orchestrator-%C"], "login", "/p/my proj", Runner())
    paths = ["out/1", "m1.json", *(f"out/{i}" for i in range(2, 1002))]
    copy(paths, into)
    assert seen == [
        [
            "rsync", "-rt", "--chmod=D0777,F0666", "--partial", "-s", "-e", "ssh -o 'ControlPath=~/.ssh/orchestrator-%C'", "--from0",
            f"--files-from={tmp_path}/.staged.files", "login:/p/my proj/", f"{into}/",
        ]
    ]  # fmt: skip
    assert listed == [b"".join(p.encode() + b"\0" for p in paths)]  # the list on rsync's protocol, not the command line
    assert not (tmp_path / ".staged.files").exists()


def cached(project: Path, md5: str) -> bool:
    return (project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]).exists()


def lock_outs(source: Path, stage: str) -> dict[str, str]:
    return {out["path"]: out["md5"] for out in yaml.safe_load((source / "dvc.lock").read_text())["stages"][stage]["outs"]}


def test_cache_false_outs_stay_out_of_the_cache_and_cached_outs_are_gitignored(cluster, tmp_path):
    here = project(tmp_path / "ws", git=True)
    results, _ = run_fetch(here, cluster, ["train@1"])
    assert results[0].fetched
    md5 = lock_outs(cluster, "train@1")
    assert cached(here, md5["out/1"]) and not cached(here, md5["m1.json"])  # m1.json is `cache: false` in dvc.yaml
    ignored = subprocess.run(["git", "check-ignore", "out/1/w.txt", "m1.json"], cwd=here, capture_output=True, text=True)
    assert ignored.stdout.split() == ["out/1/w.txt"], ignored.stdout + ignored.stderr
    assert (here / "out/.gitignore").read_text().splitlines() == ["/1"]  # DVC's own entry, where DVC puts it
    run_fetch(here, cluster, ["train@1"])
    assert (here / "out/.gitignore").read_text().splitlines() == ["/1"]  # a second fetch adds none twice
    status = dvc(here, "status", "train@1", "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr


@pytest.fixture
def shared(cluster, tmp_path):
    """The cluster's project and a workstation project, both with a default DVC remote in a folder both reach."""
    remote = tmp_path / "dvc-remote"
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    here = project(tmp_path / "ws")
    for side in (there, here):
        assert dvc(side, "remote", "add", "-d", "shared", str(remote)).returncode == 0
    return there, here, remote


def pusher(there: Path, calls: list):
    from orchestrator.remote import shared as sharing

    def push(remote, stages):
        calls.append((remote, list(stages)))
        count, error = sharing.push(there, remote, stages)
        return Completed(("orchestrator", "remote", "push"), 1 if error else 0, f"{count} pushed\n", error or "")

    return push


def test_cached_outs_come_through_the_shared_dvc_remote_and_the_rest_by_rsync(shared, tmp_path):
    there, here, remote = shared
    shutil.rmtree(there / "out")  # in the cluster's cache only: rsync could not bring them
    copied, pushed = [], []
    results, said = run_fetch(here, there, copy=copier(there, copied), push=pusher(there, pushed))
    assert [(r.stage, r.fetched) for r in results] == [("train@1", True), ("train@2", True)], said
    assert pushed == [("shared", ["train@1", "train@2"])]
    assert copied == [["m1.json", "m2.json"]]  # only the cache: false outs went by rsync, in one copy
    assert "fetched train@1: 2 file(s), 19 B (m1.json by rsync; out/1 through the DVC remote 'shared')" in said
    assert (here / "out/2/w.txt").read_text() == "model2\n"
    assert any(remote.rglob("*.dir"))
    status = dvc(here, "status", "train", "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr


def test_a_tampered_remote_object_is_refused_and_kept_out_of_the_cache(shared):
    there, here, remote = shared
    from orchestrator.remote import shared as sharing

    assert sharing.push(there, "shared", ["train@1"]) == (2, None)  # the .dir listing and its one file
    md5 = hashlib_md5(there / "out/1/w.txt")
    obj = remote / "files/md5" / md5[:2] / md5[2:]

    def push_then_tamper(name, stages):  # changed in the remote after the cluster pushed it, before this side pulls
        done = pusher(there, [])(name, stages)
        obj.chmod(0o644)
        obj.write_text("tampered\n")
        return done

    results, _ = run_fetch(here, there, ["train@1"], push=push_then_tamper)
    # DVC's transfer drops an object that does not hash to its name, or fetch's own check refuses it: either way, refused
    (problem,) = results[0].problems
    assert problem.startswith("out/1: ") and ("not whole in the DVC remote 'shared'" in problem or "hash mismatch" in problem), problem
    assert not results[0].fetched
    assert not cached(here, md5) and not (here / "out/1").exists() and not (here / "dvc.lock").exists()


def test_objects_the_push_did_not_send_skip_their_stage(shared):
    there, here, _ = shared
    failing = lambda remote, stages: Completed(("orchestrator",), 1, "", "ERROR: failed to push data to the cloud")  # noqa: E731
    copied: list = []
    results, said = run_fetch(here, there, ["train@1"], copy=copier(there, copied), push=failing)
    assert "dvc push on the cluster did not finish cleanly (exit 1): ERROR: failed to push data to the cloud" in said
    assert not results[0].fetched and results[0].problems[0].startswith("out/1: not whole in the DVC remote 'shared'")
    assert not (here / "m1.json").exists() and not (here / "dvc.lock").exists()  # the stage whole or not at all


def test_without_a_committed_default_remote_everything_comes_by_rsync(cluster, tmp_path):
    here = project(tmp_path / "ws")
    assert dvc(here, "remote", "add", "--local", "-d", "mine", str(tmp_path / "r")).returncode == 0  # not shared: config.local
    pushed, copied = [], []
    results, _ = run_fetch(here, cluster, ["train@1"], copy=copier(cluster, copied), push=pusher(cluster, pushed))
    assert results[0].fetched and pushed == [] and copied == [["m1.json", "out/1"]]


def hashlib_md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


def test_the_push_there_resolves_its_stages_once_and_names_the_unknown_ones(shared):
    there, _, remote = shared
    from orchestrator.remote import shared as sharing

    assert sharing.push(there, "shared", ["train@1", "train@2", "nope"]) == (4, "no stage nope in dvc.yaml here")
    assert sharing.push(there, "shared", ["train@1", "train@2"]) == (0, None)  # all there already: nothing sent again
    assert len([p for p in remote.rglob("*") if p.is_file()]) == 4


# --- what comes from the cluster is data (issue 33) ------------------------------------------------


def md5_of(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def hostile(cluster: Path, tmp_path: Path, stage: str, files: dict[str, bytes], mode: int = 0o755) -> Path:
    """A copy of the cluster's project whose lock entry for ``stage`` also names ``files`` (path -> bytes),
    planted there with ``mode`` and their true md5: all a hash check can see is right."""
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    lock = yaml.safe_load((there / "dvc.lock").read_text())
    for path, data in files.items():
        (there / path).parent.mkdir(parents=True, exist_ok=True)
        (there / path).write_bytes(data)
        (there / path).chmod(mode)
        lock["stages"][stage]["outs"].append({"path": path, "hash": "md5", "md5": md5_of(data), "size": len(data)})
    (there / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    return there


HOOK = b"#!/bin/sh\ntouch hook-ran\n"


def test_an_out_the_stage_does_not_declare_here_is_refused_with_its_stage(cluster, tmp_path):
    there = hostile(cluster, tmp_path, "train@1", {".git/hooks/pre-commit": HOOK, "notes.txt": b"x"})
    here = project(tmp_path / "ws", git=True)
    results, said = run_fetch(here, there)
    by = {r.stage: r for r in results}
    assert by["train@2"].fetched and not by["train@1"].fetched and by["train@1"].refused
    why = "its entry there names '.git/hooks/pre-commit': inside .git/, where git, DVC or the orchestrator keep their state"
    assert said.count(f"refused train@1: {why}") == 1, said
    assert not (here / ".git/hooks/pre-commit").exists() and not (here / "out/1").exists()
    assert list(yaml.safe_load((here / "dvc.lock").read_text())["stages"]) == ["train@2"]

    there = hostile(cluster, tmp_path / "b", "train@1", {"notes.txt": b"x"})  # a plain file, but not an out of train@1 here
    results, said = run_fetch(project(tmp_path / "ws2"), there, ["train@1"])
    assert results[0].refused and "'notes.txt', which this project's dvc.yaml does not declare an out of train@1" in said[-1], said


def test_a_stage_this_dvc_yaml_does_not_define_is_skipped_and_nothing_of_it_placed(cluster, tmp_path):
    """An item that left the matrix is still in the cluster's dvc.lock: said and skipped, each
    later fetch exiting 0 (it failed every one), and nothing of it written here."""
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    lock = yaml.safe_load((there / "dvc.lock").read_text())
    lock["stages"]["ghost"] = json.loads(json.dumps(lock["stages"]["train@1"]))  # a copy: no YAML alias
    (there / "dvc.lock").write_text(yaml.safe_dump(lock))
    here = project(tmp_path / "ws")
    results, said = run_fetch(here, there)
    assert [(r.stage, r.fetched, r.refused) for r in results] == [
        ("ghost", False, False),
        ("train@1", True, False),
        ("train@2", True, False),
    ]
    assert "skipped ghost: not a stage of this project's dvc.yaml (an item that left the matrix?): not fetched" in said
    assert "ghost" not in (here / "dvc.lock").read_text()


@pytest.mark.parametrize(
    ("out", "why"),
    [
        (".GIT/hooks", "inside .GIT/"),  # .git/hooks itself DVC refuses as an out (ignored by .git)
        (".orchestrator/x", "inside .orchestrator/"),
        ("params.yaml", "one of the pipeline's own files"),
        ("sub/.gitignore", "one of the pipeline's own files"),
    ],
)
def test_state_folders_and_pipeline_files_are_never_placed_even_when_dvc_yaml_declares_them(tmp_path, out, why):
    here = project(tmp_path / "ws")
    (here / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"evil": {"cmd": "true", "outs": [out]}}}))
    lock = yaml.safe_dump(
        {"schema": "2.0", "stages": {"evil": {"cmd": "true", "outs": [{"path": out, "hash": "md5", "md5": md5_of(b"x")}]}}}
    )
    source = tmp_path / "there"
    (source / out).parent.mkdir(parents=True)
    (source / out).write_bytes(b"x")
    calls: list = []
    results = fetching.fetch(here, lock, "login:/c", [], ["evil"], copier(source, calls), print)
    assert results[0].refused and why in results[0].why and calls == []
    assert not (here / out).exists()


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (".git/hooks/pre-commit", "inside .git/"),
        ("sub/.Git/config", "inside .Git/"),
        ("a/.dvc/config", "inside .dvc/"),
        ("data.dvc", "one of the pipeline's own files"),
        ("dvc.lock", "one of the pipeline's own files"),
        ("x/.dvcignore", "one of the pipeline's own files"),
        ("out/../../x", "not inside the project"),
        ("/etc/passwd", "an absolute path"),
        ("a\0b", "not a plain path"),
    ],
)
def test_paths_never_placed(path, why):
    assert why in trust.path_problem(path)


def test_a_folder_out_holding_a_git_folder_or_a_fifo_is_refused(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    (there / "out/1/.git/hooks").mkdir(parents=True)
    (there / "out/1/.git/hooks/pre-commit").write_bytes(HOOK)
    os.mkfifo(there / "out/2/pipe")

    def copy(paths, into):  # as rsync -a did: the FIFO made here too
        def one(src, dst):
            os.mkfifo(dst) if stat.S_ISFIFO(os.lstat(src).st_mode) else shutil.copy2(src, dst)

        for path in paths:
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(there / path, into / path, copy_function=one) if (there / path).is_dir() else one(there / path, into / path)
        return Completed(("rsync",), 0, "", "")

    lock = yaml.safe_load((there / "dvc.lock").read_text())
    lock["stages"]["train@1"]["outs"][0]["md5"] = dir_md5(there / "out/1", tmp_path)  # the hash a DVC there would record
    (there / "dvc.lock").write_text(yaml.safe_dump(lock))
    here = project(tmp_path / "ws")
    results, said = run_fetch(here, there, copy=copy)
    assert [(r.stage, r.refused) for r in results] == [("train@1", True), ("train@2", True)], said
    assert "out/1/.git: inside .git/, where git, DVC or the orchestrator keep their state: never placed" in results[0].problems
    assert results[1].problems == ["out/2/pipe: not a regular file or folder (a FIFO): never placed"]
    assert not (here / "out").exists() and not (here / "dvc.lock").exists()


def dir_md5(folder: Path, scratch: Path) -> str:
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db.local import LocalHashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    _, _, obj = build(LocalHashFileDB(fs, str(scratch / "odb")), str(folder), fs, "md5")
    return obj.hash_info.value


def test_files_get_the_umask_mode_not_the_clusters_and_the_lock_keeps_its_mode(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    (there / "out/1/w.txt").chmod(0o4755)  # copy2, as rsync -a, keeps it
    (there / "m1.json").chmod(0o777)
    here = project(tmp_path / "ws")
    (here / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {}}))
    (here / "dvc.lock").chmod(0o664)
    old = os.umask(0o027)
    try:
        results, said = run_fetch(here, there, ["train@1"])
    finally:
        os.umask(old)
    assert results[0].fetched, said
    assert stat.S_IMODE((here / "out/1/w.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((here / "m1.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((here / "out/1").stat().st_mode) == 0o750
    assert stat.S_IMODE((here / "dvc.lock").stat().st_mode) == 0o664

    (here / "dvc.lock").unlink()  # a new lock: the mode the umask gives, not mkstemp's 0600
    run_fetch(here, there, ["train@1"])
    assert stat.S_IMODE((here / "dvc.lock").stat().st_mode) == 0o666 & ~old


def test_only_checked_fields_reach_the_local_lock(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    lock = yaml.safe_load((there / "dvc.lock").read_text())
    lock["stages"]["train@1"]["outs"][0] |= {"isexec": True, "size": 1}  # a size this side counts itself
    lock["stages"]["train@2"]["frozen"] = True  # not a lock field
    (there / "dvc.lock").write_text(yaml.safe_dump(lock))
    here = project(tmp_path / "ws")
    results, said = run_fetch(here, there)
    assert [(r.stage, r.fetched) for r in results] == [("train@1", True), ("train@2", False)], said
    assert results[1].refused and "train@2" in said[-1] and "extra keys not allowed" in said[-1], said
    written = yaml.safe_load((here / "dvc.lock").read_text())["stages"]["train@1"]
    clean = yaml.safe_load((cluster / "dvc.lock").read_text())["stages"]["train@1"]
    assert written == clean


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20)
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("schema: '2.0'\nstages:\n  train@1:\n    cmd: x\n    deps: &d [{path: a}]\n    params: {p: *d}\n", "anchors or aliases"),
        ("stages:\n  laughs:\n    " + BILLION_LAUGHS.replace("\n", "\n    "), "anchors or aliases"),
        ("stages: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than"),
        ("stages: !!binary aGVsbG8=\n", "a bytes value"),
        ("stages: {1: {}}\n", "a key that is not text"),
    ],
)
def test_a_lock_that_is_not_plain_data_is_refused_at_once(tmp_path, text, why):
    here = project(tmp_path / "ws")
    started = time.monotonic()
    with pytest.raises(fetching.FetchRefused) as caught:
        fetching.fetch(here, text, "login:/c", [], ["train"], copier(tmp_path), print)
    assert time.monotonic() - started < 5 and why in caught.value.headline and caught.value.exit_code == 1
    assert caught.value.headline.startswith("the dvc.lock at login:/c ") and not (here / "dvc.lock").exists()


def test_a_lock_over_the_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(trust, "MAX_LOCK_BYTES", 1024)
    with pytest.raises(fetching.FetchRefused, match="is over 0 MiB: not read"):
        fetching.fetch(tmp_path, "stages: {}\n" + "#" * 1024, "login:/c", [], [], copier(tmp_path), print)


def test_a_damaged_local_lock_is_named_before_anything_moves(cluster, tmp_path):
    here = project(tmp_path / "ws")
    (here / "dvc.lock").write_text(BILLION_LAUGHS)
    calls: list = []
    with pytest.raises(fetching.FetchError, match=r"the dvc.lock at dvc.lock here has YAML anchors or aliases .*fix or remove it"):
        run_fetch(here, cluster, copy=copier(cluster, calls))
    assert calls == [] and not (here / "out").exists()


def test_a_listing_in_the_shared_remote_naming_a_path_outside_its_folder_is_not_laid_out(tmp_path):
    from orchestrator.remote import shared

    assert not shared._inside(("..", "x")) and not shared._inside(("a", "")) and not shared._inside(())
    assert shared._inside(("a", "b.txt"))


# Paths a hostile lock would name, and random text besides.
PATHS = st.one_of(
    st.sampled_from(["out/1", "out/1/", "./out/1", "out//1", "out/1/..", "../out/1", "/out/1", ".git/hooks/pre-commit", "OUT/1"]),
    st.sampled_from(["m1.json", ".GIT/x", "out/1/.git", "params.yaml", "dvc.lock", "a\0b", "out\\1", "", ".", "..", "x.dvc"]),
    st.text(alphabet=st.sampled_from("ab./\\\0.-_gitdvc"), max_size=24),
    st.text(max_size=12),
    st.integers(),
    st.none(),
)
MD5S = st.one_of(st.just("0" * 32), st.just("f" * 32 + ".dir"), st.text(max_size=40), st.integers(), st.none())
OUT = st.one_of(
    st.fixed_dictionaries({"path": PATHS, "md5": MD5S}, optional={"hash": st.sampled_from(["md5", "sha256", 1])}),
    st.lists(st.integers(), max_size=2),
    st.text(max_size=4),
    st.none(),
)
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | st.binary(max_size=3),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3) | st.dictionaries(st.text(max_size=4) | st.integers(), inner, min_size=1, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = {
    "cmd": JUNK | st.just("python train.py"),
    "deps": JUNK | st.just([{"path": "a", "md5": "0" * 32}]),
    "params": JUNK,
    "frozen": JUNK,
}
ENTRY = st.one_of(
    st.fixed_dictionaries({"outs": st.one_of(st.lists(OUT, max_size=4), OUT)}, optional=FIELDS),
    st.lists(OUT, max_size=2),
    st.none(),
    st.text(),
)


@settings(max_examples=examples(600), deadline=None)
@given(entry=ENTRY, name=st.sampled_from(["train@1", "ghost", "a\x1b[2Jb"]))
def test_verified_outs_are_declared_outs_inside_the_project_or_an_orchestrator_error(entry, name):
    declared = {"out/1": fetching.Declared("out/1", True), "m1.json": fetching.Declared("m1.json", False)}
    root = Path("/project")
    try:
        outs = trust.verify_outs(name, entry, None if name == "ghost" else declared, frozenset({"params.yaml"}))
        fields = trust.entry_fields(name, entry)
    except OrchestratorError as exc:
        assert exc.exit_code == 1 and "\x1b" not in exc.headline and "\0" not in exc.headline
        return
    assert set(fields) <= {"cmd", "deps", "params"} and trust.plain_problem(fields) is None
    for out in outs:
        assert out.path in declared and out.declared == declared[out.path].path
        assert (root / out.path).resolve().is_relative_to(root) and trust.MD5.fullmatch(out.md5)


@pytest.mark.parametrize("side", ["the cluster's", "this side's"])
def test_a_dvc_lock_cut_short_by_a_killed_dvc_process_names_orchestrator_record(cluster, tmp_path, side):
    """dvc.lock as a DVC process killed mid-write leaves it (a prefix of what DVC writes): the
    one command that mends it, on the side that has it, and nothing moved."""
    here = project(tmp_path / "ws")
    cut = "schema: '2.0'\nstages:\n  train@1:\n    cmd: [x"
    calls: list = []
    if side == "this side's":
        (here / "dvc.lock").write_text(cut)
        with pytest.raises(OrchestratorError) as caught:
            run_fetch(here, cluster, copy=copier(cluster, calls))
        assert "run `orchestrator record`" in caught.value.render() and (here / "dvc.lock").read_text() == cut
    else:
        with pytest.raises(fetching.FetchError) as caught:
            fetching.fetch(here, cut, "login:/c", [], ["train"], copier(cluster, calls), print)
        assert "the cluster's dvc.lock at login:/c was cut short" in caught.value.headline
        assert "`orchestrator record --remote`" in caught.value.render() and not (here / "dvc.lock").exists()
    assert calls == [] and caught.value.exit_code == 2
