"""orchestrator fetch's logic: which stages, the lock merge, and the hash check against the cluster's dvc.lock,
with a copier that copies from a local "cluster" folder instead of rsync over ssh."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.remote import fetch as fetching
from orchestrator.remote.connection import RemoteError
from orchestrator.util.runner import Completed

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
    assert dvc(where, "init", *([] if git else ["--no-scm"]), "-q").returncode == 0
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


def run_fetch(here: Path, source: Path, targets=(), copy=None, push=None) -> tuple[list[fetching.Result], list[str]]:
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


def test_a_file_changed_there_after_the_run_is_refused_and_its_entry_not_written(cluster, tmp_path):
    there = tmp_path / "there"
    shutil.copytree(cluster, there)
    (there / "out/2/w.txt").write_text("tampered\n")
    here = project(tmp_path / "ws")
    results, said = run_fetch(here, there)
    by = {r.stage: r for r in results}
    assert by["train@1"].fetched and not by["train@2"].fetched
    assert "hash mismatch" in by["train@2"].problems[0] and by["train@2"].problems[0].startswith("out/2:")
    assert any(line.startswith("skipped train@2: not taken, its dvc.lock entry not written") for line in said)
    assert list(yaml.safe_load((here / "dvc.lock").read_text())["stages"]) == ["train@1"]
    assert not (here / "out/2").exists() and not (here / "m2.json").exists()


def test_a_metrics_file_changed_there_is_refused_too(cluster, tmp_path):
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
    lock = yaml.safe_dump({"stages": {"evil": {"outs": [{"path": "../x", "hash": "md5", "md5": "d41d8cd98f00b204e9800998ecf8427e"}]}}})
    here = project(tmp_path / "ws")
    calls: list = []
    results = fetching.fetch(here, lock, "login:/c", [], [], copier(tmp_path, calls), print)
    assert not results[0].fetched and "outside the project: ../x" in results[0].why and calls == []


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
    with pytest.raises(fetching.FetchError, match="not one DVC wrote"):
        fetching.fetch(tmp_path, "- a list\n", "login:/c", [], [], copier(tmp_path), print)


def test_merge_replaces_only_the_fetched_stages():
    local = yaml.safe_dump({"schema": "2.0", "stages": {"a": {"cmd": "old"}, "b": {"cmd": "b"}}})
    merged = yaml.safe_load(fetching.merge(local, {"a": {"cmd": "new"}, "c": {"cmd": "c"}}))
    assert merged == {"schema": "2.0", "stages": {"a": {"cmd": "new"}, "b": {"cmd": "b"}, "c": {"cmd": "c"}}}
    assert yaml.safe_load(fetching.merge(None, {"a": {}})) == {"schema": "2.0", "stages": {"a": {}}}


def test_outs_of_tells_dvc2_from_dvc3_entries():
    outs = fetching.outs_of({"outs": [{"path": "a", "hash": "md5", "md5": "x", "size": 1}, {"path": "d", "md5": "y.dir"}]})
    assert [(o.path, o.hash_name, o.isdir) for o in outs] == [("a", "md5", False), ("d", "md5-dos2unix", True)]


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
            "rsync", "-a", "-r", "--partial", "-s", "-e", "ssh -o 'ControlPath=~/.ssh/orchestrator-%C'", "--from0",
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
