"""`orchestrator fetch` from a cluster folder that someone else can write (issue 33): a second local user
of the project's group plants files and rewrites dvc.lock there, with hashes that match; the workstation
refuses each stage naming what it refused (exit 1), places nothing outside the declared outs, no link,
FIFO or setuid bit, and no hook of theirs runs at the next `git commit`. The `login` fixture: conftest.py
beside this."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_remote_fetch import GIT_ID, dvc, finish_there

pytestmark = pytest.mark.ssh

USER, GROUP = "orch-mallory", "orch-project"


@pytest.fixture(scope="module")
def mallory():
    """A second, unprivileged local user (uid, gid), in the project's group; removed after if made here."""
    if os.geteuid() != 0:
        pytest.skip("making a second local user needs root")
    made = []
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
        made.append(["groupdel", GROUP])
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-N", "-g", GROUP, "-s", "/bin/sh", USER], check=True, capture_output=True)
        made.insert(0, ["userdel", USER])
    yield pwd.getpwnam(USER).pw_uid, grp.getgrnam(GROUP).gr_gid
    for argv in made:
        subprocess.run(argv, check=False, capture_output=True)


@pytest.fixture
def shared(login, mallory):
    """The login fixture with its cluster root in a folder the second user can reach (not under root's 0700 pytest folder)."""
    root = Path(tempfile.mkdtemp(prefix="orch-shared-", dir="/tmp"))
    root.chmod(0o755)
    profile = yaml.safe_load(login.profile.read_text())
    profile["login"]["root"] = str(root)
    login.profile.write_text(yaml.safe_dump(profile, sort_keys=False))
    yield replace(login, cluster_root=root)
    shutil.rmtree(root, ignore_errors=True)


def sent_and_finished(login, tmp_path: Path, items: int) -> tuple[Path, Path]:
    """A workstation project sent to the cluster, its items finished there (as a run leaves them), the
    folder then opened to the project's group, as a shared /scratch/<project> is."""
    project = login.workstation(tmp_path / "ws" / "proj", items=items)
    synced = login.orchestrator("remote", "sync", cwd=project)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    folder = login.cluster_root / "proj"
    finish_there(folder)
    subprocess.run(["chgrp", "-R", GROUP, str(folder)], check=True)
    subprocess.run(["chmod", "-R", "g+rwX", str(folder)], check=True)
    return project, folder


def as_mallory(mallory, folder: Path, script: str, text: str | None = None) -> None:
    uid, gid = mallory
    done = subprocess.run(
        ["sh", "-c", script], cwd=folder, user=uid, group=gid, extra_groups=[gid], input=text, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def rewrite_lock(mallory, folder: Path, edit) -> None:
    lock = yaml.safe_load((folder / "dvc.lock").read_text())
    edit(lock["stages"])
    as_mallory(mallory, folder, "cat > dvc.lock", yaml.safe_dump(lock, sort_keys=False))


def dir_md5(files: dict[str, bytes], scratch: Path) -> str:
    """The `.dir` hash DVC records for a folder of these files (what a DVC there following links would write)."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db.local import LocalHashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    folder = scratch / "folder"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    fs = LocalFileSystem()
    _, _, obj = build(LocalHashFileDB(fs, str(scratch / "odb")), str(folder), fs, "md5")
    return obj.hash_info.value


def contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_a_hook_named_in_the_clusters_lock_is_refused_and_never_runs(shared, mallory, tmp_path):
    project, folder = sent_and_finished(shared, tmp_path, items=2)
    marker = tmp_path / "hook-ran"
    hook = f"#!/bin/sh\ntouch {marker}\n"
    as_mallory(mallory, folder, "mkdir -p .git/hooks && cat > .git/hooks/pre-commit && chmod 755 .git/hooks/pre-commit", hook)
    planted = {"path": ".git/hooks/pre-commit", "hash": "md5", "md5": hashlib.md5(hook.encode()).hexdigest(), "size": len(hook)}
    rewrite_lock(mallory, folder, lambda stages: stages["probe@layout0"]["outs"].append(planted))

    done = shared.orchestrator("fetch", cwd=project)
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in text, text
    why = "inside .git/, where git, DVC or the orchestrator keep their state"
    why = f"refused probe@layout0: its entry there names '.git/hooks/pre-commit': {why}"
    assert text.count(why) == 1 and "\nfetched probe@layout1: 3 file(s)" in done.stdout, text
    assert not (project / ".git/hooks/pre-commit").exists() and not (project / "out/0").exists()
    assert list(yaml.safe_load((project / "dvc.lock").read_text())["stages"]) == ["probe@layout1"]
    committed = subprocess.run(
        [*GIT_ID, "commit", "-q", "--allow-empty", "-m", "after a fetch"], cwd=project, capture_output=True, text=True
    )
    assert committed.returncode == 0, committed.stderr
    assert not marker.exists(), "the cluster's hook ran on the workstation"


def test_links_fifos_and_setuid_bits_from_the_cluster_are_never_placed(shared, mallory, tmp_path):
    project, folder = sent_and_finished(shared, tmp_path, items=3)
    had = {i: contents(folder / f"out/{i}") for i in range(3)}
    tool = b"#!/bin/sh\necho hi\n"
    as_mallory(mallory, folder, "ln -s /etc/passwd out/0/passwd")  # a DVC there follows it: the lock records /etc/passwd's bytes
    as_mallory(mallory, folder, "cat > out/1/tool && chmod 4755 out/1/tool", tool.decode())
    as_mallory(mallory, folder, "mkfifo out/2/pipe")  # hashing it here would wait forever for a writer
    there = {
        0: {**had[0], "passwd": Path("/etc/passwd").read_bytes()},
        1: {**had[1], "tool": tool},
        2: {**had[2], "pipe": b""},
    }
    md5s = {f"probe@layout{i}": dir_md5(files, tmp_path / f"scratch{i}") for i, files in there.items()}

    def edit(stages):
        for name, md5 in md5s.items():
            stages[name]["outs"][0]["md5"] = md5

    rewrite_lock(mallory, folder, edit)
    (project / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (project / "dvc.lock").chmod(0o644)

    done = shared.orchestrator("fetch", cwd=project, timeout=120)
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in text, text
    assert "refused probe@layout0: not taken, its dvc.lock entry not written" in text, text
    assert "out/0/passwd: not a regular file or folder there (a link, FIFO, device or socket)" in text, text
    assert "refused probe@layout2: not taken" in text and "out/2/pipe: not a regular file or folder there" in text, text
    assert "\nfetched probe@layout1: 4 file(s)" in done.stdout, text
    assert not (project / "out/0").exists() and not (project / "out/2").exists()
    placed = project / "out/1/tool"
    mask = os.umask(0o022)
    os.umask(mask)
    assert placed.read_bytes() == tool and stat.S_IMODE(placed.stat().st_mode) == 0o666 & ~mask  # no setuid, no exec
    assert placed.stat().st_uid == os.geteuid(), "the cluster's owner was kept"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask for p in (project / "out/1").iterdir())
    assert stat.S_IMODE((project / "dvc.lock").stat().st_mode) == 0o644  # the merged lock keeps the mode it had
    status = dvc(project, "status", "probe@layout1", "--json")
    assert status.returncode == 0 and status.stdout.strip() == "{}", status.stdout + status.stderr


LAUGHS = "".join(f"- &l{i} [" + ", ".join([f"*l{i - 1}" if i else "x"] * 9) + "]\n" for i in range(12))


def test_a_billion_laughs_lock_is_refused_at_once_and_dvc_status_still_answers(shared, mallory, tmp_path):
    project, folder = sent_and_finished(shared, tmp_path, items=1)
    lock = (folder / "dvc.lock").read_text()
    deps = "    deps:\n" + "".join(f"    {line}\n" for line in LAUGHS.splitlines())
    as_mallory(mallory, folder, "cat > dvc.lock", lock.replace("    deps:\n", deps + "    old_deps:\n", 1))

    started = time.monotonic()
    done = shared.orchestrator("fetch", cwd=project, timeout=120)
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in text and text.count("error:") == 1, text
    assert f"the dvc.lock at login-node:{folder} has YAML anchors or aliases (DVC writes none): not read, nothing fetched" in text, text
    assert time.monotonic() - started < 60
    assert not (project / "dvc.lock").exists() and not (project / "out").exists()
    status = subprocess.run(["dvc", "status", "--json"], cwd=project, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
